#!/usr/bin/python3
"""Train the odd-shaped tiny Qwen3.5 of the tests on KJV text: test/fixtures/qwen35-trained/.

    /usr/bin/python3 tools/train/train_qwen35_tiny.py --out test/fixtures/qwen35-trained

The shapes are tinyQwen35TextConfig's (test/fixtures/write.ts): hidden 64, 4 layers (linear,
linear, full attention, linear), 4 heads of 32 over 2 KV heads with an output gate, QK-norm and
partial rotary (8 of 32, theta 1e7), Gated DeltaNet layers of 2 key heads of 16 and 4 value heads
of 12 with a convolution of 4, an MLP of 96, zero-centred norms, tied embeddings, the tiny
byte-level tokenizer's 512 ids. It learns the KJV calibration text (models/kjv-calibration.txt)
tokenized as that tokenizer does, so its predictions have the margins of a trained model: what the
int4 agreement test needs, where a random model's flat logits flip at any rounding.

The model is written here in plain PyTorch from Hugging Face's Qwen3_5 definitions (recurrent form
of the gated delta rule, as weft's reference runs it); its held-out loss is printed, and weft's
reference must give the same loss on the written weights (test/families/qwen3-5.trained.test.ts). About
12 minutes on one CPU core. Needs python3-torch and python3-numpy (Debian), nothing from PyPI.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import BYTE_TO_CHAR, BPETokenizer  # noqa: E402
from safetensors_io import save  # noqa: E402

CONFIG = {
    'architectures': ['Qwen3_5ForCausalLM'],
    'model_type': 'qwen3_5_text',
    'vocab_size': 512,
    'hidden_size': 64,
    'intermediate_size': 96,
    'num_hidden_layers': 4,
    'layer_types': ['linear_attention', 'linear_attention', 'full_attention', 'linear_attention'],
    'num_attention_heads': 4,
    'num_key_value_heads': 2,
    'head_dim': 32,
    'linear_num_key_heads': 2,
    'linear_num_value_heads': 4,
    'linear_key_head_dim': 16,
    'linear_value_head_dim': 12,
    'linear_conv_kernel_dim': 4,
    'rms_norm_eps': 1e-6,
    'rope_parameters': {'rope_type': 'default', 'rope_theta': 10_000_000, 'partial_rotary_factor': 0.25},
    'max_position_embeddings': 256,
    'hidden_act': 'silu',
    'tie_word_embeddings': True,
    'bos_token_id': 1,
    'eos_token_id': 2,
}


def tiny_tokenizer():
    """tinyTokenizerJson of test/fixtures/write.ts: byte b is id b, then 8 merges (256-263)."""
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    merges = [tuple(m.split(' ')) for m in ['Ġ t', 'h e', 'Ġt he', 'i n', 'Ġ a', 'e r', 'o n', 'Ġ s']]
    for i, (a, b) in enumerate(merges):
        vocab[a + b] = 256 + i
    vocab['<|endoftext|>'] = 300
    return BPETokenizer(vocab, merges, '<|endoftext|>', '<|endoftext|>')


class ZeroCentredNorm(nn.Module):
    """Qwen3.5's RMSNorm: x / rms(x) · (1 + w), w stored (and initialised) near 0."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


