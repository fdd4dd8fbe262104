#!/usr/bin/python3
"""Train weft's draft head for the demo target: one Llama decoder layer that drafts from
kjv-target's own hidden features (EAGLE-3 style), saved in models/kjv-head.

    /usr/bin/python3 tools/train/train_head.py --out models/kjv-head --threads 1              # train, evaluate, card
    /usr/bin/python3 tools/train/train_head.py --out models/kjv-head --threads 1 --card-only  # evaluate, rewrite the card
    /usr/bin/python3 tools/train/train_head.py --out /tmp/head --steps-scale 0.02             # smoke run (full teacher)

The head. f_i is the target's residual stream at position i after its last decoder layer, before the
final norm. A head entry at position p >= 1 takes a feature f (the target's f_{p-1} for a context
entry, the output feature g of the parent entry for a draft entry) and the token x at p:

    z = fc(cat(rmsnorm(E[x]; norm_embed), rmsnorm(f; norm_hidden)))      E: the target's embedding
    g = one Llama decoder layer over z (RoPE position p, causal over the head's own entries)
    logits_j = E[d2t[j]] . rmsnorm(g; the target's final norm)           j < draft_vocab_size

and its logits predict the token at p + 1. d2t lists the draft vocabulary: the draft_vocab_size most
frequent tokens of the training split, in ascending id order. The LM rows are the target's own, so
the head adds no output weights; its file holds fc, the two input norms, the layer and d2t.

Training matches inference ("training-time test", EAGLE-3): each step unrolls `depths` levels over
the same windows. Depth 1 is the context entries (target features, causal). At depth k the entry at
position q is the k-th node of the chain drafted after context x_0..x_{q-k+1}: its feature is the
depth k-1 output at q-1, and it attends to the context entries at positions <= q-k+1 and to its own
chain (depths 2..k at positions q-k+2..q), not to the other chains. Tokens are the training tokens
(teacher forcing); the loss at every depth is the cross-entropy against the target's distribution at
q restricted to the draft vocabulary and renormalised (a KL up to the target's entropy).

The teacher is the shipped f16 kjv-target read back into f32: its features on the training split
(corpus.py's held-out rule) are computed once before training. The evaluation reads the shipped f16
head and measures it on the held-out verses against the target and against models/kjv-draft.
Seeds are fixed; on the same machine, torch build and thread count the run repeats exactly.
"""

import argparse
import heapq
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import is_heldout, read_corpus  # noqa: E402
import safetensors_io  # noqa: E402
from model import DecoderLayer, LlamaConfig, RMSNorm, rope_cos_sin  # noqa: E402
from train import load_shipped, load_tokenizer, log, lr_at, windows, wrap  # noqa: E402

HEAD = dict(intermediate_size=512, draft_vocab_size=1024)
TRAIN = dict(steps=400, batch=16, lr=3e-3, warmup=20, depths=4)
CONTEXT = 256
CHAIN = 8            # greedy chain depth of the acceptance evaluation
CHAIN_EVERY = 8      # the evaluation starts a chain after every 8th held-out position
TREES = ((8, 1.0), (32, 1.0), (8, 0.2), (32, 0.2))  # best-first trees: node budget, temperature of the scores
TREE_WINDOWS = 4     # the trees grow in every 4th held-out window only (they take a head step per node)
REFERENCE_PROMPT = 12  # ids (BOS included) of the reference.json prompt


# ---------------------------------------------------------------- the target's side


def hidden(model, ids, positions=None, mask=None):
    """[B, T, H]: the residual stream after the last decoder layer, before the final norm. Defaults:
    positions 0..T-1 and a causal mask; a tree passes its own positions [T] and mask [T, T]."""
    T = ids.shape[1]
    if positions is None:
        positions = torch.arange(T)
        mask = torch.full((T, T), float('-inf')).triu(1)
    cos, sin = rope_cos_sin(model.cfg, positions, ids.device)
    x = model.model.embed_tokens(ids)
    for layer in model.model.layers:
        x = layer(x, cos, sin, mask)
    return x


def lm_logits(model, feats):
    return model.lm_head(model.model.norm(feats))


