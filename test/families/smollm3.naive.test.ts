import { describe, expect, it } from 'vitest';
import { specFromConfig } from '../../src/model/families/index.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { layerAttention } from '../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors } from '../../src/model/weights.js';
import { type FixtureTensor, fixtureFiles, randomTensors, tinyConfig } from '../fixtures/write.js';

// An independent oracle for the SmolLM3 reference forward (src/model/reference/reference.ts, a Llama whose
// NoPE layers skip RoPE), written from Hugging Face's `SmolLM3ForCausalLM` (transformers
// models/smollm3/modeling_smollm3.py and SmolLM3Config's `no_rope_layers` default), not from weft's
// code: it reads the config.json itself rather than weft's spec; the whole sequence at once, no KV
// cache; f64 throughout, matrices as number[][]; RoPE as HF writes it (cos / sin of
// cat(freqs, freqs), rotate_half), applied only where `no_rope_layers[l]` is 1; attention with a
// dense additive causal mask.

type Matrix = number[][];
type Json = Readonly<Record<string, unknown>>;

const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A number under `key`, or `fallback` when absent or null (as a config class's default). */
function num(c: Json, key: string, fallback: number): number {
  const v = c[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number') throw new Error(`oracle: ${key} = ${JSON.stringify(v)} is not a number`);
  return v;
}

/** What `SmolLM3Config` makes of a config.json, as far as the forward reads it. */
interface SmolLM3Hf {
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly eps: number;
  readonly theta: number;
  /** Per layer, SmolLM3Attention.use_rope: `no_rope_layers[l]` (1 = RoPE). */
  readonly useRope: readonly boolean[];
  readonly tied: boolean;
}

/**
 * SmolLM3Config with its defaults: `no_rope_layers` as given, or 1 except at every
 * `no_rope_layer_interval`-th layer (4); `rope_theta` from `rope_parameters` or the top level
 * (default 2e6); `head_dim` hidden / heads.
 */
function smollm3Hf(c: Json): SmolLM3Hf {
  const layers = num(c, 'num_hidden_layers', 36);
  const heads = num(c, 'num_attention_heads', 16);
  const interval = num(c, 'no_rope_layer_interval', 4);
  const flags: unknown[] = Array.isArray(c.no_rope_layers)
    ? c.no_rope_layers
    : Array.from({ length: layers }, (_, l) => ((l + 1) % interval !== 0 ? 1 : 0));
  const rope = isJson(c.rope_parameters) ? c.rope_parameters : c;
  return {
    heads,
    kvHeads: num(c, 'num_key_value_heads', 4),
    headDim: num(c, 'head_dim', num(c, 'hidden_size', 2048) / heads),
    eps: num(c, 'rms_norm_eps', 1e-6),
    theta: num(rope, 'rope_theta', 2_000_000),
    useRope: flags.slice(0, layers).map((f) => f === 1),
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

/** SmolLM3RMSNorm: w · x · rsqrt(mean(x²) + eps). */
function rmsNorm(x: readonly number[], w: readonly number[], eps: number): number[] {
  const r = 1 / Math.sqrt(dot(x, x) / x.length + eps);
  return x.map((v, i) => w[i]! * v * r);
}

const silu = (v: number): number => v / (1 + Math.exp(-v));

/** SmolLM3RotaryEmbedding.forward for positions 0..T−1: cos and sin [T][D] of cat(freqs, freqs). */
function rotary(theta: number, D: number, T: number): { cos: Matrix; sin: Matrix } {
  const inv = Array.from({ length: D / 2 }, (_, i) => 1 / theta ** ((2 * i) / D));
  const emb = Array.from({ length: T }, (_, t) => [...inv, ...inv].map((f) => t * f));
  return { cos: emb.map((row) => row.map(Math.cos)), sin: emb.map((row) => row.map(Math.sin)) };
}

/** apply_rotary_pos_emb on one head's row: x · cos + rotate_half(x) · sin. */
function applyRotary(x: readonly number[], cos: readonly number[], sin: readonly number[]): number[] {
  const half = x.length / 2;
  const rotated = [...x.slice(half).map((v) => -v), ...x.slice(0, half)];
  return x.map((v, j) => v * cos[j]! + rotated[j]! * sin[j]!);
}

/** [T][n·D] → [n][T][D]: `.view(T, n, D).transpose`. */
function splitHeads(x: Matrix, n: number, D: number): Matrix[] {
  return Array.from({ length: n }, (_, k) => x.map((row) => row.slice(k * D, (k + 1) * D)));
}

/** SmolLM3Attention with eager_attention_forward, on the normed input h [T][H]; returns o_proj's [T][H]. */
function attention(cfg: SmolLM3Hf, source: NamedTensors, layer: number, h: Matrix): Matrix {
  const p = `model.layers.${layer}.self_attn`;
  const T = h.length;
  const D = cfg.headDim;
  const { cos, sin } = rotary(cfg.theta, D, T);
  const maybeRotate = (heads: Matrix[]): Matrix[] =>
    cfg.useRope[layer]
      ? heads.map((head) => head.map((row, t) => applyRotary(row, cos[t]!, sin[t]!)))
      : heads;
  const q = maybeRotate(splitHeads(matmulT(h, matrix(source, `${p}.q_proj.weight`)), cfg.heads, D));
  const k = maybeRotate(splitHeads(matmulT(h, matrix(source, `${p}.k_proj.weight`)), cfg.kvHeads, D));
  const v = splitHeads(matmulT(h, matrix(source, `${p}.v_proj.weight`)), cfg.kvHeads, D);
  const mask = Array.from({ length: T }, (_, i) =>
    Array.from({ length: T }, (_, j) => (j <= i ? 0 : Number.NEGATIVE_INFINITY)),
  );
  const scaling = D ** -0.5;
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

/** SmolLM3ForCausalLM's logits [T][V] of `tokens` at positions 0..T−1. */
function naiveLogits(cfg: SmolLM3Hf, source: NamedTensors, tokens: readonly number[]): Matrix {
  const embed = matrix(source, 'model.embed_tokens.weight');
  let x: Matrix = tokens.map((t) => [...embed[t]!]);
  const norm = (rows: Matrix, name: string): Matrix => {
    const w = vector(source, name);
    return rows.map((row) => rmsNorm(row, w, cfg.eps));
  };
  const add = (y: Matrix): void => {
    x = x.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  cfg.useRope.forEach((_, l) => {
    const p = `model.layers.${l}`;
    add(attention(cfg, source, l, norm(x, `${p}.input_layernorm.weight`)));
    const h = norm(x, `${p}.post_attention_layernorm.weight`);
    const gate = matmulT(h, matrix(source, `${p}.mlp.gate_proj.weight`));
    const up = matmulT(h, matrix(source, `${p}.mlp.up_proj.weight`));
    add(
      matmulT(
        gate.map((row, t) => row.map((g, i) => silu(g) * up[t]![i]!)),
        matrix(source, `${p}.mlp.down_proj.weight`),
      ),
    );
  });
  const head = matrix(source, cfg.tied ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT(norm(x, 'model.norm.weight'), head);
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

// f32 reference vs f64 oracle: as in the other naive oracles, 2e-5 · max|logit| is a wide margin
// over f32 rounding and far below what RoPE on the wrong layers does (checked below).
const TOL = 2e-5;

function expectAgree(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(got, want);
  expect(scale, what).toBeGreaterThan(0.5);
  expect(maxDiff, what).toBeLessThanOrEqual(TOL * scale);
}

function sourceOf(tensors: readonly FixtureTensor[]): NamedTensors {
  return mapWeights(Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }])));
}

const tokens = Array.from({ length: 24 }, (_, i) => (i * 193 + 71) % 512);

describe('SmolLM3 reference forward vs the independent Hugging Face-style implementation', () => {
  const config = tinyConfig('smollm3');
  const hf = smollm3Hf(config);
  const { spec, tensors } = fixtureFiles('smollm3', 'f32', 7);
  const source = sourceOf(tensors);

  it('the tiny fixture (no_rope_layers [1, 0]): logits agree, and only layer 0 has RoPE', () => {
    expect(hf.useRope).toEqual([true, false]);
    expect(spec.noRopeLayers).toEqual(hf.useRope.map((r) => !r));
    hf.useRope.forEach((r, l) => {
      expect(layerAttention(spec, l).rope?.theta, `layer ${l}`).toBe(r ? hf.theta : undefined);
    });
    const want = naiveLogits(hf, source, tokens).flat();
    expectAgree(new ReferenceRunner(spec, source).logitsFor(tokens), want, 'logits');
    // The check can tell: RoPE on both layers, or on neither, moves the logits far past the tolerance.
    for (const useRope of [
      [true, true],
      [false, false],
    ]) {
      const { maxDiff, scale } = compare(naiveLogits({ ...hf, useRope }, source, tokens).flat(), want);
      expect(maxDiff, `RoPE on ${useRope}`).toBeGreaterThan(10 * TOL * scale);
    }
  });

  it('4 layers without no_rope_layers: every 4th layer has no RoPE, as SmolLM3Config fills it', () => {
    const { no_rope_layers: _, ...rest } = config;
    const four = { ...rest, num_hidden_layers: 4 };
    const fourHf = smollm3Hf(four);
    expect(fourHf.useRope).toEqual([true, true, true, false]);
    const fourSpec = specFromConfig(four);
    expect(fourSpec.noRopeLayers).toEqual([false, false, false, true]);
    const weights = sourceOf(randomTensors(fourSpec, 9));
    const want = naiveLogits(fourHf, weights, tokens).flat();
    expectAgree(new ReferenceRunner(fourSpec, weights).logitsFor(tokens), want, 'logits, 4 layers');
    // And an interval of 2: layers 1 and 3.
    const everyOther = { ...four, no_rope_layer_interval: 2 };
    expect(smollm3Hf(everyOther).useRope).toEqual([true, false, true, false]);
    expect(specFromConfig(everyOther).noRopeLayers).toEqual([false, true, false, true]);
  });
});
