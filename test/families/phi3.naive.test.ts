import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openSafetensors } from '../../src/formats/safetensors.js';
import { safetensorsReader } from '../../src/formats/weft-checkpoint.js';
import { ropeInvFreq } from '../../src/kernels/rope/rope.js';
import { ropeInverseFrequencies } from '../../src/model/blocks/ops.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { fuseProjections } from '../../src/model/fused-view.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { type ModelSpec, ropeForContext } from '../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors, readAllF32, type Tensor } from '../../src/model/weights.js';
import { configFixtureFiles, safetensorsBytes, sameF32, tinyConfig } from '../fixtures/write.js';

// An independent oracle for the Phi-3 reference forward (src/model/reference/reference.ts over the loader's
// split of the fused projections, partial rotary and LongRoPE), written from Hugging Face's
// `Phi3ForCausalLM` (transformers models/phi3/modeling_phi3.py, configuration_phi3.py and
// modeling_rope_utils.py's `_compute_longrope_parameters` and `dynamic_rope_update`), not from
// weft's code: it reads config.json itself with Phi3Config's defaults, the checkpoint's tensors as
// stored (the fused `qkv_proj` and `gate_up_proj`, sliced here as Phi3Attention and Phi3MLP slice
// their outputs), runs the whole sequence at once without a KV cache, f64 throughout, matrices as
// number[][]; RoPE as HF writes it (cos and sin of cat(freqs, freqs) times the attention factor,
// rotate_half over the rotated width, the rest passed through), the long or short factors picked
// by the sequence's largest position as `dynamic_rope_update` picks them, and attention with the
// additive masks of masking_utils (kv ≤ q, and with a window kv > q − window).

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

function numbers(c: Json, key: string): number[] {
  const v = c[key];
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'number'))
    throw new Error(`oracle: ${key} is not a list of numbers`);
  return v;
}

/** What `Phi3Config` makes of a config.json, as far as the forward reads it. */
interface Phi3Hf {
  readonly hidden: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly eps: number;
  readonly theta: number;
  readonly partialRotaryFactor: number;
  /** LongRoPE's lists and its parameters; undefined for `default`. */
  readonly longrope:
    | {
        readonly short: readonly number[];
        readonly long: readonly number[];
        readonly factor: number | undefined;
        readonly attentionFactor: number | undefined;
      }
    | undefined;
  readonly maxPositions: number;
  readonly originalMaxPositions: number;
  readonly slidingWindow: number | undefined;
  readonly tied: boolean;
}

/**
 * Phi3Config with its defaults (4096 positions and original positions, rope_theta 10000,
 * partial_rotary_factor 1, an untied head): `rope_scaling` or Transformers 5's `rope_parameters`
 * (whose rope_theta and partial_rotary_factor win), its `su` and `yarn` renamed `longrope`.
 */
function phi3Hf(c: Json): Phi3Hf {
  const rp = isJson(c.rope_parameters) ? c.rope_parameters : undefined;
  const rs = rp ?? (isJson(c.rope_scaling) ? c.rope_scaling : {});
  const type = rs.rope_type ?? rs.type ?? 'default';
  const kind = type === 'su' || type === 'yarn' ? 'longrope' : type;
  if (kind !== 'default' && kind !== 'longrope') throw new Error(`oracle: rope type ${String(type)}`);
  const hidden = num(c, 'hidden_size', 3072);
  const heads = num(c, 'num_attention_heads', 32);
  return {
    hidden,
    heads,
    kvHeads: num(c, 'num_key_value_heads', heads),
    headDim: num(c, 'head_dim', Math.floor(hidden / heads)),
    eps: num(c, 'rms_norm_eps', 1e-5),
    theta: num(rp ?? c, 'rope_theta', 10000),
    partialRotaryFactor: num(
      rp && rp.partial_rotary_factor !== undefined ? rp : c,
      'partial_rotary_factor',
      1,
    ),
    longrope:
      kind === 'longrope'
        ? {
            short: numbers(rs, 'short_factor'),
            long: numbers(rs, 'long_factor'),
            factor: typeof rs.factor === 'number' ? rs.factor : undefined,
            attentionFactor: typeof rs.attention_factor === 'number' ? rs.attention_factor : undefined,
          }
        : undefined,
    maxPositions: num(c, 'max_position_embeddings', 4096),
    originalMaxPositions: num(c, 'original_max_position_embeddings', 4096),
    slidingWindow: typeof c.sliding_window === 'number' ? c.sliding_window : undefined,
    tied: c.tie_word_embeddings === true,
  };
}

