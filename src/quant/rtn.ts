// The round-to-nearest scale choice of the integer formats (gridOf): an f16 scale (and min) per
// group of int8 and the legacy GGUF types, the searched (D, M, sc, mn) of the K-quants int4, q5_k
// and int2, and q6_k's signed sub-block scales.
import { InvalidInputError } from '../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';
import { gridFromScales, type MatrixGrid } from './grid.js';
import { writeSub } from './kquant.js';
import {
  checkShape,
  type IntFormat,
  isIntFormat,
  latticeFormat,
  paddedLength,
  scaleWords,
} from './layout.js';

/**
 * The round-to-nearest grid of `w` [rows, cols] (row-major) in an integer format: the scales are
 * chosen, the codes are not (see {@link nearestCode}, {@link encode}).
 * - int8: d = f16(max|w| / 127) per group of 32.
 * - q4_0, q5_0 (llama.cpp's RTN): d = f16(max / −8) (q5_0: / −16), max the signed element of
 *   largest magnitude.
 * - q4_1, q5_1 (llama.cpp's RTN): d = f16((max − min) / 15) (q5_1: / 31), m = f16(min).
 * - q6_k: per sub-block of 16, s_j = max / −32 (max signed, as q4_0); d = f16(s / −128) with s the
 *   s_j of largest magnitude, sc_j = clamp(round(s_j / d), −128, 127).
 * - q3_k (sub-blocks of 16, codes to −4) and iq4_xs (sub-blocks of 32, values to −127) likewise
 *   with 6-bit sub-scales: d = f16(s / −32), sc_j − 32 = clamp(round(s_j / d), −32, 31).
 * - iq4_nl: d = f16(max / −127) per group of 32, max signed (its extreme value is −127).
 * - int4 / q5_k / int2: per sub-block, (d ≥ 0, m ≥ 0) with x ≈ d·q − m from a small search that shrinks
 *   the range [min(0, lo), max(0, hi)] at each end and keeps the least squared error; then
 *   D = f16(max d / S), M = f16(max m / S) (S = 63 for int4's 6-bit sub-scales, 15 for int2's
 *   4-bit ones), sc = min(S, round(d / D)), mn likewise, and finally sc and mn each moved by ±1
 *   where that lowers the sub-block's error (q5_k: int4's search with 5-bit codes).
 * `importance` [cols] weighs each column's squared error in those searches (K-quants only): the
 * diagonal of a linear's input Hessian (Σ x_k² on calibration text) makes the scales favour the
 * inputs that carry the most energy, as llama.cpp's importance matrix does.
 */
export function gridOf(
  w: Float32Array,
  rows: number,
  cols: number,
  format: IntFormat,
  importance?: Float32Array,
): MatrixGrid {
  checkShape(format, rows, cols);
  if (!isIntFormat(format)) throw new InvalidInputError(`gridOf: ${format} is not an integer format`);
  if (latticeFormat(format))
    throw new InvalidInputError(
      `gridOf: weft does not quantize to ${format}, a lattice format it reads from GGUF files as stored (weft export-gguf writes it)`,
    );
  if (w.length !== rows * cols)
    throw new InvalidInputError(`gridOf: w has ${w.length} elements, expected ${rows} * ${cols}`);
  const n = rows * cols;
  const x = new Float32Array(paddedLength(format, n));
  x.set(w);
  const scales = new Uint32Array(scaleWords(format, n));
  if (format === 'int8' || format === 'q4_0' || format === 'q5_0') {
    for (let g = 0; g < x.length / 32; g++) {
      const max = signedMax(x, g * 32, g * 32 + 32);
      // An all-zero group gets d = +0 (max / −8 would be −0, and q5_0's d·q a −0 weight).
      const d =
        max === 0
          ? 0
          : f32ToF16Bits(format === 'int8' ? Math.abs(max) / 127 : max / (format === 'q4_0' ? -8 : -16));
      scales[g >> 1]! |= d << (g & 1 ? 16 : 0);
    }
  } else if (format === 'q4_1' || format === 'q5_1') {
    const L = format === 'q4_1' ? 15 : 31;
    for (let g = 0; g < x.length / 32; g++) {
      let [lo, hi] = [x[g * 32]!, x[g * 32]!];
      for (let j = g * 32; j < g * 32 + 32; j++) [lo, hi] = [Math.min(lo, x[j]!), Math.max(hi, x[j]!)];
      scales[g] = (f32ToF16Bits((hi - lo) / L) | (f32ToF16Bits(lo) << 16)) >>> 0;
    }
  } else if (format === 'iq4_nl') {
    for (let g = 0; g < x.length / 32; g++) {
      const max = signedMax(x, g * 32, g * 32 + 32);
      scales[g >> 1]! |= (max === 0 ? 0 : f32ToF16Bits(max / -127)) << (g & 1 ? 16 : 0);
    }
  } else if (format === 'q6_k') {
    q6kScales(x, scales);
  } else if (format === 'q3_k' || format === 'iq4_xs') {
    subScales6(x, scales, format);
  } else {
    if (importance !== undefined && importance.length !== cols)
      throw new InvalidInputError(`gridOf: importance has ${importance.length} weights for ${cols} columns`);
    // Per element: the importance of its column (the padding after the matrix counts for nothing).
    const weights = importance && new Float32Array(x.length);
    if (weights && importance) for (let i = 0; i < n; i++) weights[i] = importance[i % cols]!;
    if (format === 'int4') kQuantScales(x, scales, { bits: 4, sub: 32, scaleBits: 6 }, weights);
    else if (format === 'q5_k') kQuantScales(x, scales, { bits: 5, sub: 32, scaleBits: 6 }, weights);
    else kQuantScales(x, scales, { bits: 2, sub: 16, scaleBits: 4 }, weights);
  }
  return gridFromScales(format, rows, cols, scales);
}

