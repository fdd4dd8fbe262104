// The attention block's reference forward (its descriptor and tensors in block.ts, its GPU side in
// gpu.ts): a decoder layer's input norm, q | k | v (with the spec's bias or QK-norm), RoPE, the KV
// cache write, attention over the cache and o, added into the residual stream.

import { isKvInt, kvIntRoundTrip, kvRotatable } from '../../../kernels/kv/kv-quant.js';
import { queryTemperatureRef } from '../../../kernels/rope/rope.js';
import {
  deriveSizes,
  kvSourceLayer,
  layerAttention,
  layerSpec,
  type ModelSpec,
  ropeAttentionFactor,
} from '../../spec/spec.js';
import { addInto, attend, linear, normWeight, rmsNorm, rope, roundToHalves } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type AttentionBlock, attentionTensors, kvProjections } from './block.js';

/** The attention block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface AttentionWeights {
  readonly kind: 'attention';
  /** [H] */
  readonly inputNorm: Float32Array;
  /**
   * [qWidth, H] (with an output gate [2 · qWidth, H]: per head its query rows, then its gate rows),
   * [kvWidth, H], [kvWidth, H]; k and v undefined where the layer does not compute them
   * (kvProjections).
   */
  readonly q: Float32Array;
  readonly k: Float32Array | undefined;
  readonly v: Float32Array | undefined;
  /** [H, qWidth] */
  readonly o: Float32Array;
  /** [qWidth], [kvWidth], [kvWidth] when `spec.qkvBias`. */
  readonly qBias: Float32Array | undefined;
  readonly kBias: Float32Array | undefined;
  readonly vBias: Float32Array | undefined;
  /** [headDim] each, when `spec.qkNorm`. */
  readonly qNorm: Float32Array | undefined;
  readonly kNorm: Float32Array | undefined;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: Float32Array | undefined;
}

/** Reads the block's weights. */
export function readAttention(take: TakeTensor, spec: ModelSpec, block: AttentionBlock): AttentionWeights {
  const shapes = new Map(attentionTensors(spec, block));
  const get = (name: string) => take(name, shapes.get(name)!);
  const n = block.names;
  const kv = kvProjections(spec, block.layer);
  return {
    kind: 'attention',
    inputNorm: normWeight(spec, get(n.norm)),
    q: get(n.q),
    k: kv === 'none' ? undefined : get(n.k),
    v: kv === 'kv' ? get(n.v) : undefined,
    o: get(n.o),
    qBias: spec.qkvBias ? get(n.qBias) : undefined,
    kBias: spec.qkvBias ? get(n.kBias) : undefined,
    vBias: spec.qkvBias ? get(n.vBias) : undefined,
    qNorm: spec.qkNorm ? normWeight(spec, get(n.qNorm)) : undefined,
    kNorm: spec.qkNorm && kv !== 'none' ? normWeight(spec, get(n.kNorm)) : undefined,
    outNorm: spec.sandwichNorms ? normWeight(spec, get(n.outNorm)) : undefined,
  };
}

/**
 * The block's reference forward over the pass's rows: x += o(attention(rope(qk_norm(q)),
 * rope(qk_norm(k)), v)) of rmsnorm(x), writing each row's K/V at its cache slot (rounded to halves
 * for an f16 cache) before any row attends.
 */
export function attentionRef(pass: RefPass, block: AttentionBlock, w: AttentionWeights): void {
  const { T, x } = pass;
  const spec = layerSpec(pass.spec, block.layer); // the layer's head size and KV heads
  const H = spec.hidden;
  const { qWidth } = deriveSizes(spec);
  const n = block.names;
  const h = new Float32Array(T * H); // [T, H] the normed input
  const q = new Float32Array(T * qWidth); // [T, heads, headDim]
  const attn = new Float32Array(T * qWidth); // [T, heads, headDim]
  const proj = new Float32Array(T * H); // [T, H] the block's output before the residual add
  rmsNorm(x, H, w.inputNorm, spec.rmsEps, h);
  const hq = pass.input(h, H, [n.q, ...(w.k ? [n.k] : []), ...(w.v ? [n.v] : [])]); // one input, as on the GPU
  const gate = spec.outputGate ? new Float32Array(T * qWidth) : undefined; // [T, heads, headDim]
  if (gate) splitGate(spec, T, hq, w.q, q, gate);
  else linear(hq, H, w.q, qWidth, w.qBias, q);
  // Qwen3: RMSNorm over each head's headDim values, before RoPE.
  if (w.qNorm) rmsNorm(q, spec.headDim, w.qNorm, spec.rmsEps, q);
  const { window, rope: ropeSpec } = layerAttention(spec, block.layer);
  const invFreq = pass.invFreq(block.layer);
  // LongRoPE (Phi-3): cos and sin scaled by its attention factor; 1 for every other RoPE.
  const af = ropeSpec ? ropeAttentionFactor(ropeSpec) : 1;
  if (ropeSpec && invFreq) rope(q, spec.heads, spec.headDim, pass.positions, invFreq, ropeSpec.layout, af);
  // Ministral 3 (Llama 4's temperature tuning): each query row times its position's multiplier.
  if (spec.queryTemperature) queryTemperatureRef(q, qWidth, pass.positions, spec.queryTemperature);
  // A KV-shared layer (Gemma 4) attends over its source layer's cache, written earlier in the pass.
  const source = kvSourceLayer(spec, block.layer);
  const keys = pass.cache.keys[source]!;
  const values = pass.cache.values[source]!;
  if (w.k) writeKv(pass, spec, block, w, hq, keys, values, invFreq, af);
  for (let t = 0; t < T; t++) {
    const slots = window === undefined ? pass.attended[t]! : inWindow(pass, t, window);
    attend(spec, q.subarray(t * qWidth, (t + 1) * qWidth), keys, values, slots, attn, t * qWidth);
  }
  // Qwen3.5: attention · sigmoid(gate), in f32.
  if (gate)
    for (let i = 0; i < attn.length; i++)
      attn[i] = Math.fround(attn[i]! * Math.fround(1 / (1 + Math.exp(-gate[i]!))));
  linear(pass.input(attn, qWidth, [n.o]), qWidth, w.o, H, undefined, proj);
  if (w.outNorm) rmsNorm(proj, H, w.outNorm, spec.rmsEps, proj); // Gemma: normed before the add
  addInto(x, proj);
}

