/**
 * What the i-quant encoders share (iquant-lattice.ts for the lattice types, iquant-encode.ts for
 * IQ4_NL and IQ4_XS): the weighted objective, the checks on `quantize`'s arguments, and the choice
 * of a block's f16 d from its sub-blocks' scales.
 *
 * Every encoder minimises Σ w·(x − x̂)² per block with llama.cpp's weights (ggml-quants.c
 * `quantize_row_iq*_impl`): w = c·√(σ² + x²), c the column's importance (an imatrix entry; 1
 * without one) and σ² the block's mean square (doubled for all but IQ2_XXS and IQ2_XS, as there).
 * Without an imatrix llama.cpp weighs IQ3_XXS, IQ3_S and the IQ4 types by x² alone, IQ2_S by
 * σ²/4 + x², and refuses IQ2_XXS and IQ2_XS; unit importance is used for all of them here, because
 * with an exhaustive search x² leaves small values almost free and doubled IQ3_XXS's unweighted
 * error on Gaussian rows (0.34 against 0.18 of the rms; llama.cpp's own IQ3_XXS: 0.21). A
 * sub-block whose weights are all 0 is weighed uniformly instead.
 */
import { InvalidInputError } from '../../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';

/** f32 value of the f16 nearest to `x` (what a stored d decodes as). */
export function asF16(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}

/** `v` limited to [lo, hi]. */
export function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, v));
}

/** Writes f16 `bits` (a block's d) little-endian at out[at], out[at + 1]. */
export function putF16Bits(out: Uint8Array, at: number, bits: number): void {
  out[at] = bits & 255;
  out[at + 1] = bits >> 8;
}

/** How many of the ranked d values (see {@link rankScales}) get a full trial. */
const D_TRIALS = 3;

/**
 * The block scales d worth a full trial: d = f16(big / scaleOf(1, top)) for each code in `tops`
 * (the largest sub-block scale `big` at that code), ranked by how far the sub-block scales lie from
 * the scale of their nearest code under d, Σ c_i·(s_i − scaleOf(d, l_i))² (c_i = curvature[i]: the
 * error a scale change adds to codes held fixed), the best D_TRIALS distinct values first. Throws
 * where d overflows f16; leaves out a d that rounds to 0.
 */
export function rankScales(
  name: string,
  block: number,
  scales: Float64Array,
  curvature: Float64Array,
  big: number,
  tops: readonly number[],
  scaleOf: (d: number, l: number) => number,
  levelOf: (t: number) => number,
  codes: readonly [number, number],
): number[] {
  const ranked: [number, number][] = [];
  for (const top of big === 0 ? [] : tops) {
    const d = asF16(big / scaleOf(1, top));
    if (!Number.isFinite(d))
      throw new InvalidInputError(`quantize ${name}: block ${block}'s scale ${big} overflows f16`);
    if (d === 0 || ranked.some(([other]) => other === d)) continue;
    let misfit = 0;
    for (let i = 0; i < scales.length; i++) {
      const l = clamp(Math.round(levelOf(scales[i]! / d)), codes[0], codes[1]);
      misfit += curvature[i]! * (scales[i]! - scaleOf(d, l)) ** 2;
    }
    ranked.push([d, misfit]);
  }
  return ranked
    .sort((p, q) => p[1] - q[1])
    .slice(0, D_TRIALS)
    .map(([d]) => d);
}

/**
 * Checks `quantize`'s arguments: whole blocks, finite values, and importance (if any) a whole
 * number of rows of non-negative finite weights.
 */
export function checkQuantize(
  name: string,
  elems: number,
  x: Float32Array,
  importance: Float32Array | undefined,
): void {
  if (x.length % elems !== 0)
    throw new InvalidInputError(`quantize ${name}: ${x.length} values are not whole blocks of ${elems}`);
  const bad = x.findIndex((v) => !Number.isFinite(v));
  if (bad >= 0) throw new InvalidInputError(`quantize ${name}: x[${bad}] = ${x[bad]} is not finite`);
  if (importance === undefined) return;
  if (importance.length === 0 || x.length % importance.length !== 0)
    throw new InvalidInputError(
      `quantize ${name}: ${x.length} values are not whole rows of the ${importance.length} importance weights`,
    );
  const neg = importance.findIndex((v) => !(v >= 0 && v < Infinity));
  if (neg >= 0)
    throw new InvalidInputError(
      `quantize ${name}: importance[${neg}] = ${importance[neg]} is not a finite weight >= 0`,
    );
}

/**
 * The weights of x[from, from + n) into w (see the header: w = c·√(σ² + x²), σ² `sigma` times the
 * mean square of the n values); each `sub` values whose weights are all 0 get 1.
 */
export function blockWeights(
  x: Float32Array,
  from: number,
  n: number,
  importance: Float32Array | undefined,
  sigma: number,
  sub: number,
  w: Float64Array,
): void {
  let sumX2 = 0;
  for (let i = 0; i < n; i++) sumX2 += x[from + i]! * x[from + i]!;
  const sigma2 = (sigma * sumX2) / n;
  for (let i = 0; i < n; i++) {
    const c = importance ? importance[(from + i) % importance.length]! : 1;
    w[i] = c * Math.sqrt(sigma2 + x[from + i]! * x[from + i]!);
  }
  for (let s = 0; s < n; s += sub) {
    let sum = 0;
    for (let i = s; i < s + sub; i++) sum += w[i]!;
    if (!(sum > 0)) w.fill(1, s, s + sub);
  }
}
