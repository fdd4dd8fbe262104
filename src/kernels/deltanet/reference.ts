// The plain-TS reference of a Gated DeltaNet layer's mixer (Qwen3.5's linear attention, as
// Hugging Face transformers computes it in f32: the causal depthwise conv, then
// torch_recurrent_gated_delta_rule, then the gated RMSNorm), the oracle of deltanet.ts's kernels,
// and the shapes its callers share.
import { InvalidInputError } from '../../errors.js';

/** Largest keyDim and valueDim: a rule thread keeps a column of S in a private array of keyDim. */
const DELTANET_MAX_HEAD_DIM = 256;
/** Largest convKernel: each conv thread keeps its window in a private array of convKernel. */
const DELTANET_MAX_CONV_KERNEL = 16;

/** Static shape of one Gated DeltaNet layer (every linear-attention layer of a model shares it). */
export interface DeltaNetShape {
  /** Key (and query) heads Hk. */
  keyHeads: number;
  /** Value heads Hv, a multiple of keyHeads (value head h reads key head ⌊h / (Hv / Hk)⌋). */
  valueHeads: number;
  /** Key head size dk (≤ {@link DELTANET_MAX_HEAD_DIM}). */
  keyDim: number;
  /** Value head size dv (≤ {@link DELTANET_MAX_HEAD_DIM}). */
  valueDim: number;
  /** Taps K of the causal depthwise conv (≥ 2). */
  convKernel: number;
  /** Epsilon of the gated RMSNorm. */
  eps: number;
}

/** Sizes derived from a {@link DeltaNetShape}, computed here only. */
export interface DeltaNetSizes {
  /** Hk · dk: the width of q, and of k. */
  keyWidth: number;
  /** Hv · dv: the width of v, of z and of the output. */
  valueWidth: number;
  /** Conv channels C = 2 · keyWidth + valueWidth (q | k | v). */
  channels: number;
  /** Projection row width P = C + valueWidth + 2 · Hv: [qkv (C) | z | b (Hv) | a (Hv)]. */
  row: number;
}

/** The derived sizes of `shape`. */
export function deltaNetSizes(shape: DeltaNetShape): DeltaNetSizes {
  const keyWidth = shape.keyHeads * shape.keyDim;
  const valueWidth = shape.valueHeads * shape.valueDim;
  const channels = 2 * keyWidth + valueWidth;
  return { keyWidth, valueWidth, channels, row: channels + valueWidth + 2 * shape.valueHeads };
}

/** Throws InvalidInputError, prefixed by `who`, naming the first field of `shape` out of range. */
export function checkDeltaNetShape(shape: DeltaNetShape, who: string): void {
  const { keyHeads, valueHeads, keyDim, valueDim, convKernel, eps } = shape;
  for (const [name, v] of Object.entries({ keyHeads, valueHeads, keyDim, valueDim, convKernel }))
    if (!Number.isInteger(v) || v < 1) throw new InvalidInputError(`${who}: ${name} must be ≥ 1, got ${v}`);
  if (valueHeads % keyHeads !== 0)
    throw new InvalidInputError(
      `${who}: valueHeads (${valueHeads}) must be a multiple of keyHeads (${keyHeads})`,
    );
  for (const [name, v] of Object.entries({ keyDim, valueDim }))
    if (v > DELTANET_MAX_HEAD_DIM)
      throw new InvalidInputError(`${who}: ${name} must be ≤ ${DELTANET_MAX_HEAD_DIM}, got ${v}`);
  if (convKernel < 2 || convKernel > DELTANET_MAX_CONV_KERNEL)
    throw new InvalidInputError(
      `${who}: convKernel must be in 2..${DELTANET_MAX_CONV_KERNEL}, got ${convKernel}`,
    );
  if (!(eps >= 0)) throw new InvalidInputError(`${who}: eps must be ≥ 0, got ${eps}`);
}

/** A layer's weights, as GPU buffers (the kernels) or f32 arrays (the reference). */
export interface DeltaNetWeights<B> {
  /** [C, K] depthwise conv weight (the checkpoint's [C, 1, K] squeezed), no bias. */
  convWeight: B;
  /** [Hv] A_log. */
  aLog: B;
  /** [Hv] dt_bias. */
  dtBias: B;
  /** [dv] gated RMSNorm weight (plain `w`, not `1 + w`). */
  normWeight: B;
}

