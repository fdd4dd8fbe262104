#!/usr/bin/python3
"""Train weft's bundled demo pair: a small Llama target and a tiny Llama draft on the King James Bible.

    /usr/bin/python3 tools/train/train.py --out models            # cpu preset (default)
    /usr/bin/python3 tools/train/train.py --preset gpu --device cuda --out models
    /usr/bin/python3 tools/train/train.py --out models --card-only  # no training: rewrite the card

Steps: read the corpus from the `bible` program (Debian package bible-kjv), hold out every 50th
verse, train a byte-level BPE tokenizer, train both models, save them in Hugging Face layout (f16
safetensors), evaluate the shipped f16 weights, check the tokenizer against @huggingface/tokenizers
(when node is available), and write models/README.md (the model card) and models/train-record.json
(what only training knows: train times, step times, the f32 held-out loss). Seeds are fixed; on the
same machine and torch build the run repeats exactly.

--card-only skips the tokenizer and model training: it reads the tokenizer and the f16 weights
already in --out, re-derives the split (and checks kjv-heldout.txt against it), evaluates, samples,
reruns the tokenizer check and rewrites the card, taking the training-only figures from
train-record.json. Every figure weft's test reads from the card is computed here.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from corpus import HELDOUT_EVERY, read_corpus  # noqa: E402
import safetensors_io  # noqa: E402
from model import LlamaConfig, LlamaForCausalLM  # noqa: E402

BOS, EOS = '<|bos|>', '<|eos|>'
TRAIN_EVAL_OFFSET = 24  # verses with i % 50 == 24 (part of training) measure train loss the same way
PROMPT = 'And the LORD said unto Moses'

PRESETS = {
    'cpu': {
        'vocab_size': 4096,
        'context': 256,
        'target': dict(hidden_size=256, intermediate_size=688, num_hidden_layers=6, num_attention_heads=4,
                       num_key_value_heads=2),
        'draft': dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1),
        'target_train': dict(steps=850, batch=16, lr=3e-3, warmup=40),
        'draft_train': dict(steps=400, batch=16, lr=4e-3, warmup=20),
    },
    'gpu': {
        'vocab_size': 4096,
        'context': 256,
        'target': dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=4,
                       num_key_value_heads=2),
        # 1.57M: wider than the cpu draft, as shallow (draft latency is per layer), ~1/5 of the target
        'draft': dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2, num_attention_heads=3,
                      num_key_value_heads=1),
        'target_train': dict(steps=4000, batch=64, lr=2e-3, warmup=200),
        'draft_train': dict(steps=4000, batch=64, lr=3e-3, warmup=200),
    },
}


def log(*a):
    print(time.strftime('%H:%M:%S'), *a, flush=True)


# ---------------------------------------------------------------- data and evaluation


def windows(ids, context, bos_id):
    """Eval protocol: consecutive non-overlapping chunks of `context` ids, each fed as
    [BOS] + chunk[:-1] and scored on chunk (so every id is predicted once)."""
    out = []
    for s in range(0, len(ids), context):
        chunk = ids[s:s + context]
        out.append(([bos_id] + chunk[:-1], chunk))
    return out


@torch.no_grad()
def eval_loss(model, ids, context, bos_id, device, batch=32):
    """Mean cross-entropy (nats) per predicted token under the windows() protocol."""
    model.eval()
    total, count = 0.0, 0
    ws = windows(ids, context, bos_id)
    for i in range(0, len(ws), batch):
        group = ws[i:i + batch]
        for L in sorted({len(x) for x, _ in group}):  # the last window may be shorter
            xs = [x for x, _ in group if len(x) == L]
            ys = [y for x, y in group if len(x) == L]
            x = torch.tensor(xs, device=device)
            y = torch.tensor(ys, device=device)
            logits = model(x).float()
            total += F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction='sum').item()
            count += y.numel()
    model.train()
    return total / count


def unigram_loss(train_ids, eval_ids, vocab_size):
    counts = torch.bincount(torch.tensor(train_ids), minlength=vocab_size).double() + 1.0  # add-one
    logp = (counts / counts.sum()).log()
    return -logp[torch.tensor(eval_ids)].mean().item()


# ---------------------------------------------------------------- training


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))  # cosine down to 10% of peak


def train_model(name, cfg, stream, hp, context, device, seed):
    """Trains one model; returns it, the wall seconds of training and the median seconds per step
    (the median shrugs off pauses and bursts of other load, so steps x median estimates an idle run)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': no_decay, 'weight_decay': 0.0}],
                            lr=hp['lr'], betas=(0.9, 0.95), eps=1e-8)
    data = torch.tensor(stream, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed + 1)
    bos = torch.full((hp['batch'], 1), cfg.bos_token_id, dtype=torch.long)
    use_amp = device == 'cuda'
    log(f'{name}: {model.num_params():,} params, {hp["steps"]} steps x {hp["batch"]} x {context} tokens')
    t0, recent, step_times = time.time(), [], []
    for step in range(hp['steps']):
        t_step = time.time()
        starts = torch.randint(0, len(data) - context, (hp['batch'],), generator=gen)
        chunk = torch.stack([data[s:s + context] for s in starts.tolist()])
        x = torch.cat([bos, chunk[:, :-1]], dim=1).to(device)  # same shape of window as eval
        y = chunk.to(device)
        for g in opt.param_groups:
            g['lr'] = lr_at(step, hp['steps'], hp['lr'], hp['warmup'])
        with torch.autocast('cuda', dtype=torch.bfloat16) if use_amp else contextlib.nullcontext():
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent.append(loss.item())
        step_times.append(time.time() - t_step)
        if (step + 1) % 25 == 0 or step == 0:
            el = time.time() - t0
            log(f'{name} step {step + 1}/{hp["steps"]} loss {sum(recent) / len(recent):.4f} '
                f'lr {opt.param_groups[0]["lr"]:.2e} {el:.0f}s (eta {el / (step + 1) * (hp["steps"] - step - 1):.0f}s)')
            recent = []
    return model, time.time() - t0, statistics.median(step_times)