class GatedNorm(nn.Module):
    """The DeltaNet output norm: w · rmsnorm(o) · silu(z), w plain (initialised to 1)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, o, z):
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * o * F.silu(z)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, hd = c['hidden_size'], c['head_dim']
        self.h, self.kvh, self.hd = c['num_attention_heads'], c['num_key_value_heads'], hd
        self.rot = int(hd * c['rope_parameters']['partial_rotary_factor'])
        self.theta = c['rope_parameters']['rope_theta']
        self.q_proj = nn.Linear(H, 2 * self.h * hd, bias=False)
        self.k_proj = nn.Linear(H, self.kvh * hd, bias=False)
        self.v_proj = nn.Linear(H, self.kvh * hd, bias=False)
        self.o_proj = nn.Linear(self.h * hd, H, bias=False)
        self.q_norm = ZeroCentredNorm(hd, c['rms_norm_eps'])
        self.k_norm = ZeroCentredNorm(hd, c['rms_norm_eps'])

    def rope(self, x, T):
        r = self.rot
        inv = 1.0 / (self.theta ** (torch.arange(0, r, 2).float() / r))
        f = torch.arange(T).float()[:, None] * inv[None, :]
        cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
        xr, rest = x[..., :r], x[..., r:]
        x1, x2 = xr.chunk(2, -1)
        return torch.cat([xr * cos + torch.cat([-x2, x1], -1) * sin, rest], -1)

    def forward(self, x):
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.h, 2 * self.hd)
        q, gate = qg[..., : self.hd], qg[..., self.hd :].reshape(B, T, -1)
        k = self.k_proj(x).view(B, T, self.kvh, self.hd)
        v = self.v_proj(x).view(B, T, self.kvh, self.hd)
        q = self.rope(self.q_norm(q).transpose(1, 2), T)
        k = self.rope(self.k_norm(k).transpose(1, 2), T)
        v = v.transpose(1, 2)
        rep = self.h // self.kvh
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        mask = torch.full((T, T), float('-inf')).triu(1)
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.hd) + mask, -1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y * torch.sigmoid(gate))


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c['hidden_size']
        self.kh, self.vh = c['linear_num_key_heads'], c['linear_num_value_heads']
        self.dk, self.dv = c['linear_key_head_dim'], c['linear_value_head_dim']
        self.K = c['linear_conv_kernel_dim']
        kw, vw = self.kh * self.dk, self.vh * self.dv
        self.channels = 2 * kw + vw
        self.in_proj_qkv = nn.Linear(H, self.channels, bias=False)
        self.in_proj_z = nn.Linear(H, vw, bias=False)
        self.in_proj_b = nn.Linear(H, self.vh, bias=False)
        self.in_proj_a = nn.Linear(H, self.vh, bias=False)
        self.conv1d = nn.Conv1d(self.channels, self.channels, self.K, groups=self.channels, bias=False, padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.vh))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.vh).uniform_(1, 16)))
        self.norm = GatedNorm(self.dv, c['rms_norm_eps'])
        self.out_proj = nn.Linear(vw, H, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        kw = self.kh * self.dk
        u = F.silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[..., :T]).transpose(1, 2)
        q = u[..., :kw].view(B, T, self.kh, self.dk)
        k = u[..., kw : 2 * kw].view(B, T, self.kh, self.dk)
        v = u[..., 2 * kw :].view(B, T, self.vh, self.dv)
        group = self.vh // self.kh
        q = q.repeat_interleave(group, dim=2)
        k = k.repeat_interleave(group, dim=2)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(self.dk)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(self.in_proj_b(x))  # [B, T, vh]
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        decay = g.exp()
        S = x.new_zeros(B, self.vh, self.dk, self.dv)
        outs = []
        for t in range(T):
            S = S * decay[:, t, :, None, None]
            kt = k[:, t]  # [B, vh, dk]
            kv = (S * kt[..., None]).sum(-2)  # [B, vh, dv]
            delta = (v[:, t] - kv) * beta[:, t, :, None]
            S = S + kt[..., None] * delta[..., None, :]
            outs.append((S * q[:, t][..., None]).sum(-2))
        o = torch.stack(outs, 1)  # [B, T, vh, dv]
        z = self.in_proj_z(x).view(B, T, self.vh, self.dv)
        return self.out_proj(self.norm(o, z).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c['hidden_size'], c['intermediate_size']
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        if kind == 'linear_attention':
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = ZeroCentredNorm(c['hidden_size'], c['rms_norm_eps'])
        self.post_attention_layernorm = ZeroCentredNorm(c['hidden_size'], c['rms_norm_eps'])

    def forward(self, x):
        mixer = self.linear_attn if self.kind == 'linear_attention' else self.self_attn
        x = x + mixer(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c['vocab_size'], c['hidden_size'])
        self.layers = nn.ModuleList(Layer(c, kind) for kind in c['layer_types'])
        self.norm = ZeroCentredNorm(c['hidden_size'], c['rms_norm_eps'])


class Qwen35ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = Model(c)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.05)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.model.norm(x) @ self.model.embed_tokens.weight.T  # tied head

    def hf_state_dict(self):
        sd = {}
        for k, v in self.state_dict().items():
            # nn.Conv1d's weight is [channels, 1, K], as the checkpoints store conv1d.weight.
            sd[k] = v.detach().clone()
        return sd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', default='test/fixtures/qwen35-trained')
    ap.add_argument('--text', default='models/kjv-calibration.txt')
    ap.add_argument('--steps', type=int, default=700)
    ap.add_argument('--seq', type=int, default=64)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--threads', type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tok = tiny_tokenizer()
    lines = [l for l in open(args.text, encoding='utf-8').read().split('\n') if l.strip()]
    held = lines[::20]  # every 20th verse held out
    train = [l for i, l in enumerate(lines) if i % 20 != 0]
    ids = torch.tensor(tok.encode('\n'.join(train)))
    held_ids = torch.tensor(tok.encode('\n'.join(held)))
    print(f'train {len(ids)} ids, held-out {len(held_ids)} ids')
    model = Qwen35ForCausalLM(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.steps, pct_start=0.1)
    t0 = time.time()
    for step in range(args.steps):
        starts = torch.randint(0, len(ids) - args.seq - 1, (args.batch,))
        batch = torch.stack([ids[s : s + args.seq + 1] for s in starts])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, CONFIG['vocab_size']), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f'step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)', flush=True)
    model.eval()
    with torch.no_grad():
        windows = held_ids[: (len(held_ids) - 1) // args.seq * args.seq + 1]
        losses = []
        for s in range(0, len(windows) - 1, args.seq):
            w = windows[s : s + args.seq + 1][None]
            losses.append(F.cross_entropy(model(w[:, :-1])[0], w[0, 1:]).item())
        held_loss = sum(losses) / len(losses)
    print(f'held-out loss {held_loss:.4f} nats/token over {len(losses)} windows of {args.seq}')
    os.makedirs(args.out, exist_ok=True)
    save(model.hf_state_dict(), os.path.join(args.out, 'model.safetensors'), dtype=torch.float32)
    with open(os.path.join(args.out, 'config.json'), 'w') as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(args.out, 'train-record.json'), 'w') as f:
        json.dump(
            {
                'text': args.text,
                'held_out': 'every 20th non-empty line',
                'steps': args.steps,
                'seq': args.seq,
                'batch': args.batch,
                'seed': args.seed,
                'held_out_loss': round(held_loss, 4),
                'held_out_windows': len(losses),
            },
            f,
            indent=2,
        )
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