/**
 * The layer's K and V rows at each row's cache slot (rounded to halves for an f16 cache), before
 * any row attends: k with its bias, QK-norm and RoPE; v with its bias, or K's projection itself
 * (Gemma 4's `attention_k_eq_v`), RMS-normed without a weight with `spec.valueNorm`.
 */
function writeKv(
  pass: RefPass,
  spec: ModelSpec,
  block: AttentionBlock,
  w: AttentionWeights,
  hq: Float32Array,
  keys: Float32Array,
  values: Float32Array,
  invFreq: Float32Array | undefined,
  af: number,
): void {
  const { T } = pass;
  const { kvWidth } = deriveSizes(spec);
  const k = new Float32Array(T * kvWidth); // [T, kvHeads, headDim]
  const v = new Float32Array(T * kvWidth); // [T, kvHeads, headDim]
  linear(hq, spec.hidden, w.k!, kvWidth, w.kBias, k);
  if (w.v) linear(hq, spec.hidden, w.v, kvWidth, w.vBias, v);
  else v.set(k);
  if (w.kNorm) rmsNorm(k, spec.headDim, w.kNorm, spec.rmsEps, k);
  if (spec.valueNorm) rmsNorm(v, spec.headDim, undefined, spec.rmsEps, v);
  const ropeSpec = layerAttention(spec, block.layer).rope;
  if (ropeSpec && invFreq) rope(k, spec.kvHeads, spec.headDim, pass.positions, invFreq, ropeSpec.layout, af);
  if (pass.kvFormat === 'f16') {
    roundToHalves(k);
    roundToHalves(v);
  } else if (isKvInt(pass.kvFormat)) {
    // Each row's heads as an integer cache gives them back: keys rounded in the rotated basis
    // (where rotated) and turned back, so plain queries score them as the GPU's rotated ones.
    const { kvHeads, headDim } = layerSpec(spec, block.layer);
    const rotate = pass.kvRotate && kvRotatable(headDim);
    for (let t = 0; t < T; t++) {
      const at = t * kvWidth;
      k.set(kvIntRoundTrip(pass.kvFormat, kvHeads, headDim, k.subarray(at, at + kvWidth), rotate), at);
      v.set(kvIntRoundTrip(pass.kvFormat, kvHeads, headDim, v.subarray(at, at + kvWidth), false), at);
    }
  }
  for (let t = 0; t < T; t++) {
    keys.set(k.subarray(t * kvWidth, (t + 1) * kvWidth), pass.cacheSlots[t]! * kvWidth);
    values.set(v.subarray(t * kvWidth, (t + 1) * kvWidth), pass.cacheSlots[t]! * kvWidth);
  }
}

/**
 * The slots row t attends to within a sliding window: those whose position p' has
 * p - p' < window, p the row's position. A prefix slot stands at its own position, a slot of this
 * pass at its row's.
 */
function inWindow(pass: RefPass, t: number, window: number): number[] {
  const base = pass.cacheSlots[0]!;
  const at = (slot: number) => (slot < base ? slot : pass.positions[slot - base]!);
  const p = pass.positions[t]!;
  return pass.attended[t]!.filter((slot) => p - at(slot) < window);
}

/**
 * q_proj with an output gate: its [2 · qWidth] outputs hold, per head, headDim query values then
 * headDim gate values (transformers' `view(..., heads, 2 · headDim)` then `chunk(2)`): split into
 * q and gate [T, heads, headDim].
 */
function splitGate(
  spec: ModelSpec,
  T: number,
  h: Float32Array,
  wq: Float32Array,
  q: Float32Array,
  gate: Float32Array,
): void {
  const { qWidth } = deriveSizes(spec);
  const D = spec.headDim;
  const both = new Float32Array(T * 2 * qWidth); // [T, heads, 2 · headDim]
  linear(h, spec.hidden, wq, 2 * qWidth, undefined, both);
  for (let t = 0; t < T; t++)
    for (let hd = 0; hd < spec.heads; hd++) {
      const from = (t * spec.heads + hd) * 2 * D;
      const to = (t * spec.heads + hd) * D;
      q.set(both.subarray(from, from + D), to);
      gate.set(both.subarray(from + D, from + 2 * D), to);
    }
}
