import { describe, expect, it } from 'vitest';
import { queryTemperatureAt } from '../../../src/kernels/rope/rope.js';
import { ropeInverseFrequencies } from '../../../src/model/blocks/ops.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { type ModelSpec, yarnAttentionFactor } from '../../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors, type Tensor } from '../../../src/model/weights.js';
import { randomWeights, tinySpecs } from '../../fixtures/reference.js';

// A second, deliberately different implementation of the same forward pass, used only as a test
// oracle for src/model/reference/reference.ts: whole-sequence (no KV cache), f64 throughout, matrices as
// number[][], RoPE as an explicit rotation matrix per position, attention with a dense causal mask
// of -Infinity and KV heads repeated as in Hugging Face's repeat_kv, Llama 3 frequency scaling in
// the vectorised `torch.where` form of `_compute_llama3_parameters`, YaRN from the paper's
// turns-per-context definition and Ministral 3's query temperature. It reads weights by name from
// the source, not through readWeights.

type Matrix = number[][];

function matrix(source: NamedTensors, name: string): Matrix {
  const t = source.get(name);
  const [rows, cols] = t.shape.length === 2 ? [t.shape[0]!, t.shape[1]!] : [1, t.shape[0]!];
  return Array.from({ length: rows }, (_, r) => Array.from(t.data.subarray(r * cols, (r + 1) * cols)));
}

function vector(source: NamedTensors, name: string): number[] {
  return Array.from(source.get(name).data);
}

/** x W^T for x [T, in] and W [out, in]. */
function matmulT(x: Matrix, w: Matrix): Matrix {
  return x.map((row) => w.map((wr) => wr.reduce((acc, wv, i) => acc + wv * row[i]!, 0)));
}

function rmsnorm(x: number[], w: number[], eps: number): number[] {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
  return x.map((v, i) => (v / Math.sqrt(ms + eps)) * w[i]!);
}

