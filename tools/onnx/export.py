"""Exports a Hugging Face-layout Llama checkpoint (the bundled demo models) to the ONNX layout that
transformers.js loads: <out>/config.json, generation_config.json, tokenizer files, and
onnx/model.onnx with optimum's decoder-with-past interface:

  inputs   input_ids [B, T] int64, attention_mask [B, P+T] int64, position_ids [B, T] int64,
           past_key_values.{i}.key / .value [B, n_kv_heads, P, head_dim] float32
  outputs  logits [B, T, vocab] float32, present.{i}.key / .value [B, n_kv_heads, P+T, head_dim]

The maths is tools/train/model.py's (HF LlamaForCausalLM), weights in f32. After exporting, the
script runs tools/onnx/check.mjs, which feeds one prompt through the ONNX file (onnxruntime-node) and
through weft's plain-TS reference forward and fails if their logits differ.

Usage: /usr/bin/python3 tools/onnx/export.py models/kjv-target bench/.cache/onnx/kjv-target
"""

import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'train'))
from model import LlamaConfig, LlamaForCausalLM, rotate_half  # noqa: E402
from safetensors_io import load  # noqa: E402

# A finite "minus infinity": masked scores stay finite in f32, so softmax never sees inf - inf.
NEG = -1e9


class WithPast(torch.nn.Module):
    """LlamaForCausalLM's forward with a KV cache, positions and a padding mask as inputs."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        c = lm.cfg
        self.register_buffer(
            'inv_freq', 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim))
        )

    def forward(self, input_ids, attention_mask, position_ids, *past):
        c = self.lm.cfg
        B, T = input_ids.shape
        P = past[0].shape[2]
        freqs = position_ids.float()[:, :, None] * self.inv_freq[None, None, :]  # [B, T, hd/2]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, hd]
        cos, sin = emb.cos(), emb.sin()
        # Query t (absolute P + t) sees key j iff j <= P + t and attention_mask[j] = 1.
        q_pos = torch.arange(T)[:, None] + P
        k_pos = torch.arange(P + T)[None, :]
        causal = (k_pos <= q_pos)[None, None]  # [1, 1, T, P+T]
        keep = causal & (attention_mask[:, None, None, :] > 0)
        mask = torch.where(keep, torch.zeros(()), torch.full((), NEG))
        x = self.lm.model.embed_tokens(input_ids)
        presents = []
        rep = c.num_attention_heads // c.num_key_value_heads
        for i, layer in enumerate(self.lm.model.layers):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)
            k = a.k_proj(h).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            v = a.v_proj(h).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = torch.cat([past[2 * i], k], dim=2)  # [B, kvh, P+T, hd]
            v = torch.cat([past[2 * i + 1], v], dim=2)
            presents += [k, v]
            S = k.shape[2]
            kr = k[:, :, None].expand(B, c.num_key_value_heads, rep, S, c.head_dim).reshape(B, -1, S, c.head_dim)
            vr = v[:, :, None].expand(B, c.num_key_value_heads, rep, S, c.head_dim).reshape(B, -1, S, c.head_dim)
            att = F.softmax((q * (1.0 / math.sqrt(c.head_dim))) @ kr.transpose(-2, -1) + mask, dim=-1)
            y = (att @ vr).transpose(1, 2).reshape(B, T, -1)
            x = x + a.o_proj(y)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.lm.lm_head(self.lm.model.norm(x))
        return (logits, *presents)


def load_model(src):
    with open(os.path.join(src, 'config.json')) as f:
        hf = json.load(f)
    cfg = LlamaConfig(
        vocab_size=hf['vocab_size'],
        hidden_size=hf['hidden_size'],
        intermediate_size=hf['intermediate_size'],
        num_hidden_layers=hf['num_hidden_layers'],
        num_attention_heads=hf['num_attention_heads'],
        num_key_value_heads=hf['num_key_value_heads'],
        max_position_embeddings=hf['max_position_embeddings'],
        rms_norm_eps=hf['rms_norm_eps'],
        rope_theta=hf['rope_theta'],
        tie_word_embeddings=hf['tie_word_embeddings'],
    )
    if cfg.head_dim != hf.get('head_dim', cfg.head_dim):
        sys.exit(f'{src}/config.json: head_dim {hf["head_dim"]} != hidden/heads {cfg.head_dim}')
    lm = LlamaForCausalLM(cfg)
    state = load(os.path.join(src, 'model.safetensors'))
    if cfg.tie_word_embeddings:
        state['lm_head.weight'] = state['model.embed_tokens.weight']
    lm.load_state_dict(state, strict=True)
    return lm.eval()


def export(src, out):
    lm = load_model(src)
    c = lm.cfg
    os.makedirs(os.path.join(out, 'onnx'), exist_ok=True)
    for name in ('config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'):
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    B, T, P = 1, 3, 2
    past_names, present_names, past = [], [], []
    for i in range(c.num_hidden_layers):
        for kv in ('key', 'value'):
            past_names.append(f'past_key_values.{i}.{kv}')
            present_names.append(f'present.{i}.{kv}')
            past.append(torch.zeros(B, c.num_key_value_heads, P, c.head_dim))
    args = (
        torch.ones(B, T, dtype=torch.int64),
        torch.ones(B, P + T, dtype=torch.int64),
        torch.arange(P, P + T, dtype=torch.int64)[None],
        *past,
    )
    axes = {
        'input_ids': {0: 'batch_size', 1: 'sequence_length'},
        'attention_mask': {0: 'batch_size', 1: 'total_sequence_length'},
        'position_ids': {0: 'batch_size', 1: 'sequence_length'},
        'logits': {0: 'batch_size', 1: 'sequence_length'},
    }
    for n in past_names:
        axes[n] = {0: 'batch_size', 2: 'past_sequence_length'}
    for n in present_names:
        axes[n] = {0: 'batch_size', 2: 'total_sequence_length'}
    path = os.path.join(out, 'onnx', 'model.onnx')
    with torch.no_grad():
        torch.onnx.export(
            WithPast(lm),
            args,
            path,
            input_names=['input_ids', 'attention_mask', 'position_ids', *past_names],
            output_names=['logits', *present_names],
            dynamic_axes=axes,
            opset_version=14,
            do_constant_folding=True,
        )
    print(f'wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)')
    return path


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    export(src, out)
    # Logits of the ONNX file (onnxruntime-node) against weft's reference forward on one prompt.
    check = os.path.join(HERE, 'check.mjs')
    subprocess.run(['node', check, src, os.path.join(out, 'onnx', 'model.onnx')], check=True)


if __name__ == '__main__':
    main()
