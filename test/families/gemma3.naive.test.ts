import { describe, expect, it } from 'vitest';
import { specFromConfig } from '../../src/model/families/index.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { layerAttention } from '../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors } from '../../src/model/weights.js';
import { type FixtureTensor, fixtureFiles, randomTensors, tinyConfig } from '../fixtures/write.js';

// An independent oracle for the Gemma 3 reference forward (src/model/reference/reference.ts with the sandwich
// norms, GeGLU, sliding windows and per-layer RoPE of model/blocks/), written from Hugging Face's
// `Gemma3ForCausalLM` (transformers models/gemma3/modeling_gemma3.py and the config class's
// `layer_types` / `convert_rope_params_to_dict`), not from weft's code: it reads the config.json
// itself, with Gemma3TextConfig's defaults, rather than weft's spec; the whole sequence at once,
// no KV cache; f64 throughout, matrices as number[][]; RoPE as HF writes it (cos / sin of
// cat(freqs, freqs), rotate_half); attention with the dense additive masks of masking_utils'
// `create_causal_mask` and `create_sliding_window_causal_mask` (kv ≤ q, and kv > q − window).

type Matrix = number[][];
type Json = Readonly<Record<string, unknown>>;
type LayerType = 'sliding_attention' | 'full_attention';

const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A number under `key`, or `fallback` when absent or null (as a config class's default). */
function num(c: Json, key: string, fallback: number): number {
  const v = c[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number') throw new Error(`oracle: ${key} = ${JSON.stringify(v)} is not a number`);
  return v;
}

/** One layer type's RoPE: the base and the divisor of linear scaling (1: `default`). */
interface HfRope {
  readonly theta: number;
  readonly factor: number;
}

/** What `Gemma3TextConfig` makes of a config.json, as far as the forward reads it. */
interface Gemma3Hf {
  readonly hidden: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly eps: number;
  readonly slidingWindow: number;
  readonly queryPreAttnScalar: number;
  readonly layerTypes: readonly LayerType[];
  readonly rope: Readonly<Record<LayerType, HfRope>>;
  readonly tied: boolean;
}

/** `_compute_default_rope_parameters` or `_compute_linear_scaling_rope_parameters`, by `rope_type`. */
function hfRope(p: Json): HfRope {
  const type = p.rope_type ?? p.type ?? 'default';
  const theta = num(p, 'rope_theta', Number.NaN);
  if (type === 'default') return { theta, factor: 1 };
  if (type === 'linear') return { theta, factor: num(p, 'factor', Number.NaN) };
  throw new Error(`oracle: rope_type ${JSON.stringify(type)} is not modelled`);
}

/**
 * Gemma3TextConfig with its defaults (head_dim 256, 4 KV heads, query_pre_attn_scalar 256, window
 * 4096): `layer_types` as given or every `sliding_window_pattern`-th layer (6) full; per layer type
 * its RoPE parameters (`rope_parameters`, else `default`), `rope_scaling` merged into the full
 * layers' only, and the bases `rope_theta` (1e6) and `rope_local_base_freq` (1e4) where unset.
 */
function gemma3Hf(c: Json): Gemma3Hf {
  const layers = num(c, 'num_hidden_layers', 26);
  const pattern = num(c, 'sliding_window_pattern', 6);
  const types: unknown[] = Array.isArray(c.layer_types)
    ? c.layer_types
    : Array.from({ length: layers }, (_, i) =>
        (i + 1) % pattern !== 0 ? 'sliding_attention' : 'full_attention',
      );
  const layerTypes = types.map((t) => {
    if (t !== 'sliding_attention' && t !== 'full_attention')
      throw new Error(`oracle: layer type ${String(t)}`);
    return t;
  });
  const given = isJson(c.rope_parameters) ? c.rope_parameters : {};
  const full: Record<string, unknown> = {
    ...(isJson(given.full_attention) ? given.full_attention : { rope_type: 'default' }),
    ...(isJson(c.rope_scaling) ? c.rope_scaling : {}),
  };
  const sliding: Record<string, unknown> = {
    ...(isJson(given.sliding_attention) ? given.sliding_attention : { rope_type: 'default' }),
  };
  full.rope_theta ??= num(c, 'rope_theta', 1_000_000);
  sliding.rope_theta ??= num(c, 'rope_local_base_freq', 10_000);
  return {
    hidden: num(c, 'hidden_size', 2304),
    heads: num(c, 'num_attention_heads', 8),
    kvHeads: num(c, 'num_key_value_heads', 4),
    headDim: num(c, 'head_dim', 256),
    eps: num(c, 'rms_norm_eps', 1e-6),
    slidingWindow: num(c, 'sliding_window', 4096),
    queryPreAttnScalar: num(c, 'query_pre_attn_scalar', 256),
    layerTypes,
    rope: { full_attention: hfRope(full), sliding_attention: hfRope(sliding) },
    tied: c.tie_word_embeddings !== false,
  };
}

function matrix(source: NamedTensors, name: string): Matrix {
  const t = source.get(name);
  const cols = t.shape[t.shape.length - 1]!;
  const rows = t.data.length / cols;
  return Array.from({ length: rows }, (_, r) => Array.from(t.data.subarray(r * cols, (r + 1) * cols)));
}

function vector(source: NamedTensors, name: string): number[] {
  return Array.from(source.get(name).data);
}

function dot(a: readonly number[], b: readonly number[]): number {
  let acc = 0;
  for (let i = 0; i < a.length; i++) acc += a[i]! * b[i]!;
  return acc;
}

/** nn.Linear without bias: x Wᵀ for x [T][in] and W [out][in]. */
function matmulT(x: Matrix, w: Matrix): Matrix {
  return x.map((row) => w.map((wr) => dot(row, wr)));
}

/** Gemma3RMSNorm: x · rsqrt(mean(x²) + eps) · (1 + w). */
function gemmaNorm(x: readonly number[], w: readonly number[], eps: number): number[] {
  const r = 1 / Math.sqrt(dot(x, x) / x.length + eps);
  return x.map((v, i) => v * r * (1 + w[i]!));
}

/** ACT2FN['gelu_pytorch_tanh']. */
const geluTanh = (v: number): number =>
  0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v * v * v)));

