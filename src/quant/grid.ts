// The quantization grid of an integer-format matrix: what its packed scales decode to (a scale and an
// offset per group or sub-block) and the code nearest a value on it.
import { InvalidInputError } from '../errors.js';
import { f16BitsToF32 } from '../gpu/half.js';
import { GEOMETRY, type IntFormat, IQ4_VALUES, latticeFormat, paddedLength, scaleWords } from './layout.js';

/**
 * The quantization grid of an integer-format matrix without its codes: element i dequantizes to
 * fround(scaleAt(i)·q − offsetAt(i)) for an integer code q ∈ [lo, hi] (int8: offset 0, q ∈
 * [−127, 127]; q4_0: scale d, offset 8d, q ∈ [0, 15]; iq4_nl, iq4_xs: q one of IQ4_VALUES (the
 * nearest code is the nearest of those); the others: a and b of
 * {@link QuantizedMatrix}, e.g. q6_k: a = d·sc, b = 0, q ∈ [−32, 31]). `scales` is the packed metadata as {@link encode} stores it.
 * Calibrated rounding (GPTQ) picks codes on this grid; {@link gridOf} is the round-to-nearest one.
 */
export interface MatrixGrid {
  readonly format: IntFormat;
  readonly rows: number;
  readonly cols: number;
  readonly lo: number;
  readonly hi: number;
  readonly scales: Uint32Array;
  scaleAt(i: number): number;
  offsetAt(i: number): number;
}

const CODE_RANGE: Readonly<Record<IntFormat, readonly [number, number]>> = {
  int8: [-127, 127],
  q4_0: [0, 15],
  q4_1: [0, 15],
  q5_0: [-16, 15],
  q5_1: [0, 31],
  int4: [0, 15],
  q5_k: [0, 31],
  q6_k: [-32, 31],
  q3_k: [-4, 3],
  iq4_nl: [-127, 113],
  iq4_xs: [-127, 113],
  // No code per weight (gridFromScales refuses them).
  iq2_xxs: [0, 0],
  iq2_xs: [0, 0],
  iq2_s: [0, 0],
  iq3_xxs: [0, 0],
  iq3_s: [0, 0],
  int2: [0, 3],
};

/**
 * The grid a packed `scales` array describes: each unit's (scale, offset) decoded once. `scales`
 * must hold {@link scaleWords} words.
 */
export function gridFromScales(
  format: IntFormat,
  rows: number,
  cols: number,
  scales: Uint32Array,
): MatrixGrid {
  if (latticeFormat(format))
    throw new InvalidInputError(`${format} matrix [${rows}, ${cols}]: a lattice format has no grid of codes`);
  const n = rows * cols;
  if (scales.length !== scaleWords(format, n))
    throw new InvalidInputError(
      `${format} matrix [${rows}, ${cols}]: scales has ${scales.length} words, expected ${scaleWords(format, n)}`,
    );
  const { unit } = GEOMETRY[format];
  const units = paddedLength(format, n) / unit;
  const a = new Float32Array(units);
  const b = new Float32Array(units);
  const half = (word: number, hi: boolean) => f16BitsToF32(hi ? word >>> 16 : word & 0xffff);
  for (let u = 0; u < units; u++) {
    if (format === 'int8' || format === 'q4_0' || format === 'q5_0' || format === 'iq4_nl') {
      const d = half(scales[u >> 1]!, (u & 1) === 1);
      a[u] = d;
      b[u] = format === 'q4_0' ? 8 * d : 0;
    } else if (format === 'q4_1' || format === 'q5_1') {
      a[u] = half(scales[u]!, false);
      b[u] = -half(scales[u]!, true);
    } else if (format === 'int4' || format === 'q5_k') {
      const s = u >> 3;
      const j = u & 7;
      const w = scales.subarray(4 * s, 4 * s + 4);
      a[u] = half(w[3]!, false) * getBits(w, 6 * j, 6);
      b[u] = half(w[3]!, true) * getBits(w, 6 * (8 + j), 6);
    } else if (format === 'iq4_xs') {
      const s = u >> 3;
      const j = u & 7;
      const ls = ((scales[2 * s + 1]! >>> (4 * j)) & 15) | (((scales[2 * s]! >>> (16 + 2 * j)) & 3) << 4);
      a[u] = half(scales[2 * s]!, false) * (ls - 32);
      b[u] = 0;
    } else if (format === 'q3_k') {
      const s = u >> 4;
      const j = u & 15;
      const t = 7 * (s >> 1);
      const base = t + 1 + 3 * (s & 1);
      a[u] = half(scales[t]!, (s & 1) === 1) * (getBits(scales.subarray(base, base + 3), 6 * j, 6) - 32);
      b[u] = 0;
    } else if (format === 'q6_k') {
      const s = u >> 4;
      const j = u & 15;
      const t = 9 * (s >> 1);
      const sc = ((scales[t + 1 + 4 * (s & 1) + (j >> 2)]! >>> (8 * (j & 3))) << 24) >> 24;
      a[u] = half(scales[t]!, (s & 1) === 1) * sc;
      b[u] = 0;
    } else {
      const s = u >> 4;
      const j = u & 15;
      const byte = (scales[5 * s + (j >> 2)]! >>> (8 * (j & 3))) & 0xff;
      a[u] = half(scales[5 * s + 4]!, false) * (byte & 15);
      b[u] = half(scales[5 * s + 4]!, true) * (byte >> 4);
    }
  }
  const [lo, hi] = CODE_RANGE[format];
  const shift = Math.log2(unit);
  return {
    format,
    rows,
    cols,
    lo,
    hi,
    scales,
    scaleAt: (i) => a[i >> shift]!,
    offsetAt: (i) => b[i >> shift]!,
  };
}

/**
 * The code of `grid` nearest to v at flat index i: clamp(round((v + offset) / scale), lo, hi),
 * rounding half away from zero; the middle code when the scale is 0 (every code gives −offset).
 */
export function nearestCode(grid: MatrixGrid, i: number, v: number): number {
  const s = grid.scaleAt(i);
  if (grid.format === 'iq4_nl' || grid.format === 'iq4_xs') return nearestIq4(s === 0 ? 0 : v / s);
  if (s === 0) return (grid.lo + grid.hi + 1) >> 1;
  return clamp(roundAway((v + grid.offsetAt(i)) / s), grid.lo, grid.hi);
}

/** The {@link IQ4_VALUES} value nearest t (the lower of two equally near). */
function nearestIq4(t: number): number {
  let best = IQ4_VALUES[0]!;
  for (const q of IQ4_VALUES) if (Math.abs(q - t) < Math.abs(best - t)) best = q;
  return best;
}

/** `width` bits at bit `pos` of a little-endian field array in u32 words (width < 32). */
export function getBits(words: Uint32Array, pos: number, width: number): number {
  const w = pos >> 5;
  const off = pos & 31;
  let v = words[w]! >>> off;
  if (off + width > 32) v |= words[w + 1]! << (32 - off);
  return v & ((1 << width) - 1);
}

/** v clamped to [lo, hi]. */
function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

/** Round half away from zero (Math.round rounds -2.5 to -2). */
function roundAway(v: number): number {
  return Math.sign(v) * Math.round(Math.abs(v));
}