/** A layer's persistent state, f32, as GPU buffers (the kernels) or arrays (the reference). */
export interface DeltaNetState<B> {
  /** [K - 1, C] the last K - 1 pre-conv q|k|v rows, oldest first. */
  conv: B;
  /** [Hv, dk, dv] the recurrent state S (v fastest). */
  recurrent: B;
}

const f = Math.fround;

/** silu(y) = y / (1 + e^-y), rounded as torch's f32 kernel rounds each step. */
function silu(y: number): number {
  return f(y / f(1 + f(Math.exp(-y))));
}

/** The rows of `proj`: its length over the row width, which must divide it. */
function rowsOf(shape: DeltaNetShape, proj: Float32Array, who: string): number {
  const { row } = deltaNetSizes(shape);
  if (proj.length % row !== 0)
    throw new InvalidInputError(`${who}: proj holds ${proj.length} values, not a multiple of the row ${row}`);
  return proj.length / row;
}

/**
 * Reference of the conv step over the T = proj.length / P rows of `proj` [T, P] (a chain following
 * the state): u[t, c] = silu(Σ_j convWeight[c, j] · x[t - (K - 1) + j, c]), where x is the q|k|v
 * part of proj after the K - 1 rows of `convState` [K - 1, C] (zeros when `fresh`). The sum is
 * taken in f64 and rounded once. Returns u [T, C]; `convState` is updated in place to the last
 * K - 1 rows of [convState; x].
 */
function deltaNetConvRef(
  shape: DeltaNetShape,
  proj: Float32Array,
  convWeight: Float32Array,
  convState: Float32Array,
  fresh: boolean,
): Float32Array {
  checkDeltaNetShape(shape, 'deltaNetConvRef');
  const { channels: C, row: P } = deltaNetSizes(shape);
  const K = shape.convKernel;
  const T = rowsOf(shape, proj, 'deltaNetConvRef');
  const u = new Float32Array(T * C);
  // x at time i - (K - 1) for i < K - 1 comes from the state; at time t ≥ 0 from proj.
  const x = (time: number, c: number) =>
    time >= 0 ? proj[time * P + c]! : fresh ? 0 : convState[(time + K - 1) * C + c]!;
  for (let c = 0; c < C; c++) {
    for (let t = 0; t < T; t++) {
      let y = 0;
      for (let j = 0; j < K; j++) y += convWeight[c * K + j]! * x(t - (K - 1) + j, c);
      u[t * C + c] = silu(f(y));
    }
    const last = Array.from({ length: K - 1 }, (_, i) => x(T - (K - 1) + i, c));
    for (let i = 0; i < K - 1; i++) convState[i * C + c] = last[i]!;
  }
  return u;
}

/** softplus(x) = log(1 + e^x) as torch's F.softplus (beta 1, threshold 20: x itself above 20). */
function softplus(x: number): number {
  return x > 20 ? x : f(Math.log1p(f(Math.exp(x))));
}

/**
 * Reference of the delta rule and the gated norm over T rows: proj [T, P] (for z, b, a), conv
 * [T, C] (u of {@link deltaNetConvRef}, for q, k, v), the weights, and `recurrent` S [Hv, dk, dv]
 * (treated as zeros when `fresh`; updated in place to the state after row T - 1). Per row and
 * value head h (key head ⌊h / (Hv / Hk)⌋): q̂ = l2norm(q) / √dk, k̂ = l2norm(k) (eps 1e-6 inside
 * the root), β = sigmoid(b), decay = exp(-exp(A_log) · softplus(a + dt_bias)); S ← S · decay;
 * δ = (v - Sᵀk̂) · β; S ← S + k̂ δᵀ; o = Sᵀq̂; y = w · (o / √(mean(o²) + eps)) · silu(z). Each op
 * is rounded to f32 as torch's f32 run rounds it; sums are taken in f64 and rounded once.
 * Returns y [T, valueWidth].
 */