/** Gemma3RotaryEmbedding.forward for positions 0..T−1: cos and sin [T][D] of emb = cat(freqs, freqs). */
function rotary(rope: HfRope, D: number, T: number): { cos: Matrix; sin: Matrix } {
  const inv = Array.from({ length: D / 2 }, (_, i) => 1 / rope.theta ** ((2 * i) / D) / rope.factor);
  const emb = Array.from({ length: T }, (_, t) => [...inv, ...inv].map((f) => t * f));
  return { cos: emb.map((row) => row.map(Math.cos)), sin: emb.map((row) => row.map(Math.sin)) };
}

/** apply_rotary_pos_emb on one head's row: x · cos + rotate_half(x) · sin. */
function applyRotary(x: readonly number[], cos: readonly number[], sin: readonly number[]): number[] {
  const half = x.length / 2;
  const rotated = [...x.slice(half).map((v) => -v), ...x.slice(0, half)];
  return x.map((v, j) => v * cos[j]! + rotated[j]! * sin[j]!);
}

/** The additive mask [T][T]: 0 where kv ≤ q (and, with a window, kv > q − window), else −∞. */
function additiveMask(T: number, window: number | undefined): Matrix {
  return Array.from({ length: T }, (_, q) =>
    Array.from({ length: T }, (_, kv) =>
      kv <= q && (window === undefined || kv > q - window) ? 0 : Number.NEGATIVE_INFINITY,
    ),
  );
}

/** [T][n·D] → [n][T][D]: `.view(T, n, D).transpose`. */
function splitHeads(x: Matrix, n: number, D: number): Matrix[] {
  return Array.from({ length: n }, (_, k) => x.map((row) => row.slice(k * D, (k + 1) * D)));
}