function invFreqs(spec: ModelSpec): number[] {
  const d = spec.headDim;
  const base = Array.from({ length: d / 2 }, (_, i) => 1 / spec.rope.theta ** ((2 * i) / d));
  const s = spec.rope.scaling;
  if (!s) return base;
  if (s.type === 'linear') return base.map((f) => f / s.factor);
  if (s.type === 'longrope') throw new Error('oracle: LongRoPE is modelled in phi3-naive.test.ts');
  if (s.type === 'proportional') throw new Error('oracle: proportional RoPE is modelled in naive-gemma4.ts');
  if (s.type === 'yarn') {
    // YaRN from the paper's definition: a pair whose wavelength fits more than betaFast turns in the
    // original context keeps its frequency, one fitting fewer than betaSlow turns is interpolated
    // (÷ factor), and the pairs between blend linearly in the pair index. Pair i fits
    // original · f_i / 2π turns; the boundary index is where that equals beta.
    const boundary = (beta: number) =>
      (d / 2) * (Math.log(s.originalMaxPositions / (2 * Math.PI * beta)) / Math.log(spec.rope.theta));
    const lo = Math.max(s.truncate ? Math.floor(boundary(s.betaFast)) : boundary(s.betaFast), 0);
    let hi = Math.min(s.truncate ? Math.ceil(boundary(s.betaSlow)) : boundary(s.betaSlow), d - 1);
    if (hi === lo) hi += 0.001;
    return base.map((f, i) => {
      const toInterpolated = Math.min(1, Math.max(0, (i - lo) / (hi - lo)));
      return (1 - toInterpolated) * f + toInterpolated * (f / s.factor);
    });
  }
  const lowWl = s.originalMaxPositions / s.lowFreqFactor;
  const highWl = s.originalMaxPositions / s.highFreqFactor;
  return base.map((f) => {
    const wl = (2 * Math.PI) / f;
    const llama = wl > lowWl ? f / s.factor : f;
    const smooth = (s.originalMaxPositions / wl - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    const smoothed = ((1 - smooth) * llama) / s.factor + smooth * llama;
    const medium = !(wl < highWl) && !(wl > lowWl);
    return medium ? smoothed : llama;
  });
}

/** YaRN's magnitude correction of cos and sin (1 for every other RoPE). */
function attentionFactorOf(spec: ModelSpec): number {
  const s = spec.rope.scaling;
  return s?.type === 'yarn' ? s.attentionFactor : 1;
}

/** Ministral 3's query multiplier at `pos` (Llama 4's temperature), 1 without one. */
function queryTemperature(spec: ModelSpec, pos: number): number {
  const t = spec.queryTemperature;
  return t ? 1 + t.beta * Math.log(1 + Math.floor(pos / t.floorScale)) : 1;
}

/** The d×d rotation RoPE applies at `pos`, for the spec's pairing of dimensions. */
function rotation(spec: ModelSpec, freqs: number[], pos: number): Matrix {
  const d = spec.headDim;
  const r: Matrix = Array.from({ length: d }, () => new Array<number>(d).fill(0));
  freqs.forEach((f, i) => {
    const [a, b] = spec.rope.layout === 'half' ? [i, i + d / 2] : [2 * i, 2 * i + 1];
    const c = Math.cos(pos * f) * attentionFactorOf(spec);
    const s = Math.sin(pos * f) * attentionFactorOf(spec);
    r[a]![a] = c;
    r[a]![b] = -s;
    r[b]![a] = s;
    r[b]![b] = c;
  });
  return r;
}

/** Splits rows [T, n * d] into heads: [n][T][d]. */
function splitHeads(x: Matrix, n: number, d: number): Matrix[] {
  return Array.from({ length: n }, (_, h) => x.map((row) => row.slice(h * d, (h + 1) * d)));
}

/** Logits [T][V] of `tokens` at positions 0..T-1, from scratch. */
function naiveForward(spec: ModelSpec, source: NamedTensors, tokens: readonly number[]): Matrix {
  const T = tokens.length;
  const D = spec.headDim;
  const freqs = invFreqs(spec);
  const rotations = tokens.map((_, pos) => rotation(spec, freqs, pos));
  const embed = matrix(source, 'model.embed_tokens.weight');
  let x: Matrix = tokens.map((t) => [...embed[t]!]);
  for (let l = 0; l < spec.layers; l++) {
    const p = `model.layers.${l}`;
    const h = x.map((row) => rmsnorm(row, vector(source, `${p}.input_layernorm.weight`), spec.rmsEps));
    const proj = (name: string): Matrix => {
      const y = matmulT(h, matrix(source, `${p}.self_attn.${name}_proj.weight`));
      if (!spec.qkvBias) return y;
      const b = vector(source, `${p}.self_attn.${name}_proj.bias`);
      return y.map((row) => row.map((v, i) => v + b[i]!));
    };
    let qh = splitHeads(proj('q'), spec.heads, D);
    let kh = splitHeads(proj('k'), spec.kvHeads, D);
    const vh = splitHeads(proj('v'), spec.kvHeads, D);
    if (spec.qkNorm) {
      const qn = vector(source, `${p}.self_attn.q_norm.weight`);
      const kn = vector(source, `${p}.self_attn.k_norm.weight`);
      qh = qh.map((head) => head.map((row) => rmsnorm(row, qn, spec.rmsEps)));
      kh = kh.map((head) => head.map((row) => rmsnorm(row, kn, spec.rmsEps)));
    }
    const rotate = (head: Matrix): Matrix => head.map((row, t) => matmulT([row], rotations[t]!)[0]!);
    qh = qh.map(rotate).map((head) => head.map((row, t) => row.map((v) => v * queryTemperature(spec, t))));
    kh = kh.map(rotate);
    // repeat_kv: query head h uses KV head floor(h / (heads / kvHeads)).
    const rep = spec.heads / spec.kvHeads;
    const heads = qh.map((q, hIdx) => {
      const k = kh[Math.floor(hIdx / rep)]!;
      const v = vh[Math.floor(hIdx / rep)]!;
      const scores = matmulT(q, k).map((row, i) =>
        row.map((s, j) => (j <= i ? s / Math.sqrt(D) : Number.NEGATIVE_INFINITY)),
      );
      const probs = scores.map((row) => {
        const m = Math.max(...row);
        const e = row.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        return e.map((v2) => v2 / z);
      });
      return probs.map((row) =>
        Array.from({ length: D }, (_, d) => row.reduce((a, pj, j) => a + pj * v[j]![d]!, 0)),
      );
    });
    const attn: Matrix = Array.from({ length: T }, (_, t) => heads.flatMap((head) => head[t]!));
    const o = matmulT(attn, matrix(source, `${p}.self_attn.o_proj.weight`));
    x = x.map((row, t) => row.map((v, i) => v + o[t]![i]!));
    const h2 = x.map((row) =>
      rmsnorm(row, vector(source, `${p}.post_attention_layernorm.weight`), spec.rmsEps),
    );
    const g = matmulT(h2, matrix(source, `${p}.mlp.gate_proj.weight`));
    const u = matmulT(h2, matrix(source, `${p}.mlp.up_proj.weight`));
    const act = g.map((row, t) => row.map((v, i) => (v / (1 + Math.exp(-v))) * u[t]![i]!));
    const down = matmulT(act, matrix(source, `${p}.mlp.down_proj.weight`));
    x = x.map((row, t) => row.map((v, i) => v + down[t]![i]!));
  }
  const final = x.map((row) => rmsnorm(row, vector(source, 'model.norm.weight'), spec.rmsEps));
  const head = matrix(source, spec.tiedEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  return matmulT(final, head);
}

/** Asserts |got - want| <= tol * (1 + |want|) elementwise: a tolerance that grows with magnitude. */
function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol: number): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++)
    worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
  expect(worst).toBeLessThanOrEqual(tol);
}

