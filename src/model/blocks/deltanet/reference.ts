// The Gated DeltaNet block's reference forward (its descriptor and tensors in block.ts, its GPU
// side in gpu.ts): Qwen3.5's linear-attention token mixer. Its input norm, the projections
// q | k | v, z, b and a, a causal depthwise convolution over q | k | v, the gated delta rule over a
// per-head recurrent state (kept in ../recurrent-state.ts), a gated RMSNorm and out_proj, added
// into the residual stream.
//
// Per token t and value head h (key head h / (valueHeads / keyHeads)), as Hugging Face's
// Qwen3_5GatedDeltaNet with torch_recurrent_gated_delta_rule computes it in f32:
//   u = silu(conv(q | k | v)) over the last convKernel inputs (the state holds the previous ones)
//   q̂ = l2norm(q) / sqrt(keyDim), k̂ = l2norm(k), β = sigmoid(b), decay = exp(-exp(A_log) · softplus(a + dt_bias))
//   S ← decay · S;  S ← S + k̂ ⊗ β (v − Sᵀk̂);  o = Sᵀq̂                       (S: [keyDim, valueDim])
//   y = norm_weight · rmsnorm(o) · silu(z),  x += out_proj(y)

import { deltaNetWidths, type ModelSpec } from '../../spec/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import type { RecurrentState } from '../recurrent-state.js';
import { type DeltaNetBlock, deltaNetTensors } from './block.js';

/** The block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface DeltaNetWeights {
  readonly kind: 'deltanet';
  /** [H], as it multiplies (1 + w for zero-centred norms). */
  readonly inputNorm: Float32Array;
  /** [convChannels, H], [valueWidth, H], [valueHeads, H], [valueHeads, H] */
  readonly qkv: Float32Array;
  readonly z: Float32Array;
  readonly b: Float32Array;
  readonly a: Float32Array;
  /** [convChannels, convKernel] */
  readonly conv: Float32Array;
  /** [valueHeads] each */
  readonly dtBias: Float32Array;
  readonly aLog: Float32Array;
  /** [valueDim] the gated norm's weight (plain, not zero-centred). */
  readonly norm: Float32Array;
  /** [H, valueWidth] */
  readonly out: Float32Array;
}

/** Reads the block's weights. */
export function readDeltaNet(take: TakeTensor, spec: ModelSpec, block: DeltaNetBlock): DeltaNetWeights {
  const [norm, qkv, z, b, a, conv, dtBias, aLog, gatedNorm, out] = deltaNetTensors(spec, block).map(
    ([name, shape]) => take(name, shape),
  );
  return {
    kind: 'deltanet',
    inputNorm: normWeight(spec, norm!),
    qkv: qkv!,
    z: z!,
    b: b!,
    a: a!,
    conv: conv!,
    dtBias: dtBias!,
    aLog: aLog!,
    norm: gatedNorm!,
    out: out!,
  };
}

const sigmoid = (v: number) => Math.fround(1 / (1 + Math.exp(-v)));
const silu = (v: number) => Math.fround(v / Math.fround(1 + Math.fround(Math.exp(-v))));
// torch.nn.functional.softplus with its default threshold: x itself above 20.
const softplus = (v: number) => (v > 20 ? v : Math.fround(Math.log1p(Math.exp(v))));

/** x · 1/sqrt(Σx² + 1e-6) in f32 (transformers' l2norm, as FLA's kernel), then · scale. */
function l2normed(x: Float32Array, scale: number): Float32Array {
  let sum = 0;
  for (const v of x) sum += v * v;
  const inv = 1 / Math.sqrt(Math.fround(sum) + 1e-6);
  return x.map((v) => (scale === 1 ? Math.fround(v * inv) : Math.fround(Math.fround(v * inv) * scale)));
}

/**
 * One token through the convolution and the delta rule, from `state` (advanced in place): u [C] is
 * its q | k | v projection, zRow [valueWidth], bRow and aRow [valueHeads]. Returns the gated norm's
 * output y [valueWidth].
 */