/** Gemma3Attention with eager_attention_forward, on the normed input h [T][H]; returns o_proj's [T][H]. */
function attention(cfg: Gemma3Hf, source: NamedTensors, layer: number, h: Matrix): Matrix {
  const p = `model.layers.${layer}.self_attn`;
  const T = h.length;
  const D = cfg.headDim;
  const type = cfg.layerTypes[layer]!;
  const { cos, sin } = rotary(cfg.rope[type], D, T);
  const mask = additiveMask(T, type === 'sliding_attention' ? cfg.slidingWindow : undefined);
  const qn = vector(source, `${p}.q_norm.weight`);
  const kn = vector(source, `${p}.k_norm.weight`);
  const normRotate = (x: Matrix, n: number, w: number[]): Matrix[] =>
    splitHeads(x, n, D).map((head) =>
      head.map((row, t) => applyRotary(gemmaNorm(row, w, cfg.eps), cos[t]!, sin[t]!)),
    );
  const q = normRotate(matmulT(h, matrix(source, `${p}.q_proj.weight`)), cfg.heads, qn);
  const k = normRotate(matmulT(h, matrix(source, `${p}.k_proj.weight`)), cfg.kvHeads, kn);
  const v = splitHeads(matmulT(h, matrix(source, `${p}.v_proj.weight`)), cfg.kvHeads, D);
  const scaling = cfg.queryPreAttnScalar ** -0.5;
  const groups = cfg.heads / cfg.kvHeads; // repeat_kv
  const out = q.map((qh, n) => {
    const kh = k[Math.floor(n / groups)]!;
    const vh = v[Math.floor(n / groups)]!;
    return qh.map((qi, i) => {
      const scores = kh.map((kj, j) => dot(qi, kj) * scaling + mask[i]![j]!);
      const m = Math.max(...scores);
      const e = scores.map((s) => Math.exp(s - m));
      const z = e.reduce((a, b) => a + b, 0);
      return Array.from({ length: D }, (_, d) => e.reduce((a, pj, j) => a + (pj / z) * vh[j]![d]!, 0));
    });
  });
  const merged: Matrix = Array.from({ length: T }, (_, t) => out.flatMap((head) => head[t]!));
  return matmulT(merged, matrix(source, `${p}.o_proj.weight`));
}

/** Gemma3TextModel: the final-normed hidden states [T][H] of `tokens` at positions 0..T−1. */
function naiveHidden(cfg: Gemma3Hf, source: NamedTensors, tokens: readonly number[]): Matrix {
  const embed = matrix(source, 'model.embed_tokens.weight');
  // Gemma3TextScaledWordEmbedding: embed_scale.to(weight.dtype); the weights are f32 here.
  const scale = Math.fround(Math.sqrt(cfg.hidden));
  let x: Matrix = tokens.map((t) => embed[t]!.map((v) => v * scale));
  const norm = (rows: Matrix, name: string): Matrix => {
    const w = vector(source, name);
    return rows.map((row) => gemmaNorm(row, w, cfg.eps));
  };
  const add = (y: Matrix): void => {
    x = x.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  cfg.layerTypes.forEach((_, l) => {
    const p = `model.layers.${l}`;
    add(
      norm(
        attention(cfg, source, l, norm(x, `${p}.input_layernorm.weight`)),
        `${p}.post_attention_layernorm.weight`,
      ),
    );
    const h = norm(x, `${p}.pre_feedforward_layernorm.weight`);
    const gate = matmulT(h, matrix(source, `${p}.mlp.gate_proj.weight`));
    const up = matmulT(h, matrix(source, `${p}.mlp.up_proj.weight`));
    const act = gate.map((row, t) => row.map((g, i) => geluTanh(g) * up[t]![i]!));
    add(
      norm(
        matmulT(act, matrix(source, `${p}.mlp.down_proj.weight`)),
        `${p}.post_feedforward_layernorm.weight`,
      ),
    );
  });
  return norm(x, 'model.norm.weight');
}

/** Gemma3ForCausalLM's logits [T][V] (no final soft-capping: the configs here leave it null). */
function naiveLogits(cfg: Gemma3Hf, source: NamedTensors, tokens: readonly number[]): Matrix {
  const head = matrix(source, cfg.tied ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT(naiveHidden(cfg, source, tokens), head);
}

/** The last row of {@link naiveLogits}, projecting only that row. */
function naiveLastLogits(cfg: Gemma3Hf, source: NamedTensors, tokens: readonly number[]): number[] {
  const head = matrix(source, cfg.tied ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT([naiveHidden(cfg, source, tokens).at(-1)!], head)[0]!;
}

function argmax(row: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** max |got − want| and max |want|. */
function compare(got: ArrayLike<number>, want: ArrayLike<number>): { maxDiff: number; scale: number } {
  expect(got.length).toBe(want.length);
  let maxDiff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return { maxDiff, scale };
}

// The reference computes in f32 (every intermediate rounded to f32, reductions in f64), the oracle
// in f64, so each logit carries relative errors of a few f32 ulps (2^-24 ≈ 6e-8) per operation,
// amplified by at most O(1) through the normalised layers: as in the other naive oracles,
// 2e-5 · max|logit| is a wide margin over f32 rounding and still far below what a wrong window,
// base, scale or norm does (the sensitivity checks below show each moves the logits by more than
// 10× the tolerance).
const TOL = 2e-5;

function expectAgree(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(got, want);
  expect(scale, what).toBeGreaterThan(0.5);
  expect(maxDiff, what).toBeLessThanOrEqual(TOL * scale);
}

/** Whether two logit sets differ by more than 10× the tolerance (what a real mistake must do). */
function expectFarApart(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(a, b);
  expect(maxDiff, what).toBeGreaterThan(10 * TOL * scale);
}

function sourceOf(tensors: readonly FixtureTensor[]): NamedTensors {
  return mapWeights(Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }])));
}

