import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { HeadRunner } from '../../src/model/draft/head.js';
import { openMtpHead } from '../../src/model/draft/mtp.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, type NamedTensors, readAllF32, type Tensor } from '../../src/model/weights.js';
import { randomWeights, seededRandom, tinyHybridSpec } from '../fixtures/reference.js';
import { qwen35FixtureFiles } from '../fixtures/write.js';

// An independent oracle for the Qwen3.5 reference forward (src/model/reference/reference.ts with the Gated
// DeltaNet block of src/model/blocks/deltanet/reference.ts and the gated attention of blocks/attention.ts),
// written from Hugging Face's `Qwen3_5TextModel` and not from weft's code: whole sequence at once,
// f64 throughout, matrices as number[][], weights read by name from the source. The linear layers
// run the *chunked* gated delta rule (the form of transformers' `torch_chunk_gated_delta_rule`:
// per chunk a cumulative log-decay, a pairwise decay mask, a unit lower-triangular (UT / WY) solve
// for the intra-chunk corrections, and the state carried between chunks), while weft steps the
// recurrence token by token, so the two sides share no algorithm for the delta rule either. The
// chunked form is itself checked against the plain recurrence, in f64, below.

type Matrix = number[][];

function matrix(source: NamedTensors, name: string): Matrix {
  const t = source.get(name);
  const cols = t.shape[t.shape.length - 1]!;
  const rows = t.data.length / cols;
  return Array.from({ length: rows }, (_, r) => Array.from(t.data.subarray(r * cols, (r + 1) * cols)));
}

function vector(source: NamedTensors, name: string): number[] {
  return Array.from(source.get(name).data);
}

/** x W^T for x [T, in] and W [out, in]. */
function matmulT(x: Matrix, w: Matrix): Matrix {
  return x.map((row) => w.map((wr) => wr.reduce((acc, wv, i) => acc + wv * row[i]!, 0)));
}

function dot(a: readonly number[], b: readonly number[]): number {
  return a.reduce((acc, v, i) => acc + v * b[i]!, 0);
}

const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));
const silu = (v: number): number => v * sigmoid(v);
const softplus = (v: number): number => (v > 20 ? v : Math.log1p(Math.exp(v)));

/** RMSNorm with the weight applied as stored (`w`), or zero-centred as (1 + w). */
function rmsnorm(x: readonly number[], w: readonly number[], eps: number, zeroCentred: boolean): number[] {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
  const r = 1 / Math.sqrt(ms + eps);
  return x.map((v, i) => v * r * (zeroCentred ? 1 + w[i]! : w[i]!));
}

/** Splits rows [T, n * d] into heads: [n][T][d]. */
function splitHeads(x: Matrix, n: number, d: number): Matrix[] {
  return Array.from({ length: n }, (_, h) => x.map((row) => row.slice(h * d, (h + 1) * d)));
}