def training_windows(tok):
    """The training split as train.py streams it (training verses, each followed by the id of
    '\\n'), cut into consecutive CONTEXT-id chunks fed as [BOS] + chunk[:-1]: [W, CONTEXT]."""
    nl = tok.encode('\n')
    stream = []
    for i, v in enumerate(read_corpus()):
        if not is_heldout(i):
            stream.extend(tok.encode(v))
            stream.extend(nl)
    ids = torch.tensor(stream[:len(stream) // CONTEXT * CONTEXT]).view(-1, CONTEXT)
    return torch.cat([torch.full((len(ids), 1), tok.bos_id), ids[:, :-1]], 1), stream


@torch.no_grad()
def teacher_features(target, ids, batch=16):
    """The target's features for every window: [W, T, H] f32."""
    out = torch.empty(ids.shape[0], ids.shape[1], target.cfg.hidden_size)
    for s in range(0, len(ids), batch):
        out[s:s + batch] = hidden(target, ids[s:s + batch])
        if (s // batch) % 50 == 0:
            log(f'teacher features {s + batch}/{len(ids)}')
    return out


def draft_vocab(stream, size, vocab_size):
    """The `size` most frequent ids of `stream` (ties to the lower id), ascending: d2t."""
    counts = torch.bincount(torch.tensor(stream), minlength=vocab_size).tolist()
    top = sorted(range(vocab_size), key=lambda t: (-counts[t], t))[:size]
    return torch.tensor(sorted(top))


# ---------------------------------------------------------------- the head


def shift(x, s, dim):
    """x moved s steps later along dim (x[i - s] at i), zeros in front."""
    if s == 0:
        return x
    pad = list(x.shape)
    pad[dim] = s
    return torch.cat([x.new_zeros(pad), x.narrow(dim, 0, x.shape[dim] - s)], dim)


class DraftHead(nn.Module):
    """fc + one decoder layer over (feature, token) entries; logits over the draft vocabulary from
    the target's own embedding rows and final norm, which are kept as frozen buffers."""

    def __init__(self, cfg, target, d2t):
        super().__init__()
        H = cfg.hidden_size
        self.cfg = cfg
        self.fc = nn.Linear(2 * H, H, bias=False)                 # [H, 2H]: embed half first
        self.norm_embed = RMSNorm(H, cfg.rms_norm_eps)
        self.norm_hidden = RMSNorm(H, cfg.rms_norm_eps)
        self.layer = DecoderLayer(cfg)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        self.register_buffer('d2t', d2t.clone())                                     # [Vd] target ids
        embed = target.model.embed_tokens.weight.detach().clone()
        self.register_buffer('embed', embed, persistent=False)                        # [V, H]
        self.register_buffer('lm_rows', embed[d2t].clone(), persistent=False)         # [Vd, H]
        self.register_buffer('final_norm', target.model.norm.weight.detach().clone(), persistent=False)

    def entry(self, feats, tokens):
        """z for entries (feature [B, N, H], token [B, N])."""
        e = self.embed[tokens]
        return self.fc(torch.cat([self.norm_embed(e), self.norm_hidden(feats)], -1))

    def logits(self, g):
        """[B, N, Vd] from output features g [B, N, H] (also the target's restricted logits when g = f)."""
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        return (self.final_norm * g) @ self.lm_rows.T

    def qkv(self, z, positions):
        """Queries [B, nh, N, hd] and keys, values [B, nh, N, hd] (KV heads repeated as HF's
        repeat_kv: KV head i serves query heads i*rep .. i*rep+rep-1), RoPE at `positions` [N]."""
        c, a = self.cfg, self.layer.self_attn
        B, N, _ = z.shape
        x = self.layer.input_layernorm(z)
        q = a.q_proj(x).view(B, N, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = a.k_proj(x).view(B, N, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(B, N, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(c, positions, z.device)
        q = q * cos + torch.cat([-q[..., c.head_dim // 2:], q[..., :c.head_dim // 2]], -1) * sin
        k = k * cos + torch.cat([-k[..., c.head_dim // 2:], k[..., :c.head_dim // 2]], -1) * sin
        rep = c.num_attention_heads // c.num_key_value_heads
        return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def finish(self, z, y):
        """Output features g [B, N, H] from z and the attention output y [B, nh, N, hd]."""
        B, N, _ = z.shape
        h = z + self.layer.self_attn.o_proj(y.transpose(1, 2).reshape(B, N, -1))
        return h + self.layer.mlp(self.layer.post_attention_layernorm(h))

    def unroll(self, feats, ids, depths, greedy=False):
        """Training-time test over windows: feats [B, T, H] (the target's f_0..f_{T-1}), ids [B, T].
        Entry i of every depth sits at position q = i + 1 (N = T - 1 entries). Depth 1 is the
        context entries (f_{q-1}, x_q). At depth k > 1 entry q is the k-th node of the chain drafted
        after context x_0..x_{q-k+1} (real only when q >= k): its feature is the depth k-1 output at
        q-1; its token is x_q, or with `greedy` the head's own depth k-1 choice at q-1. Returns the
        logits [B, N, Vd] of every depth."""
        B, T, _ = feats.shape
        N = T - 1
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        i = torch.arange(N, device=feats.device)
        f, tokens = feats[:, :-1], ids[:, 1:]
        keys, values, out = [], [], []
        for k in range(1, depths + 1):
            z = self.entry(f, tokens)
            q, kk, vv = self.qkv(z, i + 1)
            keys.append(kk)
            values.append(vv)
            # context entries at positions <= q-k+1: the chain's root and everything before it
            ctx_mask = torch.zeros(N, N, device=feats.device)
            ctx_mask = ctx_mask.masked_fill(i[None, :] > i[:, None] - (k - 1), float('-inf'))     # [N, N]
            scores = [q @ keys[0].transpose(-2, -1) * scale + ctx_mask]
            # the chain's depth-j node (j = 2..k) sits k-j positions back in the depth-j entries
            chain = [(shift(keys[j - 1], k - j, 2), shift(values[j - 1], k - j, 2)) for j in range(2, k + 1)]
            scores += [(q * ck).sum(-1, keepdim=True) * scale for ck, _ in chain]
            att = F.softmax(torch.cat(scores, -1), -1)                          # [B, nh, N, N + k - 1]
            y = att[..., :N] @ values[0]
            for j, (_, cv) in enumerate(chain):
                y = y + att[..., N + j:N + j + 1] * cv
            g = self.finish(z, y)
            logits = self.logits(g)
            out.append(logits)
            f = shift(g, 1, 1)
            if greedy:
                tokens = shift(self.d2t[logits.argmax(-1)], 1, 1)
        return out

    def step(self, feats, tokens, positions, cache):
        """Inference: append entries (feature [1, n, H], token [1, n]) at `positions` [n] to
        `cache` (a list of (keys, values) [1, nh, *, hd] visible to them); they attend to the cache
        and causally to each other. Returns (g [1, n, H], logits [1, n, Vd], their keys, values)."""
        z = self.entry(feats, tokens)
        q, k, v = self.qkv(z, positions)
        keys = torch.cat([ck for ck, _ in cache] + [k], 2)
        values = torch.cat([cv for _, cv in cache] + [v], 2)
        n, m = q.shape[2], keys.shape[2]
        mask = torch.full((n, n), float('-inf')).triu(1)
        mask = torch.cat([torch.zeros(n, m - n), mask], 1)
        att = F.softmax(q @ keys.transpose(-2, -1) / math.sqrt(self.cfg.head_dim) + mask, -1)
        g = self.finish(z, att @ values)
        return g, self.logits(g), k, v

    def files_state(self):
        """The tensors of model.safetensors under their names: float weights and d2t as int32."""
        sd = {k: v for k, v in self.state_dict().items() if k != 'd2t'}
        sd['d2t'] = self.d2t.to(torch.int32)
        return sd


def head_config(target_cfg, h):
    """The head's geometry: the target's attention shape and norms, its own MLP width."""
    return LlamaConfig(vocab_size=target_cfg.vocab_size, hidden_size=target_cfg.hidden_size,
                       intermediate_size=h['intermediate_size'], num_hidden_layers=1,
                       num_attention_heads=target_cfg.num_attention_heads,
                       num_key_value_heads=target_cfg.num_key_value_heads, rms_norm_eps=target_cfg.rms_norm_eps,
                       rope_theta=target_cfg.rope_theta)


def config_json(cfg, target_cfg, vd):
    return {
        'architectures': ['WeftDraftHead'], 'model_type': 'weft_draft_head',
        'target': {'hidden_size': target_cfg.hidden_size, 'vocab_size': target_cfg.vocab_size,
                   'num_hidden_layers': target_cfg.num_hidden_layers},
        'hidden_size': cfg.hidden_size, 'intermediate_size': cfg.intermediate_size,
        'num_attention_heads': cfg.num_attention_heads, 'num_key_value_heads': cfg.num_key_value_heads,
        'head_dim': cfg.head_dim, 'rope_theta': cfg.rope_theta, 'rms_norm_eps': cfg.rms_norm_eps,
        'draft_vocab_size': vd, 'torch_dtype': 'float16',
    }


def load_head(head_dir, target):
    """The head as shipped: config.json and the f16 safetensors read back into f32."""
    with open(os.path.join(head_dir, 'config.json')) as f:
        c = json.load(f)
    cfg = head_config(target.cfg, c)
    sd = safetensors_io.load(os.path.join(head_dir, 'model.safetensors'))
    d2t = sd.pop('d2t').long()
    head = DraftHead(cfg, target, d2t)
    sd['d2t'] = d2t
    head.load_state_dict(sd, strict=True)
    return head.eval()


# ---------------------------------------------------------------- training


def soft_ce(logits, teacher, valid):
    """Mean over the valid entries [N] of the cross-entropy of the head's logits [B, N, Vd] against
    the teacher's probabilities (logsumexp(l) - sum_j p_j l_j, as p sums to 1)."""
    logits, teacher = logits[:, valid], teacher[:, valid]
    return (torch.logsumexp(logits, -1) - (teacher * logits).sum(-1)).mean()


def train_head(head, ids, feats, hp, seed):
    """Trains the head's parameters on windows ids [W, T] with target features feats [W, T, H];
    returns per-depth figures of the last 100 steps, the wall seconds and the median step seconds
    (the median shrugs off pauses and bursts of other load)."""
    decay = [p for p in head.parameters() if p.dim() >= 2]
    no_decay = [p for p in head.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': no_decay, 'weight_decay': 0.0}],
                            lr=hp['lr'], betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(seed + 1)
    K, N = hp['depths'], ids.shape[1] - 1
    n_params = sum(p.numel() for p in head.parameters())
    log(f'head: {n_params:,} trained params, {hp["steps"]} steps x {hp["batch"]} windows x {K} depths')
    t0, step_times, recent = time.time(), [], []
    for step in range(hp['steps']):
        t_step = time.time()
        pick = torch.randint(0, len(ids), (hp['batch'],), generator=gen)
        f, x = feats[pick], ids[pick]
        with torch.no_grad():
            teacher_logits = head.logits(f[:, 1:])                     # [B, N, Vd]: the target at q
            teacher = F.softmax(teacher_logits, -1)
            want = teacher_logits.argmax(-1)
            entropy = torch.logsumexp(teacher_logits, -1) - (teacher * teacher_logits).sum(-1)   # [B, N]
        for g in opt.param_groups:
            g['lr'] = lr_at(step, hp['steps'], hp['lr'], hp['warmup'])
        out = head.unroll(f, x, K)
        losses = [soft_ce(lg, teacher, torch.arange(k, N)) for k, lg in enumerate(out)]
        loss = sum(losses) / K
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            agree = [(lg.argmax(-1) == want)[:, k:].float().mean().item() for k, lg in enumerate(out)]
        kl = [l.item() - entropy[:, k:].mean().item() for k, l in enumerate(losses)]
        recent.append(kl + agree)
        step_times.append(time.time() - t_step)
        if (step + 1) % 25 == 0 or step == 0:
            m = torch.tensor(recent[-25:]).mean(0).tolist()
            el = time.time() - t0
            log(f'step {step + 1}/{hp["steps"]} kl ' + ' '.join(f'{v:.3f}' for v in m[:K]) + ' top1 ' +
                ' '.join(f'{v:.3f}' for v in m[K:]) + f' lr {opt.param_groups[0]["lr"]:.2e} {el:.0f}s '
                f'(eta {el / (step + 1) * (hp["steps"] - step - 1):.0f}s)')
    last = torch.tensor(recent[-100:]).mean(0).tolist()
    return ({'kl': last[:K], 'top1_in_vocab': last[K:]}, time.time() - t0, statistics.median(step_times))


# ---------------------------------------------------------------- evaluation


def tree_inputs(window, chains):
    """A window [T] plus chains [(p, [c_1..c_n])] as one sequence for a Llama model: chain token
    c_k sits at position p + k and sees the window up to p and c_1..c_k of its own chain. Returns
    ids [1, M], positions [M], mask [M, M] and, per chain, the rows whose logits predict c_1, c_2..."""
    T = len(window)
    M = T + sum(len(toks) for _, toks in chains)
    ids, pos, parents = list(window), list(range(T)), []
    mask = torch.full((M, M), float('-inf'))
    mask[:T, :T] = torch.full((T, T), float('-inf')).triu(1)
    for p, toks in chains:
        rows = [p]
        for k, t in enumerate(toks):
            r = len(ids)
            mask[r, :p + 1] = 0.0
            mask[r, r - k:r + 1] = 0.0
            ids.append(t)
            pos.append(p + k + 1)
            rows.append(r)
        parents.append(rows)
    return torch.tensor([ids]), torch.tensor(pos), mask, parents


@torch.no_grad()
def tree_argmax(model, window, chains):
    """Per chain: the model's greedy token after the window up to p and after each c_k."""
    ids, pos, mask, parents = tree_inputs(window, chains)
    best = lm_logits(model, hidden(model, ids, pos, mask))[0].argmax(-1)
    return [[int(best[r]) for r in rows] for rows in parents]


def accepted(chain, greedy):
    """Greedy acceptance of a chain: how many leading drafted tokens equal the target's own greedy
    continuation."""
    n = 0
    while n < len(chain) and chain[n] == greedy[n]:
        n += 1
    return n


@torch.no_grad()
def greedy_chains(model, window, starts, depth):
    """A Llama model's own greedy continuations, `depth` tokens after each context x_0..x_p
    (p in starts), drafted one token at a time over a tree of chains: [(p, tokens)]."""
    chains = [(p, []) for p in starts]
    for _ in range(depth):
        nxt = tree_argmax(model, window, chains)
        chains = [(p, toks + [best[len(toks)]]) for (p, toks), best in zip(chains, nxt)]
    return chains


@torch.no_grad()
def best_first_tree(head, ctx, p, budget, temperature, depth):
    """A best-first draft tree after context x_0..x_p: grow it a node at a time, always adding the
    candidate with the highest product along its path of the head's probabilities at `temperature`
    (the children of each added node become candidates), up to `budget` nodes and `depth` levels.
    ctx = (g [1, N, H], logits [1, N, Vd], keys, values) of the context entries. Returns the set of
    the nodes' paths (tuples of target ids from depth 1)."""
    g_ctx, lg_ctx, k_ctx, v_ctx = ctx
    cache = (k_ctx[:, :, :p], v_ctx[:, :, :p])                 # entries at positions 1..p
    root = {'path': (), 'g': g_ctx[:, p - 1:p], 'kv': [], 'logits': lg_ctx[0, p - 1]}
    heap, tree, order = [], set(), 0

    def push(node):
        nonlocal order
        if len(node['path']) == depth:
            return
        logp = F.log_softmax(node['logits'] / temperature, -1)
        top = logp.topk(min(budget, len(logp)))
        for lp, j in zip(top.values.tolist(), top.indices.tolist()):
            heapq.heappush(heap, (-(node['score'] + lp), order, node, int(head.d2t[j])))
            order += 1

    root['score'] = 0.0
    push(root)
    while heap and len(tree) < budget:
        neg, _, parent, c = heapq.heappop(heap)
        path = parent['path'] + (c,)
        tree.add(path)
        if len(tree) == budget:
            break
        g, lg, k, v = head.step(parent['g'], torch.tensor([[c]]), torch.tensor([p + len(path)]),
                                [cache] + parent['kv'])
        push({'path': path, 'g': g, 'kv': parent['kv'] + [(k, v)], 'logits': lg[0, -1], 'score': -neg})
    return tree


def tree_accepted(tree, greedy):
    """Greedy acceptance of a tree: the longest path that follows the target's greedy continuation."""
    n = 0
    while n < len(greedy) and tuple(greedy[:n + 1]) in tree:
        n += 1
    return n


def tree_name(budget, temperature):
    return f'tree{budget}_t{temperature:g}'


@torch.no_grad()
def evaluate(head, target, draft, tok, heldout_ids):
    """Held-out figures of the shipped head: depth-1 agreement with the target's greedy token, and
    greedy acceptance against the target's own greedy continuation: chains of the head and of the
    separate draft model, and (on every TREE_WINDOWS-th window) the head's best-first trees."""
    ws = [x for x, _ in windows(heldout_ids, CONTEXT, tok.bos_id)]
    d2t = head.d2t
    in_vocab = torch.zeros(target.cfg.vocab_size, dtype=torch.bool)
    in_vocab[d2t] = True
    agree = total = greedy_in_vocab = 0
    acc = {name: [] for name in ['head', 'draft', 'head_tree_contexts'] + [tree_name(*t) for t in TREES]}
    for w, window in enumerate(ws):
        ids = torch.tensor([window])
        feats = hidden(target, ids)
        greedy = lm_logits(target, feats)[0, 1:].argmax(-1)            # [N]: target's choice at q = 1..T-1
        out = head.unroll(feats, ids, CHAIN if len(window) > CHAIN + 1 else 1, greedy=True)
        agree += int((d2t[out[0][0].argmax(-1)] == greedy).sum())
        greedy_in_vocab += int(in_vocab[greedy].sum())
        total += len(greedy)
        if len(out) < CHAIN:
            continue
        # contexts x_0..x_p; the head's chain after one: depth k's choice at position p + k - 1
        starts = list(range(CHAIN_EVERY // 2, len(window) - CHAIN + 1, CHAIN_EVERY))
        want = dict(greedy_chains(target, window, starts, CHAIN))
        choice = torch.stack([d2t[lg[0].argmax(-1)] for lg in out])     # [CHAIN, N]: entry i is position i + 1
        head_acc = [accepted([int(choice[k, p + k - 1]) for k in range(CHAIN)], want[p]) for p in starts]
        acc['head'] += head_acc
        acc['draft'] += [accepted(toks, want[p]) for p, toks in greedy_chains(draft, window, starts, CHAIN)]
        if w % TREE_WINDOWS == 0:
            acc['head_tree_contexts'] += head_acc
            ctx = head.step(feats[:, :-1], ids[:, 1:], torch.arange(1, len(window)), [])
            for t in TREES:
                acc[tree_name(*t)] += [tree_accepted(best_first_tree(head, ctx, p, *t, CHAIN), want[p]) for p in starts]
        if w % 10 == 0:
            log(f'evaluation window {w + 1}/{len(ws)}')
    res = {'positions': total, 'depth1_agreement': agree / total, 'target_greedy_in_vocab': greedy_in_vocab / total,
           'chain_depth': CHAIN, 'drafters': {}}
    for name, a in acc.items():
        res['drafters'][name] = {'contexts': len(a), 'tokens_per_pass': 1 + sum(a) / len(a),
                                 'accepted_hist': [a.count(n) for n in range(CHAIN + 1)]}
    res['ratio'] = res['drafters']['head']['tokens_per_pass'] / res['drafters']['draft']['tokens_per_pass']
    return res


@torch.no_grad()
def reference(head, target, tok, heldout_ids, depth=4):
    """reference.json for weft's tests: a held-out prompt, the head's depth-1 logits after it and
    its greedy chain, computed entry by entry as at inference (and checked against the unroll)."""
    ids = torch.tensor([[tok.bos_id] + heldout_ids[:REFERENCE_PROMPT - 1]])
    L = ids.shape[1]
    feats = hidden(target, ids)
    g, logits, k, v = head.step(feats[:, :L - 1], ids[:, 1:], torch.arange(1, L), [])
    cache, first = [(k, v)], logits[0, -1]
    parent, chain, pos = g[:, -1:], [], L
    lg = logits[:, -1:]
    for _ in range(depth):
        c = head.d2t[lg[0, -1].argmax()]
        chain.append(int(c))
        parent, lg, k, v = head.step(parent, c.view(1, 1), torch.tensor([pos]), cache)
        cache.append((k, v))
        pos += 1
    out = head.unroll(feats, ids, 1)
    assert torch.allclose(out[0][0, -1], first, atol=1e-4), 'unroll and step disagree'
    return {'prompt_ids': ids[0].tolist(), 'draft_vocab_size': len(head.d2t),
            'depth1_logits': [round(float(x), 5) for x in first],
            'depth1_argmax': int(first.argmax()), 'greedy_chain': chain,
            'note': 'depth1_logits: the head\'s logits over the draft vocabulary (index j is target id d2t[j]) '
                    'for the last context entry (position %d), f32 from the shipped f16 weights; greedy_chain: '
                    'target ids of the greedy chain drafted from it, features fed back.' % (L - 1)}


# ---------------------------------------------------------------- sizes and the card


def sizes(head, target):
    """Parameter counts: what the head's file holds, what one draft depth multiplies (the file's
    matrices plus the Vd target rows of its LM head) and what one target token multiplies."""
    H = target.cfg.hidden_size
    own = sum(p.numel() for p in head.parameters())
    per_depth = own + head.lm_rows.numel()
    layer = sum(p.numel() for p in target.model.layers.parameters())
    per_token = layer + target.cfg.vocab_size * H + H
    return {'head_params': own, 'fc': head.fc.weight.numel(),
            'layer': sum(p.numel() for p in head.layer.parameters()), 'lm_rows': head.lm_rows.numel(),
            'per_depth': per_depth, 'target_per_token': per_token, 'cost_ratio': per_depth / per_token}


def write_card(path, cfg, rec, sz, ev, ref):
    hp, dv, tr, d = rec['train'], rec['draft_vocab'], rec['figures'], ev['drafters']
    K, H, Vd = hp['depths'], cfg.hidden_size, dv['size']
    threads = f'{rec["threads"]} thread{"s" if rec["threads"] != 1 else ""}'
    hist_rows = '\n'.join(f'| {n} | {d["head"]["accepted_hist"][n]} | {d["draft"]["accepted_hist"][n]} |'
                          for n in range(CHAIN + 1))
    tree_rows = '\n'.join(f'| best-first tree, {b} nodes, temperature {t:g} | {d[tree_name(b, t)]["tokens_per_pass"]:.3f} |'
                          for b, t in TREES)
    depth_cols = ' | '.join(str(k + 1) for k in range(K))
    newline = '`\\n`'
    starts = ', '.join(str(CHAIN_EVERY // 2 + n * CHAIN_EVERY) for n in range(3))
    others = ', '.join(f'{k}: {100 * v:.1f}%' for k, v in dv['coverage_by_size'].items())
    intro = wrap("A one-layer draft head for `../kjv-target` (EAGLE-3 style): it drafts from the target's "
                 "own hidden features and reuses the target's embedding, final norm and LM rows, so its file "
                 f"holds only {sz['head_params']:,} parameters. Made by `tools/train/train_head.py`; trained "
                 "on the target's features over the KJV training split, evaluated on the held-out verses (`../kjv-heldout.txt`).")
    made = wrap(f"Seed {rec['seed']}; the same machine, torch build and thread count give the same files. "
                f"These files were made on {rec['date']} on {rec['machine']} (torch {rec['torch']}, {threads}, "
                f"f32): the teacher features took {rec['teacher_seconds'] / 60:.1f} min, training {rec['train_seconds'] / 60:.1f} "
                f"min ({hp['steps']} steps, median step {rec['step_seconds']:.2f} s), the whole command {rec['total_seconds'] / 60:.1f} "
                "min. `--card-only` reruns the evaluation below on the files here and rewrites this card "
                "and `reference.json`; the training figures come from `train-record.json`. A log of runs "
                "is in `tools/train/README.md`.")
    notation = wrap(f"H = {H}; E = the target's `model.embed_tokens.weight` [{rec['target']['vocab_size']}, H], "
                    f"tied with its LM head; eps = {cfg.rms_norm_eps}; rmsnorm(v; w) = w * v / sqrt(mean(v^2) "
                    "+ eps).")
    tensors = wrap(f"Tensors of `model.safetensors`: `fc.weight` [{H}, {2 * H}]; `norm_embed.weight`, `norm_hidden.weight`, "
                   f"`layer.input_layernorm.weight`, `layer.post_attention_layernorm.weight` [{H}]; `layer.self_attn.q_proj.weight` "
                   f"[{cfg.num_attention_heads * cfg.head_dim}, {H}], `k_proj` and `v_proj` [{cfg.num_key_value_heads * cfg.head_dim}, "
                   f"{H}], `o_proj` [{H}, {cfg.num_attention_heads * cfg.head_dim}]; `layer.mlp.gate_proj.weight` "
                   f"and `up_proj` [{cfg.intermediate_size}, {H}], `down_proj` [{H}, {cfg.intermediate_size}]; "
                   f"all F16; and `d2t` [{Vd}] I32.")
    vocab = wrap(f"`d2t` holds the {Vd} most frequent tokens of the training split (ties to the lower id), "
                 f"in ascending id order. They cover {100 * dv['train_token_coverage']:.1f}% of the training "
                 f"split's tokens, and {100 * dv['train_greedy_coverage']:.1f}% of the target's greedy next "
                 f"tokens over the training split ({100 * ev['target_greedy_in_vocab']:.1f}% over the held-out "
                 "verses); a greedy target token outside the vocabulary can never be drafted. Share of the "
                 f"training split's tokens covered by other sizes: {others}.")
    training = wrap("Teacher: the shipped f16 kjv-target read back into f32. The training split (training verses "
                    f"each followed by {newline}, as `train.py` streams them) is cut into {rec['windows']:,} consecutive "
                    f"{CONTEXT}-token windows, each fed as `[BOS] + chunk[:-1]`; the target's features for every "
                    f"window are computed once. Each step draws {hp['batch']} windows and unrolls {K} depths (EAGLE-3's "
                    "training-time test): depth 1 is the context entries; at depth k the entry at position q "
                    "is the k-th node of the chain drafted after x_0..x_(q-k+1): its feature is the depth k-1 "
                    "output at q-1, its token the real x_q, and it attends to the context entries at positions "
                    "<= q-k+1 and to its own chain only, the same visibility as at inference. Loss: the mean "
                    "over depths of the cross-entropy against the target's distribution at q restricted to the "
                    "draft vocabulary and renormalised (the KL to it, up to the target's entropy); no feature "
                    f"regression. AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), peak lr {hp['lr']}, {hp['warmup']} "
                    f"warmup steps then cosine to 10%, grad clip 1.0, {hp['steps']} steps.")
    evaluation = wrap(f"On the held-out verses ({ev['positions']:,} positions, in the windows of the evaluation "
                      f"protocol in `../README.md`: {CONTEXT}-token chunks fed as `[BOS] + chunk[:-1]`), with the "
                      "shipped f16 files read back into f32, greedy throughout.")
    trees_note = wrap("The head's probabilities are about as spread as the target's, which they were trained to "
                      "match, so at temperature 1 a tree spends its nodes on siblings near the root; sharpened "
                      "scores (temperature 0.2) keep the likely path long and use the extra nodes where the chain "
                      "would miss.")
    fixture = wrap(f"A fixture for weft's tests: `prompt_ids`, {len(ref['prompt_ids'])} ids (`[BOS]` and the "
                   f"first {len(ref['prompt_ids']) - 1} ids of the held-out text); `depth1_logits`, the head's "
                   f"{Vd} logits for the last context entry (position {len(ref['prompt_ids']) - 1}; index j is "
                   "target id `d2t[j]`; f32 computed from the f16 files, rounded to 5 decimals), and `depth1_argmax`, "
                   f"their argmax index; `greedy_chain`, the target ids of the greedy chain of {len(ref['greedy_chain'])} "
                   f"drafted from it with the features fed back: {ref['greedy_chain']}. The target's features "
                   "are not stored: weft computes them with the target.")
    text = f"""# kjv-head: a draft head for kjv-target

{intro}

| file | what |
|---|---|
| `config.json` | the head's geometry (`WeftDraftHead`) and the target it belongs to |
| `model.safetensors` | F16 weights in Hugging Face [out, in] layout, and `d2t` (I32) |
| `train-record.json` | what only training knows: argv, seed, threads, torch, times, training figures |
| `reference.json` | a held-out prompt with the head's depth-1 logits and greedy chain, for weft's tests |

## Reproduce

```
apt-get install bible-kjv python3-torch python3-numpy libopenblas0-openmp
/usr/bin/python3 tools/train/train_head.py {rec['argv']}
/usr/bin/python3 tools/train/train_head.py --out models/kjv-head --threads 1 --card-only   # evaluate, rewrite this card
```

{made}

## Architecture

{notation}

- **Feature** f_i: the target's residual stream at position i after its last decoder layer, before
  its final norm ([H]).
- **Entry** at position p >= 1: (feature f, token x), x the token at p, f the feature of position
  p-1: the target's f_(p-1) for a context entry, the output feature g of the parent entry for a
  draft entry.
  - z = `fc` · concat(rmsnorm(E[x]; `norm_embed`), rmsnorm(f; `norm_hidden`)); `fc` is [H, 2H],
    embedding half first.
  - One Llama pre-norm decoder layer at RoPE position p: {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads
    (KV head i serves query heads 2i and 2i+1), head_dim {cfg.head_dim}, theta {cfg.rope_theta:g}, rotate-half
    as Hugging Face, SiLU-gated MLP of width {cfg.intermediate_size}, no biases:
    h = z + o_proj(attn(rmsnorm(z; input_layernorm))),
    g = h + down(silu(gate(rmsnorm(h; post_attention_layernorm))) * up(rmsnorm(h; post_attention_layernorm))).
    The entry attends to the earlier entries visible to it and to itself.
  - logits_j = E[d2t[j]] · rmsnorm(g; the target's `model.norm.weight`), j < {Vd}; they predict
    the token at p + 1. g is the entry's output feature.
- **Inference.** For context x_0..x_(L-1) with target features f_0..f_(L-2), the head's cache holds
  the context entries at positions 1..L-1 (entry p = (f_(p-1), x_p)); the last one's logits give
  the depth-1 drafts (position L). A depth-d node with token c sits at position L-1+d as the entry
  (g_parent, c), g_parent the output feature of its parent (for depth 1, the context entry at L-1);
  it attends to every context entry and to its own ancestors (tree attention), not its siblings.
  Once the target has verified, the accepted tokens become context entries built from the
  target's own features. Training saw positions 1..{CONTEXT - 1}, as the target was trained at context {CONTEXT}.

{tensors}

### Draft vocabulary

{vocab}

### Sizes

| | parameters |
|---|---|
| head file (fc + 2 norms + layer) | {sz['head_params']:,} |
| of which fc / layer | {sz['fc']:,} / {sz['layer']:,} |
| LM rows used per depth (the target's, {Vd} x {H}) | {sz['lm_rows']:,} |
| **one draft depth** (file + LM rows) | **{sz['per_depth']:,}** |
| one target token ({rec['target']['num_hidden_layers']} layers + {rec['target']['vocab_size']} x {H} LM head + norm) | {sz['target_per_token']:,} |
| ratio | **{sz['cost_ratio']:.3f}** |

## Training

{training}

Last 100 steps, per depth (training windows, real tokens along the chains):

| depth | {depth_cols} |
|---|{'---|' * K}
| KL to the restricted target (nats) | {' | '.join(f"{v:.3f}" for v in tr['kl'])} |
| top-1 = the restricted target's top-1 | {' | '.join(f"{v:.3f}" for v in tr['top1_in_vocab'])} |

## Evaluation

{evaluation}

- **Depth-1 agreement**: the head's top-1 (through `d2t`) equals the target's greedy token at
  {100 * ev['depth1_agreement']:.1f}% of the positions.
- **Greedy chain acceptance**: after positions p = {starts}, ... of each window, while
  {CHAIN} positions fit after p ({d['head']['contexts']:,} contexts x_0..x_p), draft a greedy chain {CHAIN} deep
  and count how many of its tokens match the target's own greedy continuation (what a greedy
  verification accepts). Tokens per target pass = accepted + 1. The head chains its own output
  features; kjv-draft (`../kjv-draft`) drafts its own greedy chain on the same contexts.

| drafter | tokens per pass (chain of {CHAIN}) |
|---|---|
| kjv-head | **{d['head']['tokens_per_pass']:.3f}** |
| kjv-draft | {d['draft']['tokens_per_pass']:.3f} |
| ratio head / draft | {ev['ratio']:.3f} |

Accepted length, number of contexts:

| accepted | kjv-head | kjv-draft |
|---|---|---|
{hist_rows}

- **Best-first trees** (every {TREE_WINDOWS}th window, {d['head_tree_contexts']['contexts']:,} contexts): grow a tree after
  the context a node at a time, always adding the candidate whose path has the highest product of
  the head's probabilities at the given temperature (the children of each added node become
  candidates), at most {CHAIN} deep; accepted = the longest path of the tree that follows the
  target's greedy continuation.

| drafter, same contexts | tokens per pass |
|---|---|
| kjv-head chain of {CHAIN} | {d['head_tree_contexts']['tokens_per_pass']:.3f} |
{tree_rows}

{trees_note}

## reference.json

{fixture}
"""
    with open(path, 'w') as f:
        f.write(text)


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default='models/kjv-head', help='output folder (default: models/kjv-head)')
    ap.add_argument('--target', default='models/kjv-target')
    ap.add_argument('--draft', default='models/kjv-draft', help='the separate draft model to compare with')
    ap.add_argument('--seed', type=int, default=1234)
    ap.add_argument('--threads', type=int, default=2, help='torch CPU threads (default 2)')
    ap.add_argument('--steps-scale', type=float, default=1.0, help='scale the step count (smoke tests only)')
    ap.add_argument('--card-only', action='store_true',
                    help='no training: evaluate the head already in --out, rewrite README.md and reference.json')
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.time()
    tok = load_tokenizer(args.target)
    target = load_shipped(args.target).eval().requires_grad_(False)
    record_path = os.path.join(args.out, 'train-record.json')
    os.makedirs(args.out, exist_ok=True)
    if args.card_only:
        with open(record_path) as f:
            record = json.load(f)
    else:
        hp = dict(TRAIN, steps=max(1, int(TRAIN['steps'] * args.steps_scale)))
        ids, stream = training_windows(tok)
        V = target.cfg.vocab_size
        d2t = draft_vocab(stream, HEAD['draft_vocab_size'], V)
        counts = torch.bincount(torch.tensor(stream), minlength=V).sort(descending=True).values.cumsum(0)
        t0 = time.time()
        feats = teacher_features(target, ids)
        teacher_secs = time.time() - t0
        greedy = torch.cat([lm_logits(target, feats[s:s + 64]).argmax(-1) for s in range(0, len(ids), 64)])
        log(f'{len(ids)} windows, teacher features in {teacher_secs:.0f}s')
        cfg = head_config(target.cfg, HEAD)
        torch.manual_seed(args.seed)
        head = DraftHead(cfg, target, d2t)
        figures, secs, step_secs = train_head(head, ids, feats, hp, args.seed)
        with open(os.path.join(args.out, 'config.json'), 'w') as f:
            json.dump(config_json(cfg, target.cfg, len(d2t)), f, indent=2)
        safetensors_io.save(head.files_state(), os.path.join(args.out, 'model.safetensors'))
        record = {
            'argv': ' '.join(sys.argv[1:]), 'seed': args.seed, 'threads': args.threads, 'torch': torch.__version__,
            'machine': f'{platform.machine()} CPU, {os.cpu_count()} cores', 'date': time.strftime('%Y-%m-%d'),
            'target': {k: getattr(target.cfg, k) for k in ('hidden_size', 'vocab_size', 'num_hidden_layers')},
            'train': hp, 'windows': len(ids), 'teacher_seconds': teacher_secs, 'train_seconds': secs,
            'step_seconds': step_secs, 'figures': figures,
            'draft_vocab': {
                'size': len(d2t),
                'train_token_coverage': torch.isin(torch.tensor(stream), d2t).float().mean().item(),
                'train_greedy_coverage': torch.isin(greedy, d2t).float().mean().item(),
                'coverage_by_size': {n: (counts[n - 1] / counts[-1]).item() for n in (512, 1024, 2048)},
            },
        }
        del feats
    head = load_head(args.out, target)
    draft = load_shipped(args.draft).eval()
    heldout = [v for i, v in enumerate(read_corpus()) if is_heldout(i)]
    heldout_ids = tok.encode('\n'.join(heldout))
    ev = evaluate(head, target, draft, tok, heldout_ids)
    log(f'held-out: depth-1 agreement {ev["depth1_agreement"]:.4f}, tokens per pass ' +
        ', '.join(f'{k} {v["tokens_per_pass"]:.3f}' for k, v in ev['drafters'].items()))
    ref = reference(head, target, tok, heldout_ids)
    with open(os.path.join(args.out, 'reference.json'), 'w') as f:
        json.dump(ref, f)
    if not args.card_only:
        record['total_seconds'] = time.time() - t_start
        with open(record_path, 'w') as f:
            json.dump(record, f, indent=2)
    write_card(os.path.join(args.out, 'README.md'), head.cfg, record, sizes(head, target), ev, ref)
    log(f'done in {(time.time() - t_start) / 60:.1f} min; wrote {args.out}')


if __name__ == '__main__':
    main()