function gatedDeltaRef(
  shape: DeltaNetShape,
  proj: Float32Array,
  conv: Float32Array,
  weights: Omit<DeltaNetWeights<Float32Array>, 'convWeight'>,
  recurrent: Float32Array,
  fresh: boolean,
): Float32Array {
  checkDeltaNetShape(shape, 'gatedDeltaRef');
  const { keyHeads, valueHeads: Hv, keyDim: dk, valueDim: dv, eps } = shape;
  const { keyWidth, valueWidth, channels: C, row: P } = deltaNetSizes(shape);
  const T = rowsOf(shape, proj, 'gatedDeltaRef');
  if (conv.length !== T * C)
    throw new InvalidInputError(`gatedDeltaRef: conv holds ${conv.length} values, need ${T} · ${C}`);
  if (fresh) recurrent.fill(0);
  const y = new Float32Array(T * valueWidth);
  const scale = f(1 / Math.sqrt(dk));
  // x · rsqrt(Σ x² + 1e-6), torch's l2norm.
  const l2norm = (x: Float32Array) => {
    let ss = 0;
    for (const v of x) ss += v * v;
    const inv = f(1 / Math.sqrt(f(f(ss) + f(1e-6))));
    return x.map((v) => f(v * inv));
  };
  const o = new Float64Array(dv);
  for (let t = 0; t < T; t++) {
    const u = conv.subarray(t * C, (t + 1) * C);
    const pr = t * P;
    for (let h = 0; h < Hv; h++) {
      const kh = Math.floor(h / (Hv / keyHeads));
      const q = l2norm(u.subarray(kh * dk, (kh + 1) * dk)).map((v) => f(v * scale));
      const k = l2norm(u.subarray(keyWidth + kh * dk, keyWidth + (kh + 1) * dk));
      const v = u.subarray(2 * keyWidth + h * dv, 2 * keyWidth + (h + 1) * dv);
      const beta = f(1 / f(1 + f(Math.exp(-proj[pr + C + valueWidth + h]!))));
      const a = f(proj[pr + C + valueWidth + Hv + h]! + weights.dtBias[h]!);
      const decay = f(Math.exp(f(f(-f(Math.exp(weights.aLog[h]!))) * softplus(a))));
      const S = recurrent.subarray(h * dk * dv, (h + 1) * dk * dv); // [dk, dv]
      for (let i = 0; i < dk * dv; i++) S[i] = f(S[i]! * decay);
      for (let c = 0; c < dv; c++) {
        let kv = 0;
        for (let i = 0; i < dk; i++) kv += S[i * dv + c]! * k[i]!;
        const delta = f(f(v[c]! - f(kv)) * beta);
        let out = 0;
        for (let i = 0; i < dk; i++) {
          S[i * dv + c] = f(S[i * dv + c]! + f(k[i]! * delta));
          out += S[i * dv + c]! * q[i]!;
        }
        o[c] = f(out);
      }
      let ss = 0;
      for (const x of o) ss += x * x;
      const inv = f(1 / Math.sqrt(f(f(ss / dv) + f(eps))));
      for (let c = 0; c < dv; c++) {
        const z = proj[pr + C + h * dv + c]!;
        y[t * valueWidth + h * dv + c] = f(f(weights.normWeight[c]! * f(o[c]! * inv)) * silu(z));
      }
    }
  }
  return y;
}

/**
 * Reference of a whole pass: {@link deltaNetConvRef} then {@link gatedDeltaRef} on proj [T, P],
 * updating `state` in place. Returns the conv output u [T, C] and the mixer's output y
 * [T, valueWidth] (before the out projection).
 */
export function deltaNetRef(
  shape: DeltaNetShape,
  proj: Float32Array,
  weights: DeltaNetWeights<Float32Array>,
  state: DeltaNetState<Float32Array>,
  fresh: boolean,
): { conv: Float32Array; out: Float32Array } {
  const conv = deltaNetConvRef(shape, proj, weights.convWeight, state.conv, fresh);
  return { conv, out: gatedDeltaRef(shape, proj, conv, weights, state.recurrent, fresh) };
}