/** The element of x[from, to) of largest magnitude, with its sign (the first of equals). */
function signedMax(x: Float32Array, from: number, to: number): number {
  let max = 0;
  for (let j = from; j < to; j++) if (Math.abs(x[j]!) > Math.abs(max)) max = x[j]!;
  return max;
}

/**
 * q6_k's scales for the zero-padded flat array x (see {@link gridOf}), written into `scales` in the
 * layout of {@link QuantizedMatrix}: per super-block s, f16 d in half s & 1 of word 9(s >> 1) and
 * its 16 int8 sub-scales in the four words from 9(s >> 1) + 1 + 4(s & 1).
 */
function q6kScales(x: Float32Array, scales: Uint32Array): void {
  const sub = new Float64Array(16);
  for (let s = 0; s < x.length / 256; s++) {
    for (let j = 0; j < 16; j++) sub[j] = signedMax(x, 256 * s + 16 * j, 256 * s + 16 * j + 16) / -32;
    let top = 0;
    for (const v of sub) if (Math.abs(v) > Math.abs(top)) top = v;
    const dh = top === 0 ? 0 : f32ToF16Bits(top / -128);
    const d = f16BitsToF32(dh);
    const t = 9 * (s >> 1);
    scales[t] = (scales[t]! | (dh << (s & 1 ? 16 : 0))) >>> 0;
    for (let j = 0; j < 16; j++) {
      const sc = d === 0 ? 0 : Math.max(-128, Math.min(127, Math.round(sub[j]! / d)));
      const w = t + 1 + 4 * (s & 1) + (j >> 2);
      scales[w] = (scales[w]! | ((sc & 0xff) << (8 * (j & 3)))) >>> 0;
    }
  }
}

/**
 * The scales of q3_k or iq4_xs (see {@link gridOf}) for the zero-padded flat array x, written into
 * `scales` in the layout of {@link QuantizedMatrix}: an f16 d per super-block and a 6-bit sub-scale
 * per sub-block of 16 (q3_k) or 32 (iq4_xs), d·(sc − 32) the sub-block's scale.
 */
function subScales6(x: Float32Array, scales: Uint32Array, format: 'q3_k' | 'iq4_xs'): void {
  const [size, lowest] = format === 'q3_k' ? [16, -4] : [32, -127];
  const n = 256 / size;
  const sub = new Float64Array(n);
  for (let s = 0; s < x.length / 256; s++) {
    for (let j = 0; j < n; j++) sub[j] = signedMax(x, 256 * s + size * j, 256 * s + size * (j + 1)) / lowest;
    let top = 0;
    for (const v of sub) if (Math.abs(v) > Math.abs(top)) top = v;
    const dh = top === 0 ? 0 : f32ToF16Bits(top / -32);
    const d = f16BitsToF32(dh);
    const sc = (j: number) => (d === 0 ? 0 : Math.max(-32, Math.min(31, Math.round(sub[j]! / d)))) + 32;
    if (format === 'iq4_xs') {
      let high = 0;
      let low = 0;
      for (let j = 0; j < 8; j++) {
        high |= (sc(j) >> 4) << (2 * j);
        low |= (sc(j) & 15) << (4 * j);
      }
      scales[2 * s] = (dh | (high << 16)) >>> 0;
      scales[2 * s + 1] = low >>> 0;
      continue;
    }
    const t = 7 * (s >> 1);
    scales[t] = (scales[t]! | (dh << (s & 1 ? 16 : 0))) >>> 0;
    const fields = scales.subarray(t + 1 + 3 * (s & 1), t + 4 + 3 * (s & 1));
    for (let j = 0; j < 16; j++) {
      const pos = 6 * j;
      const w = pos >> 5;
      fields[w] = (fields[w]! | (sc(j) << (pos & 31))) >>> 0;
      if ((pos & 31) + 6 > 32) fields[w + 1] = (fields[w + 1]! | (sc(j) >>> (32 - (pos & 31)))) >>> 0;
    }
  }
}