/** Qwen3_5Attention: q_proj yields per head [query | gate]; q/k-norm; partial rotary; output gate. */
function gatedAttention(spec: ModelSpec, source: NamedTensors, layer: number, h: Matrix): Matrix {
  const T = h.length;
  const D = spec.headDim;
  const eps = spec.rmsEps;
  const p = `model.layers.${layer}.self_attn`;
  // view(T, heads, 2D) then chunk(2, -1): head n's query is [2nD, 2nD + D), its gate the next D.
  const qg = matmulT(h, matrix(source, `${p}.q_proj.weight`));
  const qRows = qg.map((row) =>
    Array.from({ length: spec.heads }, (_, n) => row.slice(2 * n * D, 2 * n * D + D)),
  );
  const gateRows = qg.map((row) =>
    Array.from({ length: spec.heads }, (_, n) => row.slice(2 * n * D + D, 2 * (n + 1) * D)),
  );
  const qn = vector(source, `${p}.q_norm.weight`);
  const kn = vector(source, `${p}.k_norm.weight`);
  const qh: Matrix[] = Array.from({ length: spec.heads }, (_, n) =>
    qRows.map((heads) => rmsnorm(heads[n]!, qn, eps, true)),
  );
  const kh = splitHeads(matmulT(h, matrix(source, `${p}.k_proj.weight`)), spec.kvHeads, D).map((head) =>
    head.map((row) => rmsnorm(row, kn, eps, true)),
  );
  const vh = splitHeads(matmulT(h, matrix(source, `${p}.v_proj.weight`)), spec.kvHeads, D);
  // Partial rotary (HF apply_rotary_pos_emb with cos/sin of width R): rotate_half within [0, R).
  const R = spec.rope.rotaryDim ?? D;
  const inv = Array.from({ length: R / 2 }, (_, i) => 1 / spec.rope.theta ** ((2 * i) / R));
  const rope = (row: number[], pos: number): number[] => {
    const out = [...row];
    for (let i = 0; i < R / 2; i++) {
      const c = Math.cos(pos * inv[i]!);
      const s = Math.sin(pos * inv[i]!);
      out[i] = row[i]! * c - row[i + R / 2]! * s;
      out[i + R / 2] = row[i + R / 2]! * c + row[i]! * s;
    }
    return out;
  };
  const qr = qh.map((head) => head.map(rope));
  const kr = kh.map((head) => head.map(rope));
  const rep = spec.heads / spec.kvHeads;
  const heads = qr.map((q, n) => {
    const k = kr[Math.floor(n / rep)]!;
    const v = vh[Math.floor(n / rep)]!;
    return q.map((qi, i) => {
      const scores = k.map((kj, j) => (j <= i ? dot(qi, kj) / Math.sqrt(D) : Number.NEGATIVE_INFINITY));
      const m = Math.max(...scores);
      const e = scores.map((s) => Math.exp(s - m));
      const z = e.reduce((a, b) => a + b, 0);
      return Array.from({ length: D }, (_, d) => e.reduce((a, pj, j) => a + (pj / z) * v[j]![d]!, 0));
    });
  });
  const gated: Matrix = Array.from({ length: T }, (_, t) =>
    heads.flatMap((head, n) => head[t]!.map((v, d) => v * sigmoid(gateRows[t]![n]![d]!))),
  );
  return matmulT(gated, matrix(source, `${p}.o_proj.weight`));
}

/** One value head's inputs to the delta rule, over the sequence. */
interface DeltaInputs {
  /** [T][dk], L2-normalised and scaled by 1/sqrt(dk). */
  readonly q: Matrix;
  /** [T][dk], L2-normalised. */
  readonly k: Matrix;
  /** [T][dv]. */
  readonly v: Matrix;
  /** [T] write strengths in (0, 1). */
  readonly beta: number[];
  /** [T] log decays, <= 0. */
  readonly g: number[];
}

/**
 * The gated delta rule as the plain recurrence: S_t = e^{g_t} S_{t-1} + k_t ⊗ β_t (v_t − (e^{g_t}
 * S_{t-1})ᵀ k_t), o_t = S_tᵀ q_t, with S [dk][dv] starting at zero. Returns o [T][dv].
 */
function recurrentDelta({ q, k, v, beta, g }: DeltaInputs): Matrix {
  const dk = k[0]!.length;
  const dv = v[0]!.length;
  let S: Matrix = Array.from({ length: dk }, () => new Array<number>(dv).fill(0));
  return q.map((qt, t) => {
    const decay = Math.exp(g[t]!);
    S = S.map((row) => row.map((s) => s * decay));
    const kt = k[t]!;
    const recalled = Array.from({ length: dv }, (_, j) => S.reduce((a, row, i) => a + row[j]! * kt[i]!, 0));
    const delta = v[t]!.map((vj, j) => beta[t]! * (vj - recalled[j]!));
    S = S.map((row, i) => row.map((s, j) => s + kt[i]! * delta[j]!));
    return Array.from({ length: dv }, (_, j) => S.reduce((a, row, i) => a + row[j]! * qt[i]!, 0));
  });
}

/**
 * The gated delta rule in chunks of `C` tokens (transformers' `torch_chunk_gated_delta_rule`), the
 * sequence zero-padded to a multiple of C (β = 0, g = 0 on the padding). Within a chunk, with
 * Γ_i = Σ_{s<=i} g_s (cumulative log decay from the chunk start) and state S entering the chunk:
 *   (I + L) U = diag(β) V,  (I + L) W = diag(β e^Γ) K,  L_ij = β_i e^{Γ_i−Γ_j} k_i·k_j for j < i
 *   V' = U − W S                                    (the corrections actually written)
 *   O  = diag(e^Γ) Q S + (Q Kᵀ ∘ M) V'             (M_ij = e^{Γ_i−Γ_j} for j <= i, else 0)
 *   S ← e^{Γ_last} S + Σ_i e^{Γ_last−Γ_i} k_i ⊗ V'_i
 * The triangular systems are solved by forward substitution.
 */
