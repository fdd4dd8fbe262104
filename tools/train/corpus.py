"""The KJV corpus and its train/held-out split, shared by train.py and calibration.py (no torch)."""

import re
import shutil
import subprocess
import sys

HELDOUT_EVERY = 50  # verse i (0-based, in Bible order) is held out when i % 50 == 49


def read_corpus():
    """All verses of the KJV in order, verse references stripped."""
    if shutil.which('bible') is None:
        sys.exit('error: the `bible` program is missing; install it with: apt-get install bible-kjv')
    raw = subprocess.run(['bible', '-f', 'Gen1:1-Rev22:21'], check=True, capture_output=True, text=True).stdout
    verses = []
    for line in raw.split('\n'):
        if not line.strip():
            continue
        m = re.match(r'^\S+?\d+:\d+ (.*)$', line)  # "Ge1:1 In the beginning ..." / "1Sm1:1 Now ..."
        if not m:
            sys.exit(f'error: unexpected line from `bible`: {line!r}')
        verses.append(m.group(1).strip())
    if len(verses) != 31102:
        print(f'warning: expected 31102 verses, got {len(verses)}', file=sys.stderr, flush=True)
    return verses


def is_heldout(i):
    """Verse i (0-based, Bible order) belongs to the held-out split."""
    return i % HELDOUT_EVERY == HELDOUT_EVERY - 1
