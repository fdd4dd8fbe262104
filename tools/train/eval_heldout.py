"""Held-out loss of a trained model folder by the model card's protocol, over all windows or the
first K (the figure weft's test reproduces: evaluating every window through weft's CPU reference
takes minutes on this machine, the first windows seconds).

    /usr/bin/python3 tools/train/eval_heldout.py models/kjv-target [K]
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import bpe  # noqa: E402
import safetensors_io  # noqa: E402
from model import LlamaConfig, LlamaForCausalLM  # noqa: E402
from train import windows  # noqa: E402


def load(folder):
    c = json.load(open(os.path.join(folder, 'config.json')))
    cfg = LlamaConfig(**{k: c[k] for k in LlamaConfig.__dataclass_fields__ if k in c})
    m = LlamaForCausalLM(cfg)
    sd = safetensors_io.load(os.path.join(folder, 'model.safetensors'))
    sd.setdefault('lm_head.weight', sd['model.embed_tokens.weight'])
    m.load_state_dict(sd, strict=True)
    if c.get('tie_word_embeddings'):
        m.lm_head.weight = m.model.embed_tokens.weight
    return cfg, m.eval()


def tokenizer(folder):
    tj = json.load(open(os.path.join(folder, 'tokenizer.json')))
    vocab = tj['model']['vocab']
    merges = [tuple(m.split(' ')) if isinstance(m, str) else tuple(m) for m in tj['model']['merges']]
    return bpe.BPETokenizer(vocab, merges, '<|bos|>', '<|eos|>')


def main():
    folder = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else None
    cfg, model = load(folder)
    text = open(os.path.join(os.path.dirname(folder.rstrip('/')), 'kjv-heldout.txt')).read().rstrip('\n')
    ids = tokenizer(folder).encode(text)
    ws = windows(ids, 256, cfg.bos_token_id)[:k]
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
