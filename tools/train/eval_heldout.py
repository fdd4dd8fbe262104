"""Held-out loss of a shipped model folder by the model card's protocol, over all windows or the
first K (a quick look; the card and weft's test use all of them).

    /usr/bin/python3 tools/train/eval_heldout.py models/kjv-target [K]
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from train import load_shipped, load_tokenizer, windows  # noqa: E402


def main():
    folder = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else None
    model = load_shipped(folder).eval()
    text = open(os.path.join(os.path.dirname(folder.rstrip('/')), 'kjv-heldout.txt')).read().rstrip('\n')
    ids = load_tokenizer(folder).encode(text)
    ws = windows(ids, 256, model.cfg.bos_token_id)[:k]
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in ws:
            logits = model(torch.tensor([x]))[0].float()
            total += F.cross_entropy(logits, torch.tensor(y), reduction='sum').item()
            count += len(y)
    loss = total / count
    print(json.dumps({'model': folder, 'windows': len(ws), 'tokens': count, 'loss': round(loss, 4),
                      'ppl': round(math.exp(loss), 2)}))


if __name__ == '__main__':
    main()
