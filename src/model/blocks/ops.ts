// The plain-TS operations of the reference forward pass (model/reference.ts, its blocks in
// model/blocks/ and the draft head's CPU runner), in f32 storage with f64 accumulation: see the
// numerics note in reference.ts.
import { InvalidInputError } from '../../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';
import { yarnInvFreq } from '../../kernels/rope/rope.js';
import { attentionScale, deriveSizes, type ModelSpec, type RopeSpec } from '../spec/spec.js';

/** Rounds every value to the nearest IEEE half (ties to even), in place. */
export function roundToHalves(x: Float32Array): void {
  for (let i = 0; i < x.length; i++) x[i] = f16BitsToF32(f32ToF16Bits(x[i]!));
}

/**
 * RoPE inverse frequencies `[rotaryDim / 2]` (rotaryDim: `rope.rotaryDim`, else headDim) as
 * Hugging Face computes them, rounded to f32: `1 / theta^(2i / rotaryDim)`, divided by the factor
 * of linear scaling, or with Llama 3 scaling (`_compute_llama3_parameters`) when set:
 * wavelengths below `originalMaxPositions / highFreqFactor` are kept, those above
 * `originalMaxPositions / lowFreqFactor` are divided by `factor`, and the band between is
 * interpolated smoothly. LongRoPE (`_compute_longrope_parameters`): `1 / (factors[i] ·
 * theta^(2i / rotaryDim))` with each step rounded to f32 as PyTorch takes it (the exponent, the
 * power, the product, the quotient), as the kernels' `ropeInvFreq` computes it too. YaRN: the
 * kernels' `yarnInvFreq` (one computation of Transformers' `_compute_yarn_parameters`).
 */
export function ropeInverseFrequencies(rope: RopeSpec, headDim: number): Float32Array {
  const dim = rope.rotaryDim ?? headDim; // partial rotary: the frequencies span the rotated width
  const s = rope.scaling;
  if (s?.type === 'yarn') return yarnInvFreq(dim, rope.theta, s);
  const inv = new Float32Array(dim / 2);
  if (s?.type === 'longrope' && s.factors.length !== inv.length)
    throw new InvalidInputError(
      `rope: LongRoPE has ${s.factors.length} factors for ${inv.length} rotary pairs (rotaryDim ${dim})`,
    );
  for (let i = 0; i < inv.length; i++) {
    const f = 1 / rope.theta ** ((2 * i) / dim);
    if (s === undefined) {
      inv[i] = f;
      continue;
    }
    if (s.type === 'linear') {
      inv[i] = f / s.factor;
      continue;
    }
    // Gemma 4's proportional RoPE: the pairs past `rotatedPairs` do not turn.
    if (s.type === 'proportional') {
      inv[i] = i < s.rotatedPairs ? Math.fround(f) / s.factor : 0;
      continue;
    }
    if (s.type === 'longrope') {
      const base = Math.fround(rope.theta ** Math.fround((2 * i) / dim));
      inv[i] = 1 / Math.fround(Math.fround(s.factors[i]!) * base);
      continue;
    }
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < s.originalMaxPositions / s.highFreqFactor) inv[i] = f;
    else if (wavelen > s.originalMaxPositions / s.lowFreqFactor) inv[i] = f / s.factor;
    else {
      const smooth =
        (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      inv[i] = ((1 - smooth) * f) / s.factor + smooth * f;
    }
  }
  return inv;
}

/**
 * A norm's weight as it multiplies: `1 + w` in f32 for a spec whose norms are stored zero-centred
 * (Qwen3.5's `(1 + weight)`), else `w` itself.
 */
export function normWeight(spec: ModelSpec, w: Float32Array): Float32Array {
  return spec.zeroCentredNorms ? Float32Array.from(w, (v) => Math.fround(1 + v)) : w;
}

/**
 * RMSNorm over rows of `width`: `y = x / sqrt(mean(x^2) + eps) * w`, the mean in f64, the normed
 * value rounded to f32 before the weight multiply as Hugging Face does (no weight: Gemma 4's V norm).
 * `out` may alias `x`.
 */
export function rmsNorm(
  x: Float32Array,
  width: number,
  w: Float32Array | undefined,
  eps: number,
  out: Float32Array,
): void {
  for (let r = 0; r < x.length / width; r++) {
    const base = r * width;
    let sum = 0;
    for (let i = 0; i < width; i++) sum += x[base + i]! * x[base + i]!;
    const inv = 1 / Math.sqrt(Math.fround(sum / width) + eps);
    for (let i = 0; i < width; i++) out[base + i] = (w ? w[i]! : 1) * Math.fround(x[base + i]! * inv);
  }
}

/**
 * `out[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o])`: x [T, inDim], W [outDim, inDim], out [T, outDim].
 * Each output is one f64 sum taken in the order i = 0, 1, ..., inDim - 1. The loops walk tiles of 4
 * tokens x 2 outputs so that each value loaded feeds 2 or 4 of the 8 sums, which run side by side;
 * every sum keeps its order, so the result is the same as one dot product at a time, about 3x faster.
 */