/**
 * `_compute_longrope_parameters` (or the default RoPE) for a forward whose largest position is
 * `seqLen - 1`, as `dynamic_rope_update` calls it: the inverse frequencies of the rotated width and
 * the attention factor cos and sin are multiplied by.
 */
function hfRope(cfg: Phi3Hf, seqLen: number): { inv: number[]; scale: number } {
  const dim = Math.trunc(cfg.headDim * cfg.partialRotaryFactor);
  const shape = Array.from({ length: dim / 2 }, (_, i) => cfg.theta ** ((2 * i) / dim));
  const lr = cfg.longrope;
  if (lr === undefined) return { inv: shape.map((b) => 1 / b), scale: 1 };
  const factor = lr.factor ?? cfg.maxPositions / cfg.originalMaxPositions;
  const scale =
    lr.attentionFactor ??
    (factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(cfg.originalMaxPositions)));
  const ext = seqLen > cfg.originalMaxPositions ? lr.long : lr.short;
  return { inv: shape.map((b, i) => 1 / (ext[i]! * b)), scale };
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

/** Phi3RMSNorm: x · rsqrt(mean(x²) + eps) · w. */
function rmsnorm(x: readonly number[], w: readonly number[], eps: number): number[] {
  const r = 1 / Math.sqrt(dot(x, x) / x.length + eps);
  return x.map((v, i) => v * r * w[i]!);
}

const silu = (v: number): number => v / (1 + Math.exp(-v));

/**
 * apply_rotary_pos_emb on one head's row at `pos`: the first R = 2 · inv.length values become
 * x · cos + rotate_half(x) · sin (cos, sin of cat(freqs, freqs), times `scale`), the rest pass.
 */
function applyRotary(x: readonly number[], inv: readonly number[], scale: number, pos: number): number[] {
  const half = inv.length;
  const out = [...x];
  for (let i = 0; i < half; i++) {
    const c = Math.cos(pos * inv[i]!) * scale;
    const s = Math.sin(pos * inv[i]!) * scale;
    out[i] = x[i]! * c - x[i + half]! * s;
    out[i + half] = x[i + half]! * c + x[i]! * s;
  }
  return out;
}

/** [T][n·D] → [n][T][D]: `.view(T, n, D).transpose`. */
function splitHeads(x: Matrix, n: number, D: number): Matrix[] {
  return Array.from({ length: n }, (_, k) => x.map((row) => row.slice(k * D, (k + 1) * D)));
}

/** Phi3Attention with eager_attention_forward, on the normed input h [T][H]; returns o_proj's [T][H]. */
function attention(cfg: Phi3Hf, source: NamedTensors, layer: number, h: Matrix): Matrix {
  const p = `model.layers.${layer}.self_attn`;
  const T = h.length;
  const D = cfg.headDim;
  // qkv_proj, then the slices Phi3Attention.forward takes: queries, keys, values.
  const qkv = matmulT(h, matrix(source, `${p}.qkv_proj.weight`));
  const queryPos = cfg.heads * D;
  const kvWidth = cfg.kvHeads * D;
  const q = splitHeads(
    qkv.map((row) => row.slice(0, queryPos)),
    cfg.heads,
    D,
  );
  const k = splitHeads(
    qkv.map((row) => row.slice(queryPos, queryPos + kvWidth)),
    cfg.kvHeads,
    D,
  );
  const v = splitHeads(
    qkv.map((row) => row.slice(queryPos + kvWidth)),
    cfg.kvHeads,
    D,
  );
  const { inv, scale } = hfRope(cfg, T);
  const qr = q.map((head) => head.map((row, t) => applyRotary(row, inv, scale, t)));
  const kr = k.map((head) => head.map((row, t) => applyRotary(row, inv, scale, t)));
  const window = cfg.slidingWindow;
  const groups = cfg.heads / cfg.kvHeads; // repeat_kv
  const out = qr.map((qh, n) => {
    const kh = kr[Math.floor(n / groups)]!;
    const vh = v[Math.floor(n / groups)]!;
    return qh.map((qi, i) => {
      const scores = kh.map((kj, j) =>
        j <= i && (window === undefined || j > i - window)
          ? dot(qi, kj) / Math.sqrt(D)
          : Number.NEGATIVE_INFINITY,
      );
      const m = Math.max(...scores);
      const e = scores.map((s) => Math.exp(s - m));
      const z = e.reduce((a, b) => a + b, 0);
      return Array.from({ length: D }, (_, d) => e.reduce((a, pj, j) => a + (pj / z) * vh[j]![d]!, 0));
    });
  });
  const merged: Matrix = Array.from({ length: T }, (_, t) => out.flatMap((head) => head[t]!));
  return matmulT(merged, matrix(source, `${p}.o_proj.weight`));
}