function chunkedDelta({ q, k, v, beta, g }: DeltaInputs, C: number): Matrix {
  const T = q.length;
  const dk = k[0]!.length;
  const dv = v[0]!.length;
  const padded = Math.ceil(T / C) * C;
  const pad = <X>(xs: X[], zero: () => X): X[] => [...xs, ...Array.from({ length: padded - T }, zero)];
  const Q = pad(q, () => new Array<number>(dk).fill(0));
  const K = pad(k, () => new Array<number>(dk).fill(0));
  const V = pad(v, () => new Array<number>(dv).fill(0));
  const B = pad(beta, () => 0);
  const G = pad(g, () => 0);
  let S: Matrix = Array.from({ length: dk }, () => new Array<number>(dv).fill(0));
  const out: Matrix = [];
  for (let c0 = 0; c0 < padded; c0 += C) {
    const idx = Array.from({ length: C }, (_, i) => c0 + i);
    const gamma: number[] = [];
    for (const [i, t] of idx.entries()) gamma.push((i > 0 ? gamma[i - 1]! : 0) + G[t]!);
    const decayMask = (i: number, j: number): number => (j <= i ? Math.exp(gamma[i]! - gamma[j]!) : 0);
    const L = (i: number, j: number): number => B[idx[i]!]! * decayMask(i, j) * dot(K[idx[i]!]!, K[idx[j]!]!);
    // Forward substitution for (I + strictly_lower(L)) X = RHS, row by row.
    const solve = (rhs: Matrix): Matrix => {
      const x: Matrix = [];
      rhs.forEach((r, i) => {
        const row = [...r];
        for (let j = 0; j < i; j++) {
          const lij = L(i, j);
          for (let d = 0; d < row.length; d++) row[d]! -= lij * x[j]![d]!;
        }
        x.push(row);
      });
      return x;
    };
    const U = solve(idx.map((t) => V[t]!.map((x) => B[t]! * x)));
    const W = solve(idx.map((t, i) => K[t]!.map((x) => B[t]! * Math.exp(gamma[i]!) * x)));
    const times = (rows: Matrix, m: Matrix): Matrix =>
      rows.map((r) =>
        Array.from({ length: m[0]!.length }, (_, j) => r.reduce((a, x, i) => a + x * m[i]![j]!, 0)),
      );
    const WS = times(W, S);
    const Vnew = U.map((row, i) => row.map((x, d) => x - WS[i]![d]!));
    const inter = times(
      idx.map((t, i) => Q[t]!.map((x) => x * Math.exp(gamma[i]!))),
      S,
    );
    idx.forEach((t, i) => {
      const o = inter[i]!.map((x, d) => {
        let acc = x;
        for (let j = 0; j <= i; j++) acc += dot(Q[t]!, K[idx[j]!]!) * decayMask(i, j) * Vnew[j]![d]!;
        return acc;
      });
      out.push(o);
    });
    const last = gamma[C - 1]!;
    S = S.map((row, a) =>
      row.map(
        (s, d) =>
          Math.exp(last) * s +
          idx.reduce((acc, t, i) => acc + Math.exp(last - gamma[i]!) * K[t]![a]! * Vnew[i]![d]!, 0),
      ),
    );
  }
  return out.slice(0, T);
}

/** How a linear layer runs its delta rule: chunks of that many tokens, or the plain recurrence. */
type DeltaForm = number | 'recurrent';