function step(
  spec: ModelSpec,
  w: DeltaNetWeights,
  state: RecurrentState,
  u: Float32Array,
  zRow: Float32Array,
  bRow: Float32Array,
  aRow: Float32Array,
): Float32Array {
  const la = spec.deltaNet!;
  const { keyWidth, valueWidth, convChannels: C } = deltaNetWidths(spec);
  const K = la.convKernel;
  const dk = la.keyDim;
  const dv = la.valueDim;
  // The window: the K - 1 previous inputs, then this one; the state keeps its last K - 1.
  const conv = new Float32Array(C);
  for (let c = 0; c < C; c++) {
    let acc = w.conv[c * K + K - 1]! * u[c]!;
    for (let j = 0; j < K - 1; j++) acc += w.conv[c * K + j]! * state.conv[j * C + c]!;
    conv[c] = silu(Math.fround(acc));
  }
  state.conv.copyWithin(0, C);
  state.conv.set(u, (K - 2) * C);
  const y = new Float32Array(valueWidth);
  const group = la.valueHeads / la.keyHeads;
  const kv = new Float64Array(dv);
  for (let h = 0; h < la.valueHeads; h++) {
    const kh = Math.floor(h / group);
    const q = l2normed(conv.subarray(kh * dk, (kh + 1) * dk), Math.fround(1 / Math.sqrt(dk)));
    const k = l2normed(conv.subarray(keyWidth + kh * dk, keyWidth + (kh + 1) * dk), 1);
    const v = conv.subarray(2 * keyWidth + h * dv, 2 * keyWidth + (h + 1) * dv);
    const beta = sigmoid(bRow[h]!);
    const g = Math.fround(
      -Math.fround(Math.exp(w.aLog[h]!)) * softplus(Math.fround(aRow[h]! + w.dtBias[h]!)),
    );
    const decay = Math.fround(Math.exp(g));
    const S = state.S.subarray(h * dk * dv, (h + 1) * dk * dv); // [dk, dv]
    kv.fill(0);
    for (let i = 0; i < dk; i++)
      for (let j = 0; j < dv; j++) {
        S[i * dv + j] = Math.fround(S[i * dv + j]! * decay);
        kv[j] = kv[j]! + S[i * dv + j]! * k[i]!;
      }
    const o = new Float64Array(dv);
    for (let j = 0; j < dv; j++) kv[j] = Math.fround(Math.fround(v[j]! - Math.fround(kv[j]!)) * beta);
    for (let i = 0; i < dk; i++)
      for (let j = 0; j < dv; j++) {
        S[i * dv + j] = Math.fround(S[i * dv + j]! + Math.fround(k[i]! * kv[j]!));
        o[j] = o[j]! + S[i * dv + j]! * q[i]!;
      }
    // Gated RMSNorm over the head's dv outputs: weight · (o / rms(o)) · silu(z).
    let sum = 0;
    for (let j = 0; j < dv; j++) sum += Math.fround(o[j]!) ** 2;
    const inv = 1 / Math.sqrt(Math.fround(sum / dv) + spec.rmsEps);
    for (let j = 0; j < dv; j++) {
      const normed = Math.fround(w.norm[j]! * Math.fround(Math.fround(o[j]!) * inv));
      y[h * dv + j] = Math.fround(normed * silu(zRow[h * dv + j]!));
    }
  }
  return y;
}

/**
 * The block's reference forward over the pass's rows, in order: each row starts from its parent's
 * state (the committed one for a root; zeros on an empty cache) and leaves its own for its children
 * and for a commit.
 */
export function deltaNetRef(pass: RefPass, block: DeltaNetBlock, w: DeltaNetWeights): void {
  const { spec, T, x } = pass;
  const H = spec.hidden;
  const la = spec.deltaNet!;
  const { valueWidth, convChannels: C } = deltaNetWidths(spec);
  const Hv = la.valueHeads;
  const h = new Float32Array(T * H); // [T, H] the normed input
  rmsNorm(x, H, w.inputNorm, spec.rmsEps, h);
  const n = block.names;
  const hi = pass.input(h, H, [n.qkv, n.z, n.b, n.a]);
  const qkv = new Float32Array(T * C); // [T, C]
  const z = new Float32Array(T * valueWidth); // [T, valueWidth]
  const b = new Float32Array(T * Hv); // [T, Hv]
  const a = new Float32Array(T * Hv); // [T, Hv]
  linear(hi, H, w.qkv, C, undefined, qkv);
  linear(hi, H, w.z, valueWidth, undefined, z);
  linear(hi, H, w.b, Hv, undefined, b);
  linear(hi, H, w.a, Hv, undefined, a);
  const zeros = () => ({
    conv: new Float32Array((la.convKernel - 1) * C),
    S: new Float32Array(la.valueHeads * la.keyDim * la.valueDim),
  });
  const states = pass.recurrent.beginRows(block.layer);
  const y = new Float32Array(T * valueWidth); // [T, valueWidth]
  for (let t = 0; t < T; t++) {
    const state = pass.recurrent.before(block.layer, pass.parents[t]!, pass.positions[t] === 0, zeros);
    const row = <A extends Float32Array>(m: A, n: number) => m.subarray(t * n, (t + 1) * n);
    y.set(step(spec, w, state, row(qkv, C), row(z, valueWidth), row(b, Hv), row(a, Hv)), t * valueWidth);
    states.push(state);
  }
  const proj = new Float32Array(T * H); // [T, H]
  linear(pass.input(y, valueWidth, [n.out]), valueWidth, w.out, H, undefined, proj);
  addInto(x, proj);
}