/** Phi3MLP: gate_up_proj, chunk(2) into gate and up, up · silu(gate), down_proj. */
function mlp(source: NamedTensors, layer: number, h: Matrix): Matrix {
  const p = `model.layers.${layer}.mlp`;
  const gateUp = matmulT(h, matrix(source, `${p}.gate_up_proj.weight`));
  const I = gateUp[0]!.length / 2;
  const act = gateUp.map((row) => row.slice(I).map((up, i) => up * silu(row[i]!)));
  return matmulT(act, matrix(source, `${p}.down_proj.weight`));
}

/** Phi3Model: the final-normed hidden states [T][H] of `tokens` at positions 0..T−1. */
function naiveHidden(cfg: Phi3Hf, source: NamedTensors, layers: number, tokens: readonly number[]): Matrix {
  const embed = matrix(source, 'model.embed_tokens.weight');
  let x: Matrix = tokens.map((t) => [...embed[t]!]);
  const norm = (rows: Matrix, name: string): Matrix => {
    const w = vector(source, name);
    return rows.map((row) => rmsnorm(row, w, cfg.eps));
  };
  const add = (y: Matrix): void => {
    x = x.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}`;
    add(attention(cfg, source, l, norm(x, `${p}.input_layernorm.weight`)));
    add(mlp(source, l, norm(x, `${p}.post_attention_layernorm.weight`)));
  }
  return norm(x, 'model.norm.weight');
}

/** Phi3ForCausalLM's logits [T][V]. */
function naiveLogits(cfg: Phi3Hf, source: NamedTensors, layers: number, tokens: readonly number[]): Matrix {
  const head = matrix(source, cfg.tied ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT(naiveHidden(cfg, source, layers, tokens), head);
}

/** The last row of {@link naiveLogits}, projecting only that row. */
function naiveLastLogits(
  cfg: Phi3Hf,
  source: NamedTensors,
  layers: number,
  tokens: readonly number[],
): number[] {
  const head = matrix(source, cfg.tied ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT([naiveHidden(cfg, source, layers, tokens).at(-1)!], head)[0]!;
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

// As in the other naive oracles: the reference rounds every intermediate to f32 (reductions in
// f64), the oracle runs in f64, so each logit carries a few f32 ulps of relative error per
// operation; 2e-5 · max|logit| is a wide margin over that and still far below what a wrong factor,
// attention factor, rotary width or split does (the sensitivity checks show each moves the
// logits by more than 10× the tolerance).
const TOL = 2e-5;

function expectAgree(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(got, want);
  expect(scale, what).toBeGreaterThan(0.5);
  expect(maxDiff, what).toBeLessThanOrEqual(TOL * scale);
}

function expectFarApart(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(a, b);
  expect(maxDiff, what).toBeGreaterThan(10 * TOL * scale);
}

/** The checkpoint's tensors as stored (the fused ones fused), read without weft's loader. */
async function storedSource(files: Map<string, Uint8Array>): Promise<NamedTensors> {
  const st = await openSafetensors(memoryBytes(files.get('model.safetensors')!, 'model.safetensors'));
  const reader = safetensorsReader(st);
  const record: Record<string, Tensor> = {};
  for (const [name, info] of st.tensors)
    record[name] = { shape: info.shape, data: await reader.readF32(name) };
  return mapWeights(record);
}

/** The model as weft opens its folder: the spec and the weights through the loader's split view. */
async function weftModel(
  files: Map<string, Uint8Array>,
): Promise<{ spec: ModelSpec; weights: NamedTensors }> {
  const opened = await openModel(memoryModelFiles('phi3', files));
  return { spec: opened.spec, weights: mapWeights(await readAllF32(opened.weights)) };
}

const flat = (m: Matrix): number[] => m.flat();

const config = tinyConfig('phi3');
const hf = phi3Hf(config);
const fixture = configFixtureFiles(config, 11);
const V = fixture.spec.vocabSize;
const layers = fixture.spec.layers;
// 60 tokens: within the original context of 64, where the short factors run, with room for a tree.
const prompt = Array.from({ length: 60 }, (_, i) => (i * 193 + 71) % V);

let memo: Promise<{ stored: NamedTensors; weft: { spec: ModelSpec; weights: NamedTensors }; want: Matrix }>;
/** The stored tensors, weft's opened model and the oracle's prompt logits, computed once. */
const setup = () => {
  memo ??= (async () => {
    const stored = await storedSource(fixture.files);
    return { stored, weft: await weftModel(fixture.files), want: naiveLogits(hf, stored, layers, prompt) };
  })();
  return memo;
};

describe('Phi-3 reference forward vs the independent Hugging Face-style implementation', () => {
  it('the tiny config reads as Phi3Config reads it: partial rotary, LongRoPE short and long factors and attention factor, the whole context', async () => {
    const { weft } = await setup();
    const { spec } = weft;
    expect(spec.family).toBe('phi3');
    expect(hf.headDim).toBe(32);
    expect(spec.headDim).toBe(hf.headDim);
    expect(spec.rope.rotaryDim).toBe(24);
    const s = spec.rope.scaling;
    if (s?.type !== 'longrope') throw new Error('expected LongRoPE');
    expect(s.factors).toEqual(hf.longrope!.short.map(Math.fround));
    expect(s.factors.length).toBe(12);
    expect(s.attentionFactor).toBe(Math.fround(Math.sqrt(1 + Math.log(256 / 64) / Math.log(64))));
    expect(s.long).toEqual({
      factors: hf.longrope!.long.map(Math.fround),
      originalMaxPositions: hf.originalMaxPositions,
    });
    expect(spec.maxPositions).toBe(hf.maxPositions);
    expect(spec.slidingWindow).toBeUndefined(); // 262144: longer than any context
    expect(spec.tiedEmbeddings).toBe(true);
    expect(spec.qkvBias).toBe(false);
  });

  it("the kernels' ropeInvFreq gives the reference's LongRoPE frequencies bit for bit", async () => {
    const { weft } = await setup();
    const { rope } = weft.spec;
    const ref = ropeInverseFrequencies(rope, weft.spec.headDim);
    expect(ref.length).toBe(12);
    expect(sameF32(ropeInvFreq(rope.rotaryDim!, rope.theta, rope.scaling), ref)).toBeUndefined();
    // And both are Transformers' 1 / (short_factor · theta^(2i / 24)) to f32 rounding.
    const want = hfRope(hf, prompt.length).inv;
    ref.forEach((f, i) => {
      expect(Math.abs(f - want[i]!)).toBeLessThanOrEqual(2 ** -22 * want[i]!);
    });
    expect(() => ropeInvFreq(22, rope.theta, rope.scaling)).toThrow(/12 factors for 11 rotary pairs/);
  });

  it('the loader presents the fused projections as q, k, v, gate and up: their rows, in order', async () => {
    const { stored } = await setup();
    const opened = await openModel(memoryModelFiles('phi3', fixture.files));
    const names = [...opened.weights.tensors.keys()];
    expect(names.some((n) => n.includes('qkv_proj') || n.includes('gate_up_proj'))).toBe(false);
    const H = hf.hidden;
    const qkv = stored.get('model.layers.1.self_attn.qkv_proj.weight').data;
    const gateUp = stored.get('model.layers.1.mlp.gate_up_proj.weight').data;
    const rows = (data: Float32Array, r0: number, n: number) => data.subarray(r0 * H, (r0 + n) * H);
    const read = (name: string) => opened.weights.readF32(`model.layers.1.${name}.weight`);
    expect(await read('self_attn.q_proj')).toEqual(rows(qkv, 0, 128));
    expect(await read('self_attn.k_proj')).toEqual(rows(qkv, 128, 64));
    expect(await read('self_attn.v_proj')).toEqual(rows(qkv, 192, 64));
    expect(await read('mlp.gate_proj')).toEqual(rows(gateUp, 0, 96));
    expect(await read('mlp.up_proj')).toEqual(rows(gateUp, 96, 96));
    expect(await opened.weights.readRowsF32!('model.layers.1.self_attn.v_proj.weight', 5, 3)).toEqual(
      rows(qkv, 197, 3),
    );
    expect(opened.weights.tensors.get('model.layers.1.self_attn.k_proj.weight')?.shape).toEqual([64, H]);
  });

  it('a checkpoint holding the plain names loads as it is; a fused tensor of the wrong shape is refused by name', async () => {
    const { weft } = await setup();
    const apart = new Map(fixture.files);
    apart.set('model.safetensors', safetensorsBytes(fixture.tensors, 'F32'));
    const plain = await weftModel(apart);
    expect(plain.spec).toEqual(weft.spec);
    for (const name of ['model.layers.0.self_attn.k_proj.weight', 'model.layers.1.mlp.gate_proj.weight'])
      expect(plain.weights.get(name).data).toEqual(weft.weights.get(name).data);
    const short = new Map(fixture.files);
    const qkv = 'model.layers.1.self_attn.qkv_proj.weight';
    const stored = fuseProjections(fixture.spec, fixture.tensors, 'checkpoint').map((t) =>
      t.name === qkv ? { ...t, shape: [255, 128], data: t.data.subarray(0, 255 * 128) } : t,
    );
    short.set('model.safetensors', safetensorsBytes(stored, 'F32'));
    const e = await openModel(memoryModelFiles('phi3', short)).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as Error).message).toMatch(
      /phi3\/model\.safetensors: model\.layers\.1\.self_attn\.qkv_proj\.weight = \[255,128\]: wrong shape, expected \[256, 128\]/,
    );
  });

  it('logits of all 60 positions agree, and so do the greedy picks', async () => {
    const { weft, want } = await setup();
    const runner = new ReferenceRunner(weft.spec, weft.weights);
    expectAgree(runner.logitsFor(prompt), flat(want), 'logits');
    runner.trim(0);
    const picks = await runner.forward({ tokens: prompt }, GREEDY, 'all');
    expect(Array.from(picks)).toEqual(want.map(argmax));
  });

  it('chunked prefill (25 + 35) and decoding one token at a time give the one-pass logits', async () => {
    const { weft, want } = await setup();
    const runner = new ReferenceRunner(weft.spec, weft.weights);
    const onePass = runner.logitsFor(prompt);
    runner.trim(0);
    const chunked = [...runner.prefill(prompt.slice(0, 25)), ...runner.prefill(prompt.slice(25))];
    expect(runner.kvLength).toBe(prompt.length);
    runner.trim(0);
    const stepped = prompt.flatMap((t) => [...runner.prefill([t])]);
    // Rows never depend on which rows share a call, so the cached paths give the one pass exactly.
    expect(chunked).toEqual(Array.from(onePass));
    expect(stepped).toEqual(Array.from(onePass));
    expectAgree(stepped, flat(want), 'decoded one at a time vs the oracle');
  });

  it("a draft tree's nodes equal the oracle on each root-to-node path, and a committed path continues", async () => {
    const { weft, stored } = await setup();
    const prefix = prompt.slice(0, 50);
    const runner = new ReferenceRunner(weft.spec, weft.weights);
    runner.prefill(prefix);
    const parents = [-1, 0, 1, 1, 0, -1, 5];
    const tokens = [401, 17, 230, 99, 5, 311, 64];
    const got = runner.logits({ tokens, parents });
    const path = (i: number): number[] => (i < 0 ? [] : [...path(parents[i]!), tokens[i]!]);
    tokens.forEach((_, i) => {
      const want = naiveLastLogits(hf, stored, layers, [...prefix, ...path(i)]);
      expectAgree(got.subarray(i * V, (i + 1) * V), want, `node ${i} (depth ${path(i).length - 1})`);
    });
    runner.commit([5, 6]);
    expect(runner.kvLength).toBe(52);
    const next = runner.prefill([123]);
    expectAgree(
      next,
      naiveLastLogits(hf, stored, layers, [...prefix, 311, 64, 123]),
      'after the committed path',
    );
  });

  it('is sensitive: no attention factor, the long factors, no factors or full rotary move the logits', async () => {
    const { stored, want } = await setup();
    const lr = hf.longrope!;
    const variants: [string, Phi3Hf][] = [
      ['attention factor 1', { ...hf, longrope: { ...lr, attentionFactor: 1 } }],
      ['the long factors', { ...hf, longrope: { ...lr, short: lr.long } }],
      ['plain RoPE', { ...hf, longrope: undefined }],
      [
        'full rotary',
        { ...hf, partialRotaryFactor: 1, longrope: { ...lr, short: [...lr.short, 1, 1, 1, 1] } },
      ],
    ];
    for (const [what, cfg] of variants)
      expectFarApart(flat(naiveLogits(cfg, stored, layers, prompt)), flat(want), what);
  });
});

describe('Phi-3 config variants vs the oracle', () => {
  /** The reference's logits of `prompt` for `cfg` (its own random weights) and the oracle's. */
  async function agreeOn(cfg: Record<string, unknown>, what: string, tokens = prompt): Promise<Matrix> {
    const { files } = configFixtureFiles(cfg, 5);
    const stored = await storedSource(files);
    const { spec, weights } = await weftModel(files);
    const want = naiveLogits(phi3Hf(cfg), stored, spec.layers, tokens);
    expectAgree(new ReferenceRunner(spec, weights).logitsFor(tokens), flat(want), what);
    return want;
  }

  it('a sliding window shorter than the context masks every layer as Transformers does', async () => {
    const windowed = { ...config, sliding_window: 16 };
    expect(specFromConfig(windowed).slidingWindow).toBe(16);
    const want = await agreeOn(windowed, 'window 16');
    const { files } = configFixtureFiles(windowed, 5);
    const stored = await storedSource(files);
    expectFarApart(
      flat(naiveLogits({ ...phi3Hf(windowed), slidingWindow: undefined }, stored, layers, prompt)),
      flat(want),
      'no window',
    );
  });

  it('Phi-3-mini-4k style: no rope_scaling, full rotary, its whole context, untied head', async () => {
    const {
      rope_scaling: _,
      partial_rotary_factor: __,
      original_max_position_embeddings: ___,
      ...rest
    } = config;
    const plain = { ...rest, rope_scaling: null, tie_word_embeddings: false, sliding_window: 2047 };
    const spec = specFromConfig(plain);
    expect(spec.rope).toEqual({ theta: 10000, layout: 'half' });
    expect(spec.maxPositions).toBe(256);
    expect(spec.slidingWindow).toBeUndefined();
    await agreeOn(
      plain,
      'plain RoPE, 70 tokens',
      Array.from({ length: 70 }, (_, i) => (i * 37 + 5) % V),
    );
  });

  it('an explicit attention_factor, or factor, sets the attention factor; su reads as longrope', async () => {
    const rs = config.rope_scaling as Json;
    const explicit = { ...config, rope_scaling: { ...rs, attention_factor: 1.3 } };
    const s = specFromConfig(explicit).rope.scaling;
    expect(s).toMatchObject({ type: 'longrope', attentionFactor: Math.fround(1.3) });
    await agreeOn(explicit, 'attention_factor 1.3');
    const byFactor = specFromConfig({ ...config, rope_scaling: { ...rs, factor: 32 } }).rope.scaling;
    expect(byFactor).toMatchObject({
      attentionFactor: Math.fround(Math.sqrt(1 + Math.log(32) / Math.log(64))),
    });
    expect(specFromConfig({ ...config, rope_scaling: { ...rs, type: 'su' } })).toEqual(
      specFromConfig(config),
    );
  });

  it('Transformers 5 rope_parameters (with the partial rotary inside) read as the rope_scaling form', () => {
    const { rope_scaling: rs, partial_rotary_factor: _, rope_theta: __, ...rest } = config;
    const { type: ___, ...lists } = rs as Json;
    const v5 = {
      ...rest,
      rope_parameters: { ...lists, rope_type: 'longrope', rope_theta: 10000, partial_rotary_factor: 0.75 },
    };
    expect(specFromConfig(v5)).toEqual(specFromConfig(config));
  });
});

describe('Phi-3 config refusals and the context limit', () => {
  const rs = config.rope_scaling as Json;
  /** The ModelFormatError `specFromConfig` throws for `cfg`. */
  function refusal(cfg: Record<string, unknown>): ModelFormatError {
    try {
      specFromConfig(cfg, 'phi/config.json');
    } catch (e) {
      if (e instanceof ModelFormatError) return e;
      throw e;
    }
    throw new Error('accepted');
  }

  it('refuses other RoPE types, factor lists of the wrong length, a rotary width that is odd, attention biases', () => {
    for (const type of ['linear', 'dynamic', 'llama3']) {
      const e = refusal({ ...config, rope_scaling: { ...rs, type, factor: 2 } });
      expect(e.message).toMatch(/phi\/config\.json/);
      expect(e.message).toContain('rope_scaling.type');
      expect(e.message).toContain(type);
      expect(e.message).toMatch(/longrope/);
    }
    const short = refusal({
      ...config,
      rope_scaling: { ...rs, short_factor: (rs.short_factor as number[]).slice(1) },
    });
    expect(short.message).toContain('rope_scaling.short_factor');
    expect(short.message).toMatch(/12 positive numbers/);
    const long = refusal({
      ...config,
      rope_scaling: { ...rs, long_factor: [...(rs.long_factor as number[]), 2] },
    });
    expect(long.message).toContain('rope_scaling.long_factor');
    const zero = refusal({
      ...config,
      rope_scaling: { ...rs, short_factor: (rs.short_factor as number[]).map(() => 0) },
    });
    expect(zero.message).toContain('rope_scaling.short_factor');
    const odd = refusal({ ...config, partial_rotary_factor: 0.72 }); // 23.04: a width of 23
    expect(odd.message).toContain('partial_rotary_factor');
    expect(refusal({ ...config, attention_bias: true }).message).toContain('attention_bias');
    expect(refusal({ ...config, hidden_act: 'gelu' }).message).toContain('hidden_act');
  });

  it('past the original context the engine runs the long factors (as llama.cpp), up to max_position_embeddings', async () => {
    const { stored, weft, want } = await setup();
    const model = () => memoryModelFiles('phi3', fixture.files);
    // 80 tokens: past the original 64, where Transformers too runs the long factors.
    const long = Array.from({ length: 80 }, (_, i) => (i * 211 + 13) % V);
    const at = async (context: number, tokens: readonly number[]) => {
      const engine = await createEngine({
        model: model(),
        device: 'cpu',
        quant: 'f32',
        contextLength: context,
      });
      expect(engine.contextLength).toBe(context);
      const ids: number[] = [];
      for await (const c of engine.generate(tokens, { maxTokens: 4 })) ids.push(...c.ids);
      await engine.unload();
      return ids;
    };
    // The reference with the spec a context of 128 runs: the long factors in place of the short.
    const spec128 = ropeForContext(weft.spec, 128);
    const scaling = spec128.rope.scaling;
    if (scaling?.type !== 'longrope') throw new Error('expected LongRoPE');
    expect(scaling.factors).toEqual(hf.longrope!.long.map(Math.fround));
    expect(ropeForContext(weft.spec, 64)).toBe(weft.spec);
    const runner = new ReferenceRunner(spec128, weft.weights, { capacity: 128 });
    expectAgree(runner.logitsFor(long), flat(naiveLogits(hf, stored, layers, long)), 'an 80-token sequence');
    // Within the original context an engine of 128 still runs the long factors (llama.cpp's choice,
    // made once per context; Transformers would run the short ones for this shorter sequence).
    // (Its worst rows carry the random model's amplified rounding, up to ~3e-5 of the largest
    // logit, so this check compares distances: within 1/10 of the way to the short factors'.)
    runner.trim(0);
    const got = runner.logitsFor(prompt);
    const forcedLong = { ...hf, longrope: { ...hf.longrope!, short: hf.longrope!.long } };
    const longRows = naiveLogits(forcedLong, stored, layers, prompt);
    const toLong = compare(got, flat(longRows)).maxDiff;
    expect(toLong).toBeLessThan(compare(got, flat(want)).maxDiff / 10);
    for (const [r, row] of longRows.entries())
      expect(argmax(Array.from(got.subarray(r * V, (r + 1) * V)))).toBe(argmax(row));
    // createEngine settles the same: greedy ids of an engine of 128 are the long-factor runner's.
    runner.trim(0);
    const picks = await runner.forward({ tokens: long }, GREEDY, 'last');
    expect((await at(128, long))[0]).toBe(picks[0]);
    // And the short factors within the original context, as before.
    const short = new ReferenceRunner(weft.spec, weft.weights, { capacity: 64 });
    expect((await at(64, prompt))[0]).toBe((await short.forward({ tokens: prompt }, GREEDY, 'last'))[0]);
    await expect(createEngine({ model: model(), device: 'cpu', contextLength: 257 })).rejects.toThrow(
      /contextLength 257 exceeds the model's context of 256 tokens \(max_position_embeddings\)/,
    );
  });
});