/** Qwen3_5GatedDeltaNet on the normed input h [T][H]; returns its out_proj output [T][H]. */
function gatedDeltaNet(
  spec: ModelSpec,
  source: NamedTensors,
  layer: number,
  h: Matrix,
  form: DeltaForm,
): Matrix {
  const la = spec.deltaNet!;
  const { keyHeads: Hk, valueHeads: Hv, keyDim: dk, valueDim: dv, convKernel: Kc } = la;
  const keyWidth = Hk * dk;
  const p = `model.layers.${layer}.linear_attn`;
  const mixed = matmulT(h, matrix(source, `${p}.in_proj_qkv.weight`));
  const z = matmulT(h, matrix(source, `${p}.in_proj_z.weight`));
  const b = matmulT(h, matrix(source, `${p}.in_proj_b.weight`));
  const a = matmulT(h, matrix(source, `${p}.in_proj_a.weight`));
  const conv = matrix(source, `${p}.conv1d.weight`); // [C][K] (the middle 1 folded away)
  const u: Matrix = mixed.map((row, t) =>
    row.map((_, c) => {
      let acc = 0;
      for (let j = 0; j < Kc; j++) {
        const s = t - (Kc - 1) + j;
        if (s >= 0) acc += conv[c]![j]! * mixed[s]![c]!;
      }
      return silu(acc);
    }),
  );
  const l2 = (x: number[]): number[] => {
    const r = 1 / Math.sqrt(x.reduce((acc, v) => acc + v * v, 0) + 1e-6);
    return x.map((v) => v * r);
  };
  const qHeads = splitHeads(
    u.map((row) => row.slice(0, keyWidth)),
    Hk,
    dk,
  ).map((head) => head.map((row) => l2(row).map((v) => v / Math.sqrt(dk))));
  const kHeads = splitHeads(
    u.map((row) => row.slice(keyWidth, 2 * keyWidth)),
    Hk,
    dk,
  ).map((head) => head.map(l2));
  const vHeads = splitHeads(
    u.map((row) => row.slice(2 * keyWidth)),
    Hv,
    dv,
  );
  const Alog = vector(source, `${p}.A_log`);
  const dtBias = vector(source, `${p}.dt_bias`);
  const normW = vector(source, `${p}.norm.weight`);
  // repeat_interleave over key heads: value head n reads key head floor(n / (Hv / Hk)).
  const rep = Hv / Hk;
  const outHeads = Array.from({ length: Hv }, (_, n) => {
    const inputs: DeltaInputs = {
      q: qHeads[Math.floor(n / rep)]!,
      k: kHeads[Math.floor(n / rep)]!,
      v: vHeads[n]!,
      beta: b.map((row) => sigmoid(row[n]!)),
      g: a.map((row) => -Math.exp(Alog[n]!) * softplus(row[n]! + dtBias[n]!)),
    };
    const o = form === 'recurrent' ? recurrentDelta(inputs) : chunkedDelta(inputs, form);
    // Qwen3_5RMSNormGated: weight · rmsnorm(o) · silu(z_head), the weight as stored.
    return o.map((row, t) =>
      rmsnorm(row, normW, spec.rmsEps, false).map((y, d) => y * silu(z[t]![n * dv + d]!)),
    );
  });
  const y: Matrix = h.map((_, t) => outHeads.flatMap((head) => head[t]!));
  return matmulT(y, matrix(source, `${p}.out_proj.weight`));
}

/**
 * Logits [T][V] of `tokens` from scratch, the Qwen3.5 text model (tied embeddings). `trace`, when
 * given, receives the residual stream [T][H] after each layer (after its MLP's add).
 */
