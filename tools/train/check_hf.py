#!/usr/bin/python3
"""Cross-check the trained files with Hugging Face's own Python packages, where they are installed
(they are not needed for training): the Rust `tokenizers` must give the same ids as bpe.py on every
verse, the held-out file and a few odd strings, and `safetensors` must read model.safetensors to the
same tensors as safetensors_io.py.

    PYTHONPATH=/path/to/tokenizers_and_safetensors /usr/bin/python3 tools/train/check_hf.py models
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import safetensors_io  # noqa: E402
from train import BOS, EOS, read_corpus  # noqa: E402

ODD = ["Hello, World! It's 2024 -- isn't it?", '  two  spaces\n\nand\ttabs  ', 'Ünïcödé café 日本語 🙂',
       "they'll we've I'm you'd it's THEY'RE", 'numbers 12345 and 3.14159', '', 'a\u00a0b\u2003c  \n x']


def main():
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    root = sys.argv[1] if len(sys.argv) > 1 else 'models'
    tj_path = os.path.join(root, 'kjv-target', 'tokenizer.json')
    rust = Tokenizer.from_file(tj_path)
    m = json.load(open(tj_path, encoding='utf-8'))['model']
    ours = bpe.BPETokenizer(m['vocab'], [tuple(p) for p in m['merges']], BOS, EOS)
    held = open(os.path.join(root, 'kjv-heldout.txt')).read()
    texts = read_corpus() + [held, held.rstrip('\n')] + ODD
    bad = 0
    for t in texts:
        ids = rust.encode(t, add_special_tokens=False).ids
        if ids != ours.encode(t) or rust.decode(ids) != t:
            bad += 1
            if bad <= 3:
                print('mismatch:', repr(t[:80]), ids[:16], ours.encode(t)[:16])
    print(f'tokenizers {getattr(sys.modules["tokenizers"], "__version__", "?")}: {len(texts)} texts, {bad} mismatches; '
          f'"And God said" with specials -> {rust.encode("And God said").ids}')
    for name in ('kjv-target', 'kjv-draft'):
        path = os.path.join(root, name, 'model.safetensors')
        a, b = load_file(path), safetensors_io.load(path)
        same = a.keys() == b.keys() and all(np.array_equal(a[k].astype(np.float32), b[k].numpy()) for k in a)
        bad += 0 if same else 1
        print(f'{name}: safetensors reads {len(a)} tensors, {"same" if same else "DIFFERENT"}')
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