/** Logits [T][V] as one flat row-major array. */
const flat = (m: Matrix): number[] => m.flat();

const config = tinyConfig('gemma3');
const hf = gemma3Hf(config);
const { spec, tensors } = fixtureFiles('gemma3', 'f32', 11);
const source = sourceOf(tensors);
const V = spec.vocabSize;
// 90 tokens: past the 64-token window, so the sliding layers' later rows drop their first keys.
const prompt = Array.from({ length: 90 }, (_, i) => (i * 193 + 71) % V);

let memo: Matrix | undefined;
/** The oracle's logits of the prompt, computed once. */
const promptLogits = (): Matrix => {
  memo ??= naiveLogits(hf, source, prompt);
  return memo;
};

describe('Gemma 3 reference forward vs the independent Hugging Face-style implementation', () => {
  it('the tiny config reads as Gemma3TextConfig reads it: windows, bases, scale per layer', () => {
    expect(hf.layerTypes).toEqual(['sliding_attention', 'full_attention', 'sliding_attention']);
    expect(hf.queryPreAttnScalar).not.toBe(hf.headDim);
    expect(hf.kvHeads).toBe(1);
    hf.layerTypes.forEach((type, l) => {
      const { window, rope } = layerAttention(spec, l);
      expect(window, `layer ${l}`).toBe(type === 'sliding_attention' ? hf.slidingWindow : undefined);
      expect(rope?.theta, `layer ${l}`).toBe(hf.rope[type].theta);
      expect(rope?.scaling, `layer ${l}`).toBeUndefined();
    });
    expect(spec.attentionScale).toBeCloseTo(hf.queryPreAttnScalar ** -0.5, 15);
    expect(spec.tiedEmbeddings).toBe(hf.tied);
  });

  it('logits of all 90 positions of a prompt longer than the window agree, and so do the greedy picks', async () => {
    const want = promptLogits();
    const runner = new ReferenceRunner(spec, source);
    expectAgree(runner.logitsFor(prompt), flat(want), 'logits');
    runner.trim(0);
    const picks = await runner.forward({ tokens: prompt }, GREEDY, 'all');
    expect(Array.from(picks)).toEqual(want.map(argmax));
  });

  it('chunked prefill (40 + 50) and decoding one token at a time give the one-pass logits', () => {
    const runner = new ReferenceRunner(spec, source);
    const onePass = runner.logitsFor(prompt);
    runner.trim(0);
    const chunked = [...runner.prefill(prompt.slice(0, 40)), ...runner.prefill(prompt.slice(40))];
    expect(runner.kvLength).toBe(prompt.length);
    runner.trim(0);
    const stepped = prompt.flatMap((t) => [...runner.prefill([t])]);
    // Rows are computed independently of which rows share a call (batch invariance), so the cached
    // paths give the one pass's values exactly; the oracle bounds all three.
    expect(chunked).toEqual(Array.from(onePass));
    expect(stepped).toEqual(Array.from(onePass));
    expectAgree(stepped, flat(promptLogits()), 'decoded one at a time vs the oracle');
  });

  it('a draft tree past the window equals the oracle on each root-to-node path, and a committed path continues', () => {
    // Prefix of 70: the tree's nodes stand at positions 70..72, so their windows start at 7..9,
    // while their cache slots run to 76 (a window taken over slots would cut the prefix short).
    const prefix = prompt.slice(0, 70);
    const runner = new ReferenceRunner(spec, source);
    runner.prefill(prefix);
    const parents = [-1, 0, 1, 1, 0, -1, 5];
    const tokens = [401, 17, 230, 99, 5, 311, 64];
    const got = runner.logits({ tokens, parents });
    const path = (i: number): number[] => (i < 0 ? [] : [...path(parents[i]!), tokens[i]!]);
    const want = tokens.map((_, i) => naiveLastLogits(hf, source, [...prefix, ...path(i)]));
    want.forEach((row, i) => {
      expectAgree(got.subarray(i * V, (i + 1) * V), row, `node ${i} (depth ${path(i).length - 1})`);
    });
    // Over slots, node 6 (slot 76, position 71) would see the keys after 12 rather than after 7: a
    // window of 59 on its path, which the comparison above tells apart.
    const bySlot = naiveLastLogits({ ...hf, slidingWindow: 59 }, source, [...prefix, ...path(6)]);
    expectFarApart(bySlot, want[6]!, 'a window taken over cache slots');
    // Accept the path 5 → 6 and run one more token after it.
    runner.commit([5, 6]);
    expect(runner.kvLength).toBe(72);
    const next = runner.prefill([123]);
    expectAgree(next, naiveLastLogits(hf, source, [...prefix, 311, 64, 123]), 'after the committed path');
  });

  it('is sensitive: no window, 1/√head_dim, swapped bases or an unscaled embedding move the logits', () => {
    const want = flat(promptLogits());
    expectFarApart(flat(naiveLogits({ ...hf, slidingWindow: 1e9 }, source, prompt)), want, 'no window');
    expectFarApart(
      flat(naiveLogits({ ...hf, queryPreAttnScalar: hf.headDim }, source, prompt)),
      want,
      'scale',
    );
    const swapped = { full_attention: hf.rope.sliding_attention, sliding_attention: hf.rope.full_attention };
    expectFarApart(flat(naiveLogits({ ...hf, rope: swapped }, source, prompt)), want, 'bases swapped');
    expectFarApart(flat(naiveLogits({ ...hf, hidden: 1 }, source, prompt)), want, 'embedding unscaled');
  });
});

