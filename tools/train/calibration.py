#!/usr/bin/python3
"""Write models/kjv-calibration.txt: the calibration text GPTQ collects its statistics on.

    python3 tools/train/calibration.py --out models

Verse i (0-based, Bible order) is taken when i % 60 == 30, it is a training verse (train.py holds out
i % 50 == 49) and its text is not also the text of a held-out verse (formulas such as "And the LORD
spake unto Moses, saying," recur in both splits). The text samples the whole Bible evenly and shares
no line with models/kjv-heldout.txt: 514 verses, one per line, 68,765 bytes, 68 windows of 256
positions for the demo target. Needs only the `bible` program (Debian package bible-kjv), not torch.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import is_heldout, read_corpus  # noqa: E402

CALIBRATION_EVERY = 60
CALIBRATION_OFFSET = 30


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', default='models', help='folder to write kjv-calibration.txt into')
    args = ap.parse_args()
    verses = read_corpus()
    heldout = {v for i, v in enumerate(verses) if is_heldout(i)}
    chosen = [v for i, v in enumerate(verses)
              if i % CALIBRATION_EVERY == CALIBRATION_OFFSET and not is_heldout(i) and v not in heldout]
    path = os.path.join(args.out, 'kjv-calibration.txt')
    text = '\n'.join(chosen) + '\n'
    with open(path, 'w') as f:
        f.write(text)
    print(f'{path}: {len(chosen)} verses, {len(text.encode())} bytes')


if __name__ == '__main__':
    main()