function naiveQwen35(
  spec: ModelSpec,
  source: NamedTensors,
  tokens: readonly number[],
  form: DeltaForm,
  trace?: Matrix[],
): Matrix {
  const eps = spec.rmsEps;
  const embed = matrix(source, 'model.embed_tokens.weight');
  let x: Matrix = tokens.map((t) => [...embed[t]!]);
  const add = (y: Matrix): void => {
    x = x.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  for (let l = 0; l < spec.layers; l++) {
    const p = `model.layers.${l}`;
    const h = x.map((row) => rmsnorm(row, vector(source, `${p}.input_layernorm.weight`), eps, true));
    add(
      spec.layerKinds![l] === 'deltanet'
        ? gatedDeltaNet(spec, source, l, h, form)
        : gatedAttention(spec, source, l, h),
    );
    // post_attention_layernorm is a Qwen3_5RMSNorm like input_layernorm: zero-centred, (1 + w).
    const h2 = x.map((row) =>
      rmsnorm(row, vector(source, `${p}.post_attention_layernorm.weight`), eps, true),
    );
    const gate = matmulT(h2, matrix(source, `${p}.mlp.gate_proj.weight`));
    const up = matmulT(h2, matrix(source, `${p}.mlp.up_proj.weight`));
    const act = gate.map((row, t) => row.map((v, i) => silu(v) * up[t]![i]!));
    add(matmulT(act, matrix(source, `${p}.mlp.down_proj.weight`)));
    trace?.push(x.map((row) => [...row]));
  }
  const final = x.map((row) => rmsnorm(row, vector(source, 'model.norm.weight'), eps, true));
  return matmulT(final, embed);
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

// The reference computes in f32 (f32 weights, every intermediate rounded to f32), so each logit
// carries relative rounding errors of a few f32 ulps (2^-24 ≈ 6e-8) per operation, over three
// layers of dot products of width <= 40, norms, a softmax and up to eleven delta-rule steps, each
// amplified by at most O(1) through the normalised layers: a few 1e-7 of the logits' scale (the
// largest |logit|, ~30 here) is what f32 gives (3e-7 measured once the two sides agree), 1e-6 would
// already be unusual. 2e-5 · max|logit| leaves a wide margin over that and is still four orders
// below what a wrong decay, gate, norm or rotation does (the sensitivity test: 6-10% of the scale).
const TOL = 2e-5;

const spec = tinyHybridSpec;

describe('Qwen3.5 reference forward vs the independent chunked matrix implementation', () => {
  const cases: [number, number[]][] = [
    [31, [3, 1, 4, 1, 5, 9, 2, 6, 5, 35]],
    [32, [42, 0, 17, 8, 8, 23, 1, 40, 11, 2, 30]],
  ];
  for (const [seed, tokens] of cases) {
    it(`seed ${seed}: logits of a ${tokens.length}-token sequence agree (delta rule in chunks of 4)`, () => {
      const source = randomWeights(spec, seed);
      const want = naiveQwen35(spec, source, tokens, 4).flat();
      const got = new ReferenceRunner(spec, source).logitsFor(tokens);
      const { maxDiff, scale } = compare(got, want);
      expect(scale).toBeGreaterThan(0.5);
      expect(maxDiff).toBeLessThanOrEqual(TOL * scale);
    });
  }

  it('seed 31: the residual stream after every layer agrees (where a disagreement starts)', () => {
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const trace: Matrix[] = [];
    naiveQwen35(spec, source, tokens, 4, trace);
    const runner = new ReferenceRunner(spec, source);
    const outputs: Float32Array[] = [];
    runner.residualHook = {
      output: (layer, x) => {
        outputs[layer] = x.slice();
      },
    };
    runner.logitsFor(tokens);
    for (let l = 0; l < spec.layers; l++) {
      const { maxDiff, scale } = compare(outputs[l]!, trace[l]!.flat());
      expect(maxDiff, `layer ${l} (${spec.layerKinds![l]}) output`).toBeLessThanOrEqual(TOL * scale);
    }
  });

  it('the chunked delta rule equals the plain recurrence in f64 (chunks of 4, 3 and one chunk)', () => {
    // Stand-alone: random heads with strong and weak decays, over several padded chunks.
    const rand = seededRandom(7);
    const T = 11;
    const dk = 6;
    const dv = 5;
    const l2 = (x: number[]): number[] => {
      const n = Math.sqrt(x.reduce((a, v) => a + v * v, 0));
      return x.map((v) => v / n);
    };
    const rows = (d: number): Matrix =>
      Array.from({ length: T }, () => Array.from({ length: d }, () => 2 * rand() - 1));
    const inputs: DeltaInputs = {
      q: rows(dk).map((r) => l2(r).map((v) => v / Math.sqrt(dk))),
      k: rows(dk).map(l2),
      v: rows(dv),
      beta: Array.from({ length: T }, () => rand()),
      g: Array.from({ length: T }, () => -3 * rand()),
    };
    const want = recurrentDelta(inputs).flat();
    for (const C of [4, 3, 16]) {
      const { maxDiff, scale } = compare(chunkedDelta(inputs, C).flat(), want);
      expect(scale).toBeGreaterThan(0.1);
      expect(maxDiff).toBeLessThanOrEqual(1e-12 * scale);
    }
    // And through the whole model: the logits of either form agree to f64 rounding.
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const recurrent = naiveQwen35(spec, source, tokens, 'recurrent').flat();
    const { maxDiff, scale } = compare(naiveQwen35(spec, source, tokens, 4).flat(), recurrent);
    expect(maxDiff).toBeLessThanOrEqual(1e-12 * scale);
  });

  it('is sensitive: A_log of one layer moved by 0.5 changes the logits beyond the tolerance', () => {
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const base = new ReferenceRunner(spec, source).logitsFor(tokens);
    for (const layer of [0, 2]) {
      const record: Record<string, Tensor> = {};
      for (const name of weightShapes(spec).keys()) record[name] = source.get(name);
      const name = `model.layers.${layer}.linear_attn.A_log`;
      const t = source.get(name);
      record[name] = { shape: t.shape, data: t.data.map((v) => v + 0.5) };
      const perturbed = mapWeights(record);
      const moved = new ReferenceRunner(spec, perturbed).logitsFor(tokens);
      const { maxDiff, scale } = compare(moved, base);
      expect(maxDiff, `layer ${layer}: the perturbation's effect`).toBeGreaterThan(10 * TOL * scale);
      // The oracle follows the reference there too.
      const want = naiveQwen35(spec, perturbed, tokens, 4).flat();
      const check = compare(moved, want);
      expect(check.maxDiff, `layer ${layer}: oracle vs reference, perturbed`).toBeLessThanOrEqual(
        TOL * check.scale,
      );
    }
  });
});

/**
 * The MTP layer's logits for the token after `next`, from the context's residual streams x
 * [L][H] (the target's, before its final norm), independently: entry p (1..L) embeds token p
 * (`next` at L) and reads the target's normed hidden state at p - 1, fc · [norm_e(E[x_p]);
 * norm_h(norm_final(x_{p-1}))], then one gated-attention decoder layer over the entries (causal)
 * with its MLP, mtp.norm and the tied LM head. Zero-centred norms throughout.
 */
function naiveMtp(
  spec: ModelSpec,
  source: NamedTensors,
  tokens: readonly number[],
  next: number,
  x: Matrix,
): number[] {
  const eps = spec.rmsEps;
  const embed = matrix(source, 'model.embed_tokens.weight');
  const mtp: NamedTensors = { get: (n) => source.get(n.replace(/^model\.layers\.0\./, 'mtp.layers.0.')) };
  const ids = [...tokens.slice(1), next];
  const final = vector(source, 'model.norm.weight');
  let z: Matrix = ids.map((id, i) => {
    const e = rmsnorm(embed[id]!, vector(source, 'mtp.pre_fc_norm_embedding.weight'), eps, true);
    const h = rmsnorm(
      rmsnorm(x[i]!, final, eps, true),
      vector(source, 'mtp.pre_fc_norm_hidden.weight'),
      eps,
      true,
    );
    return [...e, ...h];
  });
  z = matmulT(z, matrix(source, 'mtp.fc.weight'));
  const add = (y: Matrix): void => {
    z = z.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  const p = 'mtp.layers.0';
  add(
    gatedAttention(
      spec,
      mtp,
      0,
      z.map((row) => rmsnorm(row, vector(source, `${p}.input_layernorm.weight`), eps, true)),
    ),
  );
  const h2 = z.map((row) => rmsnorm(row, vector(source, `${p}.post_attention_layernorm.weight`), eps, true));
  const gate = matmulT(h2, matrix(source, `${p}.mlp.gate_proj.weight`));
  const up = matmulT(h2, matrix(source, `${p}.mlp.up_proj.weight`));
  add(
    matmulT(
      gate.map((row, t) => row.map((v, i) => silu(v) * up[t]![i]!)),
      matrix(source, `${p}.mlp.down_proj.weight`),
    ),
  );
  const last = rmsnorm(z.at(-1)!, vector(source, 'mtp.norm.weight'), eps, true);
  return matmulT([last], embed)[0]!;
}

describe('Qwen3.5 MTP draft head vs the independent implementation', () => {
  it('the head’s logits for the token after next agree', async () => {
    const { files } = qwen35FixtureFiles(5);
    const opened = await openModel(memoryModelFiles('qwen35', files));
    const source = mapWeights(await readAllF32(opened.weights));
    const s = opened.spec;
    const context = [5, 17, 99, 3, 250, 11, 42];
    const target = new ReferenceRunner(s, source);
    target.prefill(context);
    const head = new HeadRunner(
      await openMtpHead({ name: 'qwen35', spec: s, weights: opened.weights }),
      target,
      64,
    );
    const next = 77;
    await head.forward({ tokens: [...context, next] }, GREEDY, 'last');
    const got = await head.lastLogits();
    const trace: Matrix[] = [];
    naiveQwen35(s, source, context, 'recurrent', trace);
    const want = naiveMtp(s, source, context, next, trace.at(-1)!);
    const { maxDiff, scale } = compare(got, want);
    expect(scale).toBeGreaterThan(0.5);
    expect(maxDiff).toBeLessThanOrEqual(TOL * scale);
  });
});