describe('Gemma 3 config variants vs the oracle', () => {
  // Gemma 3 4B and up: linear scaling by 8 on the global layers; the local layers keep theirs.
  const scaledConfig = { ...config, rope_scaling: { rope_type: 'linear', factor: 8 } };

  it('rope_scaling linear × 8 applies to the full-attention layers only', () => {
    const scaledHf = gemma3Hf(scaledConfig);
    expect(scaledHf.rope.full_attention).toEqual({ theta: 1_000_000, factor: 8 });
    expect(scaledHf.rope.sliding_attention).toEqual({ theta: 10_000, factor: 1 });
    const scaledSpec = specFromConfig(scaledConfig);
    const got = new ReferenceRunner(scaledSpec, source).logitsFor(prompt);
    const want = flat(naiveLogits(scaledHf, source, prompt));
    expectAgree(got, want, 'linear-scaled global RoPE');
    expectFarApart(want, flat(promptLogits()), 'the scaling itself');
    const everywhere = {
      ...scaledHf,
      rope: { ...scaledHf.rope, sliding_attention: { theta: 10_000, factor: 8 } },
    };
    expectFarApart(flat(naiveLogits(everywhere, source, prompt)), want, 'scaling the local layers too');
  });

  it('Transformers 5 rope_parameters per layer type read as the rope_scaling form', () => {
    const { rope_theta: _, rope_local_base_freq: __, rope_scaling: ___, ...rest } = config;
    const perType = {
      ...rest,
      rope_parameters: {
        full_attention: { rope_type: 'linear', factor: 8, rope_theta: 1_000_000 },
        sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
      },
    };
    expect(gemma3Hf(perType)).toEqual(gemma3Hf(scaledConfig));
    expect(specFromConfig(perType)).toEqual(specFromConfig(scaledConfig));
  });

  it('sliding_window_pattern in place of layer_types (4 layers, pattern 3: local, local, global, local)', () => {
    const { layer_types: _, ...rest } = config;
    const patterned = { ...rest, num_hidden_layers: 4, sliding_window_pattern: 3 };
    const patternedHf = gemma3Hf(patterned);
    expect(patternedHf.layerTypes).toEqual([
      'sliding_attention',
      'sliding_attention',
      'full_attention',
      'sliding_attention',
    ]);
    const patternedSpec = specFromConfig(patterned);
    expect(patternedSpec.slidingLayers).toEqual([true, true, false, true]);
    const weights = sourceOf(randomTensors(patternedSpec, 5));
    const got = new ReferenceRunner(patternedSpec, weights).logitsFor(prompt);
    expectAgree(got, flat(naiveLogits(patternedHf, weights, prompt)), 'pattern 3');
    // Neither key: Gemma3TextConfig's default pattern of 6 leaves four layers all local.
    const { sliding_window_pattern: __, ...bare } = patterned;
    expect(gemma3Hf(bare).layerTypes.every((t) => t === 'sliding_attention')).toBe(true);
    expect(specFromConfig(bare).slidingLayers).toEqual([true, true, true, true]);
  });
});
