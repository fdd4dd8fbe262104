"""A Llama decoder in plain PyTorch, with the same parameter names and maths as Hugging Face
LlamaForCausalLM (rotate-half RoPE, grouped-query attention, SiLU-gated MLP, RMSNorm), so its
state_dict saves as an HF llama checkpoint."""

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 512
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    bos_token_id: int = 0
    eos_token_id: int = 1

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def hf_config(self):
        """config.json contents for Hugging Face."""
        c = asdict(self)
        c.update(
            model_type='llama',
            architectures=['LlamaForCausalLM'],
            head_dim=self.head_dim,
            hidden_act='silu',
            attention_bias=False,
            attention_dropout=0.0,
            mlp_bias=False,
            initializer_range=0.02,
            rope_scaling=None,
            pretraining_tp=1,
            use_cache=True,
            torch_dtype='float16',
        )
        return dict(sorted(c.items()))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(cfg, positions, device):
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.num_attention_heads // c.num_key_value_heads
        # kv head i serves query heads i*rep .. i*rep+rep-1 (HF repeat_kv)
        k = k[:, :, None].expand(B, c.num_key_value_heads, rep, T, c.head_dim).reshape(B, -1, T, c.head_dim)
        v = v[:, :, None].expand(B, c.num_key_value_heads, rep, T, c.head_dim).reshape(B, -1, T, c.head_dim)
        att = (q * (1.0 / math.sqrt(c.head_dim))) @ k.transpose(-2, -1) + mask
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        """Logits for every position of `ids` (B, T); positions start at 0 (no KV cache)."""
        B, T = ids.shape
        cos, sin = rope_cos_sin(self.cfg, torch.arange(T, device=ids.device), ids.device)
        mask = torch.full((T, T), float('-inf'), device=ids.device).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))

    def hf_state_dict(self):
        """Tensors under their HF names; lm_head.weight left out when tied."""
        sd = {k: v for k, v in self.state_dict().items()}
        if self.cfg.tie_word_embeddings:
            sd.pop('lm_head.weight')
        return sd

    def num_params(self):
        return sum(p.numel() for p in self.parameters())  # tied weights counted once