const micro: ModelSpec = {
  family: 'llama',
  vocabSize: 3,
  hidden: 4,
  intermediate: 4,
  layers: 1,
  heads: 1,
  kvHeads: 1,
  headDim: 4,
  rmsEps: 1e-6,
  rope: { theta: 10000, layout: 'half' },
  maxPositions: 16,
  tiedEmbeddings: false,
  qkvBias: false,
  qkNorm: false,
  bosId: undefined,
  eosIds: [],
};

/** Row-major f32 tensor from nested rows. */
function tensor(rows: number[][]): Tensor {
  return { shape: [rows.length, rows[0]!.length], data: Float32Array.from(rows.flat()) };
}

const eye4 = [
  [1, 0, 0, 0],
  [0, 1, 0, 0],
  [0, 0, 1, 0],
  [0, 0, 0, 1],
];
const zero4 = eye4.map((r) => r.map(() => 0));

describe('reference forward: a micro case worked out by hand', () => {
  it('hidden 4, 1 layer, 1 head, one token: identity attention and MLP give the hand numbers', () => {
    // Token 0 embeds to e = [1, -1, 1, -1]: rms(e) = 1, so rmsnorm(e) = e (eps 1e-6 aside).
    // q = k = 0; with a single visible key the softmax is [1], so attention returns v = e.
    // x = e + o(e) = 2e = [2, -2, 2, -2]; rmsnorm(x) = e again.
    // MLP with gate = up = down = I: silu(1) * 1 = 1 / (1 + e^-1), silu(-1) * -1 = 1 / (1 + e).
    // x = [2 + s1, -2 + s2, 2 + s1, -2 + s2] with s1 = 0.7310585786, s2 = 0.2689414214,
    //   = [2.7310585786, -1.7310585786, ...]; mean(x^2) = (2.7310585786^2 + 1.7310585786^2) / 2
    //   = 5.2276179; 1 / sqrt(5.2276179) = 0.43736784; final norm = [1.19448, -0.757111, ...].
    // LM head rows pick dims 0, 1 and minus dim 3: logits [1.19448, -0.757111, 0.757111].
    const weights = mapWeights({
      'model.embed_tokens.weight': tensor([
        [1, -1, 1, -1],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
      ]),
      'model.layers.0.input_layernorm.weight': { shape: [4], data: new Float32Array([1, 1, 1, 1]) },
      'model.layers.0.self_attn.q_proj.weight': tensor(zero4),
      'model.layers.0.self_attn.k_proj.weight': tensor(zero4),
      'model.layers.0.self_attn.v_proj.weight': tensor(eye4),
      'model.layers.0.self_attn.o_proj.weight': tensor(eye4),
      'model.layers.0.post_attention_layernorm.weight': { shape: [4], data: new Float32Array([1, 1, 1, 1]) },
      'model.layers.0.mlp.gate_proj.weight': tensor(eye4),
      'model.layers.0.mlp.up_proj.weight': tensor(eye4),
      'model.layers.0.mlp.down_proj.weight': tensor(eye4),
      'model.norm.weight': { shape: [4], data: new Float32Array([1, 1, 1, 1]) },
      'lm_head.weight': tensor([
        [1, 0, 0, 0],
        [0, 1, 0, 0],
        [0, 0, 0, -1],
      ]),
    });
    const logits = new ReferenceRunner(micro, weights).logitsFor([0]);
    expectClose(logits, [1.1944799646, -0.7571111092, 0.7571111092], 2e-6);
  });

  it('llama 3 RoPE scaling: the three frequency bands by hand', () => {
    // theta 500, headDim 8: f_i = 500^(-i/4) = 1, 0.2114743, 0.0447214, 0.0094574 with wavelengths
    // 2*pi/f = 6.28, 29.7, 140.5, 664.4. Bands for original 64, low 1, high 4: below 16 kept, above
    // 64 divided by 8, between: smooth = (64 / 29.7 - 1) / 3 = 0.3846863, so
    // f_1 = 0.2114743 * ((1 - 0.3846863) / 8 + 0.3846863) = 0.0976166.
    const inv = ropeInverseFrequencies(tinySpecs.llama.rope, 8);
    expectClose(inv, [1, 0.0976166327, 0.0447213595 / 8, 0.0094574161 / 8], 1e-7);
    // Without scaling: plain 1 / theta^(2i/d).
    expectClose(ropeInverseFrequencies({ theta: 10000, layout: 'half' }, 4), [1, 0.01], 1e-9);
  });

  it('hidden 4, 1 layer, 1 head, random weights, 6 tokens: matches the matrix implementation', () => {
    const source = randomWeights(micro, 5);
    const tokens = [2, 0, 1, 1, 2, 0];
    const want = naiveForward(micro, source, tokens).flat();
    expectClose(new ReferenceRunner(micro, source).logitsFor(tokens), want, 2e-5);
  });
});