@torch.no_grad()
def generate(model, tok, prompt, n, device, temperature=0.0, seed=0):
    """Greedy (temperature 0) or plain temperature sampling; full forward each step, prompt after BOS."""
    model.eval()
    gen = torch.Generator(device='cpu').manual_seed(seed)
    ids = tok.encode(prompt, add_bos=True)
    for _ in range(n):
        logits = model(torch.tensor([ids[-model.cfg.max_position_embeddings:]], device=device))[0, -1].float().cpu()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=gen))
        if nxt == tok.eos_id:
            break
        ids.append(nxt)
    model.train()
    return tok.decode(ids)


# ---------------------------------------------------------------- saving


def save_model(model, tok, out_dir, context):
    os.makedirs(out_dir, exist_ok=True)
    cfg = model.cfg
    with open(os.path.join(out_dir, 'config.json'), 'w') as f:
        json.dump(cfg.hf_config(), f, indent=2)
    with open(os.path.join(out_dir, 'generation_config.json'), 'w') as f:
        json.dump({'bos_token_id': cfg.bos_token_id, 'eos_token_id': cfg.eos_token_id}, f, indent=2)
    with open(os.path.join(out_dir, 'tokenizer.json'), 'w', encoding='utf-8') as f:
        json.dump(tok.to_tokenizer_json(), f, ensure_ascii=False)
    with open(os.path.join(out_dir, 'tokenizer_config.json'), 'w') as f:
        json.dump({'bos_token': BOS, 'eos_token': EOS, 'add_bos_token': True, 'add_eos_token': False,
                   'model_max_length': cfg.max_position_embeddings, 'tokenizer_class': 'PreTrainedTokenizerFast',
                   'clean_up_tokenization_spaces': False}, f, indent=2)
    safetensors_io.save(model.hf_state_dict(), os.path.join(out_dir, 'model.safetensors'))