export function linear(
  x: Float32Array,
  inDim: number,
  W: Float32Array,
  outDim: number,
  bias: Float32Array | undefined,
  out: Float32Array,
): void {
  const T = x.length / inDim;
  // The bias is added to the f32 product, as PyTorch's addmm rounds before it.
  const put = (t: number, o: number, acc: number) => {
    out[t * outDim + o] = bias ? Math.fround(acc) + bias[o]! : acc;
  };
  for (let o0 = 0; o0 < outDim; o0 += 2) {
    // Past the last output row or token a tile repeats it: the same sum, computed and stored twice.
    const o1 = Math.min(o0 + 1, outDim - 1);
    const w0 = o0 * inDim;
    const w1 = o1 * inDim;
    for (let t0 = 0; t0 < T; t0 += 4) {
      const t1 = Math.min(t0 + 1, T - 1);
      const t2 = Math.min(t0 + 2, T - 1);
      const t3 = Math.min(t0 + 3, T - 1);
      const x0 = t0 * inDim;
      const x1 = t1 * inDim;
      const x2 = t2 * inDim;
      const x3 = t3 * inDim;
      let s00 = 0; // token t0, output o0
      let s01 = 0;
      let s10 = 0;
      let s11 = 0;
      let s20 = 0;
      let s21 = 0;
      let s30 = 0;
      let s31 = 0;
      for (let i = 0; i < inDim; i++) {
        const u = W[w0 + i]!;
        const v = W[w1 + i]!;
        const a = x[x0 + i]!;
        const b = x[x1 + i]!;
        const c = x[x2 + i]!;
        const d = x[x3 + i]!;
        s00 += a * u;
        s01 += a * v;
        s10 += b * u;
        s11 += b * v;
        s20 += c * u;
        s21 += c * v;
        s30 += d * u;
        s31 += d * v;
      }
      put(t0, o0, s00);
      put(t0, o1, s01);
      put(t1, o0, s10);
      put(t1, o1, s11);
      put(t2, o0, s20);
      put(t2, o1, s21);
      put(t3, o0, s30);
      put(t3, o1, s31);
    }
  }
}

/** `x += y`, elementwise in f32. */
export function addInto(x: Float32Array, y: Float32Array): void {
  for (let i = 0; i < x.length; i++) x[i] = x[i]! + y[i]!;
}

/**
 * Rotates x [T, heads, headDim] in place at each token's position. `'half'` pairs dimension i with
 * i + R/2 (Hugging Face's rotate_half over the first R = 2 · invFreq.length dimensions: partial
 * rotary leaves the rest as they are); `'interleaved'` pairs 2i with 2i + 1. Pair i turns by
 * angle `position * invFreq[i]`, with the angle, cos and sin rounded to f32 as in PyTorch; cos and
 * sin are then multiplied by `attentionFactor` (LongRoPE's, `ropeAttentionFactor`), in f32 as
 * PyTorch's `emb.cos() * attention_scaling` rounds it. A factor of 1 changes nothing.
 */
export function rope(
  x: Float32Array,
  heads: number,
  headDim: number,
  positions: readonly number[],
  invFreq: Float32Array,
  layout: RopeSpec['layout'],
  attentionFactor = 1,
): void {
  const half = invFreq.length; // rotaryDim / 2: dimensions past rotaryDim stay as they are
  const scale = Math.fround(attentionFactor);
  positions.forEach((pos, t) => {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(pos * invFreq[i]!);
      const c = Math.fround(Math.fround(Math.cos(angle)) * scale);
      const s = Math.fround(Math.fround(Math.sin(angle)) * scale);
      for (let hd = 0; hd < heads; hd++) {
        const base = (t * heads + hd) * headDim;
        const a = layout === 'half' ? base + i : base + 2 * i;
        const b = layout === 'half' ? base + i + half : base + 2 * i + 1;
        const xa = x[a]!;
        const xb = x[b]!;
        x[a] = xa * c - xb * s;
        x[b] = xb * c + xa * s;
      }
    }
  });
}

/**
 * Scaled dot-product attention of one token's queries q [heads, headDim] over the cache rows at
 * `slots` (keys/values [capacity, kvHeads, headDim]); query head h reads KV head
 * `floor(h / groupSize)` (GQA). Scores, softmax and the weighted sum are in f64; the result
 * [heads, headDim] is written to `out` at `outBase`.
 */
export function attend(
  spec: ModelSpec,
  q: Float32Array,
  keys: Float32Array,
  values: Float32Array,
  slots: readonly number[],
  out: Float32Array,
  outBase: number,
): void {
  const { kvWidth, groupSize } = deriveSizes(spec);
  const D = spec.headDim;
  const scale = attentionScale(spec);
  const scores = new Float64Array(slots.length);
  const acc = new Float64Array(D);
  for (let h = 0; h < spec.heads; h++) {
    const kvOff = Math.floor(h / groupSize) * D;
    let max = Number.NEGATIVE_INFINITY;
    slots.forEach((slot, j) => {
      const kBase = slot * kvWidth + kvOff;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[h * D + d]! * keys[kBase + d]!;
      scores[j] = dot * scale;
      if (scores[j]! > max) max = scores[j]!;
    });
    let denom = 0;
    for (let j = 0; j < slots.length; j++) {
      scores[j] = Math.exp(scores[j]! - max);
      denom += scores[j]!;
    }
    acc.fill(0);
    slots.forEach((slot, j) => {
      const vBase = slot * kvWidth + kvOff;
      const p = scores[j]! / denom;
      for (let d = 0; d < D; d++) acc[d] = acc[d]! + p * values[vBase + d]!;
    });
    for (let d = 0; d < D; d++) out[outBase + h * D + d] = acc[d]!;
  }
}

/**
 * Soft-capping in place (Gemma's `final_logit_softcapping`): x = c · tanh(x / c), each step
 * rounded to f32 as PyTorch takes it.
 */
export function softcapRef(x: Float32Array, c: number): void {
  const cap = Math.fround(c);
  for (let i = 0; i < x.length; i++)
    x[i] = Math.fround(Math.fround(Math.tanh(Math.fround(x[i]! / cap))) * cap);
}