describe('YaRN and the query temperature (Ministral 3)', () => {
  const yarn = {
    type: 'yarn',
    factor: 4,
    originalMaxPositions: 16,
    betaFast: 8,
    betaSlow: 0.25,
    truncate: true,
    mscale: 1,
    mscaleAllDim: 0.5,
    attentionFactor: yarnAttentionFactor(4, 1, 0.5),
  } as const;
  const ministral: ModelSpec = {
    ...tinySpecs.llama,
    family: 'ministral3',
    rope: { theta: 500, layout: 'half', scaling: yarn },
    queryTemperature: { beta: 0.3, floorScale: 3 },
  };

  it('YaRN by hand: the kept, blended and interpolated pairs, and the attention factor', () => {
    // theta 500, headDim 8: f_i = 1, 0.2114743, 0.0447214, 0.0094574. Correction dims within
    // original 16: beta 8 → 8 · ln(16 / 16π) / (2 ln 500) = -0.737 → floor, clamp → 0; beta 0.25 →
    // 8 · ln(16 / 0.5π) / (2 ln 500) = 1.494 → ceil → 2. Ramp i / 2 = 0, 0.5, 1, 1: pair 1 is
    // f_1 · (0.5 / 4 + 0.5) = 0.1321714, pairs 2 and 3 are f / 4.
    const inv = ropeInverseFrequencies(ministral.rope, 8);
    expectClose(inv, [1, 0.1321714375, 0.0447213595 / 4, 0.0094574161 / 4], 1e-7);
    // mscale(4, 1) / mscale(4, 0.5) = (1 + 0.1 ln 4) / (1 + 0.05 ln 4) = 1.1386294 / 1.0693147.
    expect(yarn.attentionFactor).toBeCloseTo(1.0648215, 6);
    // Ministral 3's own: mscale = mscale_all_dim = 1 → 1; neither stated → 1 + 0.1 ln 16.
    expect(yarnAttentionFactor(16, 1, 1)).toBe(1);
    expect(yarnAttentionFactor(16)).toBeCloseTo(1.2772589, 6);
  });

  it('the query temperature: 1 below the floor scale, 1 + beta · ln(1 + floor(p / scale)) past it', () => {
    const t = { beta: 0.1, floorScale: 16384 };
    expect(queryTemperatureAt(t, 0)).toBe(1);
    expect(queryTemperatureAt(t, 16383)).toBe(1);
    expect(queryTemperatureAt(t, 16384)).toBe(Math.fround(1 + 0.1 * Math.log(2)));
    expect(queryTemperatureAt(t, 3 * 16384 + 5)).toBe(
      Math.fround(1 + Math.fround(0.1 * Math.fround(Math.log(4)))),
    );
  });

  it('a Ministral 3 spec (YaRN, attention factor, temperature past positions 3 and 6) agrees with the matrix implementation', () => {
    const source = randomWeights(ministral, 23);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5];
    const want = naiveForward(ministral, source, tokens).flat();
    expectClose(new ReferenceRunner(ministral, source).logitsFor(tokens), want, 2e-5);
  });
});

describe('reference forward vs the independent matrix implementation', () => {
  for (const [name, spec] of Object.entries(tinySpecs)) {
    it(`${name}: logits of a 9-token sequence agree`, () => {
      const source = randomWeights(spec, 21);
      const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5];
      const want = naiveForward(spec, source, tokens).flat();
      expectClose(new ReferenceRunner(spec, source).logitsFor(tokens), want, 2e-5);
    });
    it(`${name}: interleaved layout (as stored interleaved) on the matrix side agrees too`, () => {
      const ispec: ModelSpec = { ...spec, rope: { ...spec.rope, layout: 'interleaved' } };
      const source = randomWeights(ispec, 22);
      const tokens = [7, 0, 2, 8, 1];
      const want = naiveForward(ispec, source, tokens).flat();
      expectClose(new ReferenceRunner(ispec, source).logitsFor(tokens), want, 2e-5);
    });
  }
});