def load_shipped(out_dir, device='cpu'):
    """The model as shipped: config.json, and the f16 safetensors read back into f32."""
    with open(os.path.join(out_dir, 'config.json')) as f:
        c = json.load(f)
    cfg = LlamaConfig(**{k: c[k] for k in LlamaConfig.__dataclass_fields__ if k in c})
    m = LlamaForCausalLM(cfg)
    sd = safetensors_io.load(os.path.join(out_dir, 'model.safetensors'))
    if cfg.tie_word_embeddings:
        sd['lm_head.weight'] = sd['model.embed_tokens.weight']
    m.load_state_dict(sd, strict=True)
    if cfg.tie_word_embeddings:
        m.lm_head.weight = m.model.embed_tokens.weight
    return m.to(device)


def load_tokenizer(out_dir):
    """The shipped tokenizer.json as a bpe.BPETokenizer."""
    with open(os.path.join(out_dir, 'tokenizer.json'), encoding='utf-8') as f:
        tj = json.load(f)
    merges = [tuple(m.split(' ')) if isinstance(m, str) else tuple(m) for m in tj['model']['merges']]
    return bpe.BPETokenizer(tj['model']['vocab'], merges, BOS, EOS)


def check_tokenizer_js(tok_dir, tok, texts):
    """Run check_tokenizer.mjs on `texts`; returns its JSON summary or a reason it was skipped."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'check_tokenizer.mjs')
    if shutil.which('node') is None or not os.path.isdir(os.path.join(root, 'node_modules', '@huggingface', 'tokenizers')):
        return {'skipped': 'node or @huggingface/tokenizers not available'}
    with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
        json.dump({'texts': texts, 'ids': [tok.encode(t) for t in texts]}, f)
        cases = f.name
    r = subprocess.run(['node', script, os.path.abspath(tok_dir), cases], cwd=root, capture_output=True, text=True)
    os.unlink(cases)
    lines = r.stdout.strip().split('\n')
    try:
        result = json.loads(lines[-1])
    except (json.JSONDecodeError, IndexError):
        result = {'error': (r.stdout + r.stderr)[-2000:]}
    if r.returncode != 0:
        result['output'] = r.stdout[-2000:]
    return result


# ---------------------------------------------------------------- model card


def fmt_params(n):
    return f'{n:,} ({n / 1e6:.2f}M)'


def arch(c):
    """One line of architecture from a config.json dict or a preset's model dict."""
    head_dim = c.get('head_dim', c['hidden_size'] // c['num_attention_heads'])
    return (f'hidden {c["hidden_size"]}, {c["num_hidden_layers"]} layers, {c["num_attention_heads"]} heads '
            f'(head_dim {head_dim}), {c["num_key_value_heads"]} KV head(s), intermediate {c["intermediate_size"]}')


def preset_params(preset, key):
    return LlamaForCausalLM(LlamaConfig(vocab_size=PRESETS[preset]['vocab_size'], **PRESETS[preset][key])).num_params()


def wrap(text):
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def timing_text(rec):
    """How long the run that made the files took, from train-record.json."""
    t, d = rec['models']['target'], rec['models']['draft']
    s = (f'Seeds are fixed ({rec["seed"]}); the same machine and torch build give the same files. These files '
         f'were made on {rec["date"]} on {rec["machine"]} (torch {rec["torch"]}, {rec["threads"]} threads, '
         f'{"bf16 autocast" if rec["device"] == "cuda" else "f32"}): training took '
         f'{t["train_seconds"] / 60:.1f} min for kjv-target and {d["train_seconds"] / 60:.1f} min for kjv-draft')
    s += f', the whole command {rec["total_seconds"] / 60:.1f} min.' if rec.get('total_seconds') else '.'
    if t.get('step_seconds') and d.get('step_seconds'):
        est = (t['step_seconds'] * rec['target_train']['steps'] + d['step_seconds'] * rec['draft_train']['steps']) / 60
        s += (f' The median step took {t["step_seconds"]:.2f} s (target) and {d["step_seconds"]:.2f} s (draft): '
              f'{est:.0f} min of training at those rates (the median discounts pauses and bursts of other load, '
              f'not load that lasts the whole run).')
    if rec.get('note'):
        s += ' ' + rec['note']
    return wrap(s)


def write_card(path, r):
    t, d = r['models']['target'], r['models']['draft']
    rec = r['record']
    rt, rd = rec['models']['target'], rec['models']['draft']

    def row(name, m, mr):
        return (f'| {name} | {fmt_params(m["params"])} | {m["train_loss_f16"]:.4f} | {math.exp(m["train_loss_f16"]):.2f} | '
                f'{m["heldout_loss_f16"]:.4f} | {math.exp(m["heldout_loss_f16"]):.2f} | {mr["heldout_loss_f32"]:.4f} | '
                f'{mr["train_seconds"] / 60:.1f} min |')

    def samples(name, m):
        return (f'**{name}**, greedy, {r["sample_tokens"]} tokens:\n\n```\n{m["greedy"]}\n```\n\n'
                f'**{name}**, temperature {r["sample_temperature"]} (seed {r["seed"]}), {r["sample_tokens"]} tokens:\n\n'
                f'```\n{m["sampled"]}\n```\n')

    js = r['tokenizer_check']
    if 'cases' in js:
        js_line = (f'Checked against @huggingface/tokenizers (npm) by `tools/train/check_tokenizer.mjs`: '
                   f'{js["cases"]:,} texts (every verse, the whole held-out file, and a few odd strings), '
                   f'{js["idMismatches"]} id mismatches with the Python encoder, {js["roundTripFailures"]} '
                   f'decode(encode(text)) failures.')
    else:
        js_line = f'The JS check did not run: {js}.'
    js_line += (' `tools/train/check_hf.py` repeats the id check with the Rust `tokenizers` package and reads'
                ' the weights back with `safetensors`, where those Python packages are installed.')
    others = []
    for name in sorted(PRESETS):
        if name == rec['preset']:
            continue
        P = PRESETS[name]
        others.append(
            f'`--preset {name}{" --device cuda" if name == "gpu" else ""}` trains a larger pair for longer '
            f'({"in bf16 autocast, " if name == "gpu" else ""}{P["target_train"]["steps"]} steps x '
            f'{P["target_train"]["batch"]} sequences each): kjv-target {arch(P["target"])} '
            f'({preset_params(name, "target") / 1e6:.2f}M params), kjv-draft {arch(P["draft"])} '
            f'({preset_params(name, "draft") / 1e6:.2f}M params). No run of it is recorded for these files '
            f'(see `tools/train/README.md`).')
    c = r['context']
    text = f"""# weft demo models: kjv-target and kjv-draft

Two small base (not chat) language models trained from scratch on the King James Bible, for demos and
tests of weft's speculative decoding: `kjv-target` is the model, `kjv-draft` its drafter. They share
one tokenizer. They write KJV-flavoured text and nothing else.

## Corpus and licence

The King James Version (1611/1769 text), public domain, as shipped by the Debian package `bible-kjv`
(`bible -f "Gen1:1-Rev22:21"`, {r['n_verses']:,} verses). Verse references are stripped; each verse
is one line. Verse *i* (0-based, Bible order) is held out when `i % {HELDOUT_EVERY} == {HELDOUT_EVERY - 1}`:
{r['n_heldout']:,} held-out verses, all of them in `kjv-heldout.txt` (one per line, `\\n` after each;
{r['heldout_bytes']:,} bytes). The other {r['n_train']:,} verses train the tokenizer and the models.
Nothing but this text went into the tokenizer and the weights.

## Reproduce

```
apt-get install bible-kjv python3-torch python3-numpy
/usr/bin/python3 tools/train/train.py {rec['argv']}
```

{timing_text(rec)}

`/usr/bin/python3 tools/train/train.py --out models --card-only` rewrites this card from the files
here without training: it re-derives the split (and checks `kjv-heldout.txt` against it), evaluates
the shipped weights, regenerates the samples and reruns the tokenizer check. The f32 loss and the
times, which only training knows, come from `train-record.json`, which the training command writes.
A log of runs is in `tools/train/README.md`.

{wrap(' '.join(others))}

## Tokenizer

Byte-level BPE trained by `tools/train/bpe.py` (pure Python): vocabulary {r['vocab_size']} = 2 specials
(`{BOS}` = {r['bos_id']}, `{EOS}` = {r['eos_id']}) + 256 bytes + {r['n_merges']} merges.
`tokenizer.json` is standard Hugging Face: BPE model (merges as pairs), ByteLevel pre-tokenizer
(GPT-2 regex, no prefix space) and decoder, and a TemplateProcessing post-processor that puts
`{BOS}` in front when special tokens are added. `{EOS}` is defined but never occurs in training, so
the models do not stop by themselves; cap generation by length. {js_line}

## Architecture

Hugging Face `LlamaForCausalLM` (RMSNorm eps 1e-5, RoPE theta 10000 rotate-half, SiLU-gated MLP,
no biases, tied input/output embeddings, so `model.safetensors` has no `lm_head.weight`),
max_position_embeddings {t['config']['max_position_embeddings']}, trained at context {c}. Weights stored as F16.

- kjv-target: {arch(t['config'])}.
- kjv-draft: {arch(d['config'])}.

Training: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warmup then cosine to 10% of
peak, grad clip 1.0. Each step draws random {c}-token slices of the training stream (training verses
tokenized as one text joined by `\\n`), each fed as `[BOS] + slice[:-1]` and scored on `slice`.
target: {rec['target_train']['steps']} steps x {rec['target_train']['batch']} sequences, peak lr {rec['target_train']['lr']};
draft: {rec['draft_train']['steps']} steps x {rec['draft_train']['batch']} sequences, peak lr {rec['draft_train']['lr']}.

## Results

Loss is mean cross-entropy in nats per token; perplexity is its exp. "f16" is the shipped
`model.safetensors` read back; "f32" the weights before conversion. Train time is wall clock of the
run that made these files (see Reproduce).

| model | params | train loss (f16) | train ppl | held-out loss (f16) | held-out ppl | held-out loss (f32) | train time |
|---|---|---|---|---|---|---|---|
{row('kjv-target', t, rt)}
{row('kjv-draft', d, rd)}

`test/demo/model.test.ts` loads both models through weft, runs the held-out protocol below over
all {r['heldout_windows']} windows on weft's CPU reference forward, and requires the held-out ppl
column within 5%.

For scale: a unigram model (token frequencies of the training split) scores {r['unigram_heldout']:.4f}
on the held-out text (ppl {math.exp(r['unigram_heldout']):.1f}).

### Evaluation protocol

Read `kjv-heldout.txt`, drop its final `\\n` (so verses are joined by single `\\n`), and encode the
whole text with `tokenizer.json` without special tokens ({r['heldout_tokens']:,} ids; identical to
encoding verse by verse and joining with the id of `\\n`, {r['newline_id']}). Split the ids into
consecutive non-overlapping chunks of {c} (the last one shorter, {r['heldout_windows']} chunks). Feed
each chunk as `[BOS] + chunk[:-1]` from position 0 with no cache carried between chunks, and score
the cross-entropy of predicting every id of the chunk (the first one from BOS alone). The held-out
loss is the sum over all chunks divided by the number of ids. "Train loss" is the same protocol on
the training verses with `i % {HELDOUT_EVERY} == {TRAIN_EVAL_OFFSET}` ({r['train_eval_tokens']:,} ids).

## Samples

Prompt `{PROMPT}`, encoded after `{BOS}`, f16 weights.

{samples('kjv-target', t)}
{samples('kjv-draft', d)}"""
    with open(path, 'w') as f:
        f.write(text)


# ---------------------------------------------------------------- main


MODELS = (('kjv-target', 'target', 0), ('kjv-draft', 'draft', 100))  # name, preset key, seed offset


def evaluate_shipped(out_dir, tok, heldout_ids, train_eval_ids, context, device, seed):
    """Every figure of the card that the shipped folder determines: f16 losses, samples, sizes."""
    shipped = load_shipped(out_dir, device)
    return {
        'params': shipped.num_params(),
        'config': shipped.cfg.hf_config(),
        'heldout_loss_f16': eval_loss(shipped, heldout_ids, context, tok.bos_id, device),
        'train_loss_f16': eval_loss(shipped, train_eval_ids, context, tok.bos_id, device),
        'greedy': generate(shipped, tok, PROMPT, 48, device),
        'sampled': generate(shipped, tok, PROMPT, 48, device, temperature=0.8, seed=seed),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default='models', help='output folder (default: models)')
    ap.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    ap.add_argument('--preset', default='cpu', choices=sorted(PRESETS))
    ap.add_argument('--seed', type=int, default=1234)
    ap.add_argument('--threads', type=int, default=2, help='torch CPU threads (default 2)')
    ap.add_argument('--only', choices=['target', 'draft'], help='train one model only (no model card)')
    ap.add_argument('--steps-scale', type=float, default=1.0, help='scale step counts (smoke tests only)')
    ap.add_argument('--card-only', action='store_true',
                    help='no training: evaluate the models already in --out and rewrite README.md')
    args = ap.parse_args()
    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('error: --device cuda but torch.cuda.is_available() is False')
    if args.card_only and args.only:
        sys.exit('error: --card-only evaluates both models; drop --only')
    torch.set_num_threads(args.threads)
    t_start = time.time()
    record_path = os.path.join(args.out, 'train-record.json')
    if args.card_only:
        if not os.path.exists(record_path):
            sys.exit(f'error: --card-only needs {record_path}, written by the training command')
        with open(record_path) as f:
            record = json.load(f)
        P = PRESETS[record['preset']]
    else:
        P = PRESETS[args.preset]
        for k in ('target_train', 'draft_train'):
            P[k] = dict(P[k], steps=max(1, int(P[k]['steps'] * args.steps_scale)))
        record = {'argv': ' '.join(sys.argv[1:]) or '--out models', 'preset': args.preset, 'device': args.device,
                  'seed': args.seed, 'threads': args.threads, 'torch': torch.__version__,
                  'machine': (torch.cuda.get_device_name() if args.device == 'cuda'
                              else f'{platform.machine()} CPU, {os.cpu_count()} cores'),
                  'date': time.strftime('%Y-%m-%d'), 'target_train': P['target_train'],
                  'draft_train': P['draft_train'], 'models': {}}
    context = P['context']

    verses = read_corpus()
    heldout = [v for i, v in enumerate(verses) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    train = [v for i, v in enumerate(verses) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    train_eval = [v for i, v in enumerate(verses) if i % HELDOUT_EVERY == TRAIN_EVAL_OFFSET]
    os.makedirs(args.out, exist_ok=True)
    heldout_path = os.path.join(args.out, 'kjv-heldout.txt')
    heldout_text = '\n'.join(heldout) + '\n'
    if args.card_only:
        with open(heldout_path) as f:
            if f.read() != heldout_text:
                sys.exit(f'error: {heldout_path} is not the held-out split of the corpus')
    else:
        with open(heldout_path, 'w') as f:
            f.write(heldout_text)
    log(f'{len(verses)} verses: {len(train)} train, {len(heldout)} held out')

    t0 = time.time()
    if args.card_only:
        tok = load_tokenizer(os.path.join(args.out, 'kjv-target'))
    else:
        vocab, merges = bpe.train_bpe(train + ['\n'], P['vocab_size'], [BOS, EOS])
        tok = bpe.BPETokenizer(vocab, merges, BOS, EOS)
    nl = tok.encode('\n')
    assert len(nl) == 1
    stream = []
    for v in train:
        stream.extend(tok.encode(v))
        stream.extend(nl)
    heldout_ids = tok.encode('\n'.join(heldout))
    assert heldout_ids == sum(([*tok.encode(v), *nl] for v in heldout), [])[:-1]
    train_eval_ids = tok.encode('\n'.join(train_eval))
    log(f'tokenizer: {len(tok.vocab)} tokens in {time.time() - t0:.1f}s; train stream {len(stream):,} ids, '
        f'held-out {len(heldout_ids):,} ids')

    base = dict(vocab_size=len(tok.vocab), max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                tie_word_embeddings=True, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id)
    results = {'models': {}}
    for name, key, offset in MODELS:
        if args.only and key != args.only:
            continue
        out_dir = os.path.join(args.out, name)
        if not args.card_only:
            cfg = LlamaConfig(**base, **P[key])
            model, secs, step_secs = train_model(name, cfg, stream, P[f'{key}_train'], context, args.device,
                                                 args.seed + offset)
            save_model(model, tok, out_dir, context)
            record['models'][key] = {'train_seconds': secs, 'step_seconds': step_secs,
                                     'heldout_loss_f32': eval_loss(model, heldout_ids, context, tok.bos_id, args.device)}
            del model
        m = evaluate_shipped(out_dir, tok, heldout_ids, train_eval_ids, context, args.device, record['seed'])
        log(f'{name}: held-out f32 {record["models"][key]["heldout_loss_f32"]:.4f}, f16 {m["heldout_loss_f16"]:.4f} '
            f'(ppl {math.exp(m["heldout_loss_f16"]):.2f}), train f16 {m["train_loss_f16"]:.4f}; '
            f'greedy: {m["greedy"]!r}')
        results['models'][key] = m

    odd = ["Hello, World! It's 2024 -- isn't it?", '  two  spaces\n\nand\ttabs  ', 'Ünïcödé café 日本語 🙂',
           "they'll we've I'm you'd it's THEY'RE", 'numbers 12345 and 3.14159', '']
    check_texts = verses + ['\n'.join(heldout), '\n'.join(heldout) + '\n'] + odd
    results['tokenizer_check'] = check_tokenizer_js(os.path.join(args.out, f'kjv-{args.only or "target"}'), tok,
                                                    check_texts)
    log(f'tokenizer check: {results["tokenizer_check"]}')

    if not args.card_only:
        record['total_seconds'] = time.time() - t_start
        with open(os.path.join(args.out, f'train-record{"-" + args.only if args.only else ""}.json'), 'w') as f:
            json.dump(record, f, indent=2)
    results.update(
        record=record, seed=record['seed'], context=context, n_verses=len(verses), n_train=len(train),
        n_heldout=len(heldout), heldout_bytes=os.path.getsize(heldout_path), vocab_size=len(tok.vocab),
        n_merges=len(tok.merges), bos_id=tok.bos_id, eos_id=tok.eos_id, newline_id=nl[0],
        heldout_tokens=len(heldout_ids), heldout_windows=len(windows(heldout_ids, context, tok.bos_id)),
        train_eval_tokens=len(train_eval_ids), unigram_heldout=unigram_loss(stream, heldout_ids, len(tok.vocab)),
        sample_tokens=48, sample_temperature=0.8,
    )
    if not args.only:
        write_card(os.path.join(args.out, 'README.md'), results)
    log(f'done in {(time.time() - t_start) / 60:.1f} min; wrote {args.out}/README.md')
    js = results['tokenizer_check']
    if js.get('idMismatches') or js.get('roundTripFailures') or 'error' in js:
        sys.exit('error: tokenizer check against @huggingface/tokenizers failed')


if __name__ == '__main__':
    main()