/** Fractions of each range end cut off by the coarse range search of a K-quant sub-block. */
const SHRINK = [0, 0.1, 0.2, 0.3];
/** Steps of the fine search around the best coarse cut. */
const FINE = [-0.05, 0, 0.05];

/**
 * Chooses the scales of K-quant super-blocks (int4: Q4_K, int2: Q2_K; see {@link gridOf}) for the
 * zero-padded flat array x and writes them into `scales` in the layout of {@link QuantizedMatrix}.
 */
function kQuantScales(
  x: Float32Array,
  scales: Uint32Array,
  o: { bits: number; sub: number; scaleBits: number },
  weights?: Float32Array,
): void {
  const L = (1 << o.bits) - 1;
  const S = (1 << o.scaleBits) - 1;
  const nsub = 256 / o.sub;
  const words = nsub === 8 ? 4 : 5;
  const d = new Float64Array(nsub);
  const m = new Float64Array(nsub);
  for (let s = 0; s < x.length / 256; s++) {
    const sb = x.subarray(256 * s, 256 * s + 256);
    const sw = weights?.subarray(256 * s, 256 * s + 256);
    for (let j = 0; j < nsub; j++) {
      const v = sb.subarray(j * o.sub, (j + 1) * o.sub);
      const vw = sw?.subarray(j * o.sub, (j + 1) * o.sub);
      let lo = 0;
      let hi = 0;
      for (const e of v) {
        lo = Math.min(lo, e);
        hi = Math.max(hi, e);
      }
      d[j] = (hi - lo) / L;
      m[j] = -lo;
      if (hi === lo) continue;
      // Coarse: cut 0 to 30% off either end; fine: ±5% around the best cut.
      let best = Number.POSITIVE_INFINITY;
      let bl = 0;
      let bh = 0;
      for (let pass = 0; pass < 2; pass++) {
        const [cl0, ch0] = [bl, bh];
        const cuts = pass === 0 ? SHRINK : FINE;
        for (const xl of cuts)
          for (const xh of cuts) {
            const cl = pass === 0 ? xl : cl0 + xl;
            const ch = pass === 0 ? xh : ch0 + xh;
            if (cl < 0 || ch < 0 || (pass === 1 && xl === 0 && xh === 0)) continue;
            const dj = (hi * (1 - ch) - lo * (1 - cl)) / L;
            const e = subError(v, dj, -lo * (1 - cl), L, vw);
            if (e < best) {
              best = e;
              bl = cl;
              bh = ch;
            }
          }
      }
      d[j] = (hi * (1 - bh) - lo * (1 - bl)) / L;
      m[j] = -lo * (1 - bl);
    }
    const Dh = f32ToF16Bits(Math.max(...d) / S);
    const Mh = f32ToF16Bits(Math.max(...m) / S);
    const D = f16BitsToF32(Dh);
    const M = f16BitsToF32(Mh);
    const out = scales.subarray(words * s, words * s + words);
    out[words - 1] = (Dh | (Mh << 16)) >>> 0;
    for (let j = 0; j < nsub; j++) {
      const v = sb.subarray(j * o.sub, (j + 1) * o.sub);
      const vw = sw?.subarray(j * o.sub, (j + 1) * o.sub);
      const sc0 = D === 0 ? 0 : Math.min(S, Math.round(d[j]! / D));
      const mn0 = M === 0 ? 0 : Math.min(S, Math.round(m[j]! / M));
      let [sc, mn] = [sc0, mn0];
      let best = subError(v, D * sc0, M * mn0, L, vw);
      for (const ds of [-1, 0, 1])
        for (const dm of [-1, 0, 1]) {
          const [sc1, mn1] = [sc0 + ds, mn0 + dm];
          if (sc1 < 0 || sc1 > S || mn1 < 0 || mn1 > S) continue;
          const e = subError(v, D * sc1, M * mn1, L, vw);
          if (e < best) [best, sc, mn] = [e, sc1, mn1];
        }
      writeSub(out, nsub, j, sc, mn);
    }
  }
}

/**
 * Squared error of a sub-block v on the grid a·q − b with each q ∈ [0, L] nearest (up to the
 * rounding of a multiply by 1/a at exact ties; a search only compares these sums), each term
 * weighted by `wt` if given.
 */
function subError(v: Float32Array, a: number, b: number, L: number, wt?: Float32Array): number {
  let e = 0;
  const inv = a === 0 ? 0 : 1 / a;
  for (let k = 0; k < v.length; k++) {
    const x = v[k]!;
    const q = Math.min(L, Math.max(0, Math.floor((x + b) * inv + 0.5)));
    const r = a * q - b - x;
    e += wt ? wt[k]! * r * r : r * r;
  }
  return e;
}
