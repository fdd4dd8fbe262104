// Weight formats of weft's matmul kernels: the byte layouts, the round-to-nearest scale choice
// (gridOf), packing (encode, quantize), the reference unpacking (decode, dequantize) and sizes.
// Pure TypeScript, no GPU: loaders and tests import it.
import { InvalidInputError } from '../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';

/**
 * Storage format of a weight matrix. Float: `f32`, `f16`. Integer, with f16 scales inside flat
 * blocks (see {@link QuantizedMatrix} for the byte layouts): `int8` (llama.cpp Q8_0, 8.5 bits per
 * weight), `q4_0` (GGUF Q4_0 as stored, 4.5 bits; not a user-selectable quant), `int4` (Q4_K
 * semantics, 4.5 bits) and `int2` (Q2_K semantics, 2.625 bits).
 */
export type WeightFormat = 'f32' | 'f16' | 'int8' | 'q4_0' | 'int4' | 'int2';

/** The integer formats: the ones with a {@link MatrixGrid}. */
export type IntFormat = 'int8' | 'q4_0' | 'int4' | 'int2';

/**
 * A weight matrix W [rows = N out features, cols = K in features], packed in two u32 arrays.
 *
 * Every layout is FLAT over the row-major matrix: element (r, k) has flat index i = r·K + k, and
 * groups and super-blocks run over i (so one may span a row boundary). The flat array is padded
 * with zeros at the end to a whole number of groups / super-blocks. "f16(x)" below is an IEEE
 * binary16 bit pattern; `fround` rounds to f32; every product named exact is exact in f32.
 *
 * - `f32`: data[i] = the f32 bits of w_i. No scales.
 * - `f16`: half (i & 1) of data[i >> 1] (low half for even i) = f16(w_i) (K even). No scales.
 * - `int8` (Q8_0): byte (i & 3) of data[i >> 2] = q_i, two's complement, q ∈ [−127, 127].
 *   Group g = i >> 5 (32 elements): f16 d_g in the low half of scales[g >> 1] for even g, the high
 *   half for odd g. w_i = f32(d_g)·q_i (exact).
 * - `q4_0` (GGUF Q4_0): nibble (i & 7) (bits 4·(i & 7)) of data[i >> 3] = q_i ∈ [0, 15]; scales
 *   as int8 (one f16 d per 32). w_i = f32(d_g)·(q_i − 8) (exact).
 * - `int4` (Q4_K): codes as q4_0, q ∈ [0, 15]. Super-block s = i >> 8 (256 elements) of 8
 *   sub-blocks j = (i >> 5) & 7 of 32. scales[4s .. 4s+3]: words 0–2 are a 96-bit little-endian
 *   field array (bits 0–31 in word 0, …) holding the 6-bit sub-scale sc_j at bit 6·j and the 6-bit
 *   sub-min mn_j at bit 6·(8 + j) (a field may straddle two words); word 3 = f16 D (low half) |
 *   f16 M (high half). w_i = fround(a·q_i − b), a = f32(D)·sc_j, b = f32(M)·mn_j (a, b and a·q
 *   exact: one rounding, an fma gives the same).
 * - `int2` (Q2_K): bits 2·(i & 15) of data[i >> 4] = q_i ∈ [0, 3]. Super-block s = i >> 8 of 16
 *   sub-blocks j = (i >> 4) & 15 of 16. scales[5s .. 5s+4]: byte (j & 3) of word (j >> 2) =
 *   sc_j | mn_j << 4 (4 bits each); word 4 = f16 D | f16 M << 16. w_i = fround(a·q_i − b) with
 *   a, b as int4.
 */
export interface QuantizedMatrix {
  format: WeightFormat;
  /** N: output features. */
  rows: number;
  /** K: input features. */
  cols: number;
  /** The codes (or float bits), flat, padded to whole groups / super-blocks. */
  data: Uint32Array;
  /** The block metadata (f16 scales, sub-scales) of the integer formats. */
  scales?: Uint32Array;
}

/**
 * The quantization grid of an integer-format matrix without its codes: element i dequantizes to
 * fround(scaleAt(i)·q − offsetAt(i)) for an integer code q ∈ [lo, hi] (int8: offset 0, q ∈
 * [−127, 127]; q4_0: scale d, offset 8d, q ∈ [0, 15]; int4 and int2: a and b of
 * {@link QuantizedMatrix}). `scales` is the packed metadata as {@link encode} stores it.
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

/** Bits of one code (or float) of each format, before scales. */
export const CODE_BITS: Readonly<Record<WeightFormat, number>> = {
  f32: 32,
  f16: 16,
  int8: 8,
  q4_0: 4,
  int4: 4,
  int2: 2,
};

/**
 * Block geometry of a format: `block` elements share `scaleWords` u32 of metadata (int8, q4_0:
 * two groups of 32 per word; int4, int2: one super-block of 256), and `unit` elements share one
 * (scale, offset) pair. Float formats: block 2 (one f16 word), no metadata.
 */
interface Geometry {
  readonly block: number;
  readonly scaleWords: number;
  readonly unit: number;
}

const GEOMETRY: Readonly<Record<WeightFormat, Geometry>> = {
  f32: { block: 1, scaleWords: 0, unit: 1 },
  f16: { block: 2, scaleWords: 0, unit: 1 },
  int8: { block: 64, scaleWords: 1, unit: 32 },
  q4_0: { block: 64, scaleWords: 1, unit: 32 },
  int4: { block: 256, scaleWords: 4, unit: 32 },
  int2: { block: 256, scaleWords: 5, unit: 16 },
};

/**
 * WGSL type the matmul kernels read one format's codes as (matmul.wgsl, matmul_w8a8.wgsl): one
 * 16-element block per load where a block is 16 bytes or less (int8, q4_0, int4, int2), vec4<u32>
 * for the wider floats. matmul.wgsl's split-K layout reads q4_0, int4 and int2 as vec4<u32> where
 * K allows (2 or 4 blocks per load, see `wideLoads` in matmul.ts). Every part's data array is a
 * whole number of these, and of vec4<u32>.
 */
export function codeWordType(format: WeightFormat): string {
  const bits = CODE_BITS[format];
  return bits >= 8 ? 'vec4<u32>' : bits === 4 ? 'vec2<u32>' : 'u32';
}

/** True for the integer formats (those with scales). */
export function isIntFormat(format: WeightFormat): format is IntFormat {
  return format !== 'f32' && format !== 'f16';
}

/**
 * Elements at which the data and the scales of a format both start on a u32: a row range of a
 * matrix can be stored on its own (a part, see `uploadMatrix`) when its first flat index is a
 * multiple of this (int8, q4_0: 64, two f16 scales per word; int4, int2: 256; f32: 1; f16: 2).
 */
export function splitAlign(format: WeightFormat): number {
  return GEOMETRY[format].block;
}

/** Elements the flat array holds for `n` weights: padded to whole groups / super-blocks. */
function paddedLength(format: WeightFormat, n: number): number {
  const unit = format === 'int4' || format === 'int2' ? 256 : isIntFormat(format) ? 32 : 1;
  return Math.ceil(n / unit) * unit;
}

/** u32 words of the `data` array of `n` flat elements (codes or floats). */
export function dataWords(format: WeightFormat, n: number): number {
  return (paddedLength(format, n) * CODE_BITS[format]) / 32;
}

/** u32 words of the `scales` array of `n` flat elements (0 for float formats). */
export function scaleWords(format: WeightFormat, n: number): number {
  const g = GEOMETRY[format];
  if (g.scaleWords === 0) return 0;
  return format === 'int4' || format === 'int2'
    ? (paddedLength(format, n) / 256) * g.scaleWords
    : Math.ceil(paddedLength(format, n) / 64);
}

/**
 * Throws {@link InvalidInputError} unless (format, rows, cols) can be packed: positive integer
 * sizes, and cols even for f16. (The matmul kernels also need cols % 16 == 0; `uploadMatrix`
 * checks that.)
 */
export function checkShape(format: WeightFormat, rows: number, cols: number): void {
  const bad = (why: string) => new InvalidInputError(`${format} matrix [${rows}, ${cols}]: ${why}`);
  if (!(format in GEOMETRY)) throw bad('unknown weight format');
  if (!Number.isInteger(rows) || rows < 1 || !Number.isInteger(cols) || cols < 1)
    throw bad('rows and cols must be positive integers');
  if (format === 'f16' && cols % 2 !== 0) throw bad('f16 needs an even cols');
}

/**
 * Bytes a matmul reads for this matrix: the `data` and `scales` arrays as packed (padding
 * included). This is the figure the benchmark divides by time to get effective bandwidth.
 */
export function packedBytes(format: WeightFormat, rows: number, cols: number): number {
  const n = rows * cols;
  return 4 * (dataWords(format, n) + scaleWords(format, n));
}

/**
 * Bits per weight of a [rows, cols] matrix, from {@link packedBytes}: 32, 16, then 8.5 (int8),
 * 4.5 (q4_0, int4) and 2.625 (int2) when rows·cols fills whole super-blocks, slightly more
 * otherwise (the padding of the last block).
 */
export function bitsPerWeight(format: WeightFormat, rows: number, cols: number): number {
  return (packedBytes(format, rows, cols) * 8) / (rows * cols);
}

const CODE_RANGE: Readonly<Record<IntFormat, readonly [number, number]>> = {
  int8: [-127, 127],
  q4_0: [0, 15],
  int4: [0, 15],
  int2: [0, 3],
};

/**
 * The grid a packed `scales` array describes: each unit's (scale, offset) decoded once. `scales`
 * must hold {@link scaleWords} words.
 */
function gridFromScales(format: IntFormat, rows: number, cols: number, scales: Uint32Array): MatrixGrid {
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
    if (format === 'int8' || format === 'q4_0') {
      const d = half(scales[u >> 1]!, (u & 1) === 1);
      a[u] = d;
      b[u] = format === 'q4_0' ? 8 * d : 0;
    } else if (format === 'int4') {
      const s = u >> 3;
      const j = u & 7;
      const w = scales.subarray(4 * s, 4 * s + 4);
      a[u] = half(w[3]!, false) * getBits(w, 6 * j, 6);
      b[u] = half(w[3]!, true) * getBits(w, 6 * (8 + j), 6);
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
 * The round-to-nearest grid of `w` [rows, cols] (row-major) in an integer format: the scales are
 * chosen, the codes are not (see {@link nearestCode}, {@link encode}).
 * - int8: d = f16(max|w| / 127) per group of 32.
 * - q4_0 (llama.cpp's RTN): d = f16(max / −8), max the signed element of largest magnitude.
 * - int4 / int2: per sub-block, (d ≥ 0, m ≥ 0) with x ≈ d·q − m from a small search that shrinks
 *   the range [min(0, lo), max(0, hi)] at each end and keeps the least squared error; then
 *   D = f16(max d / S), M = f16(max m / S) (S = 63 for int4's 6-bit sub-scales, 15 for int2's
 *   4-bit ones), sc = min(S, round(d / D)), mn likewise, and finally sc and mn each moved by ±1
 *   where that lowers the sub-block's error.
 * `importance` [cols] weighs each column's squared error in those searches (int4 / int2 only): the
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
  if (w.length !== rows * cols)
    throw new InvalidInputError(`gridOf: w has ${w.length} elements, expected ${rows} * ${cols}`);
  const n = rows * cols;
  const x = new Float32Array(paddedLength(format, n));
  x.set(w);
  const scales = new Uint32Array(scaleWords(format, n));
  if (format === 'int8' || format === 'q4_0') {
    for (let g = 0; g < x.length / 32; g++) {
      let max = 0;
      for (let j = g * 32; j < g * 32 + 32; j++) if (Math.abs(x[j]!) > Math.abs(max)) max = x[j]!;
      const d = f32ToF16Bits(format === 'int8' ? Math.abs(max) / 127 : max / -8);
      scales[g >> 1]! |= d << (g & 1 ? 16 : 0);
    }
  } else {
    if (importance !== undefined && importance.length !== cols)
      throw new InvalidInputError(`gridOf: importance has ${importance.length} weights for ${cols} columns`);
    // Per element: the importance of its column (the padding after the matrix counts for nothing).
    const weights = importance && new Float32Array(x.length);
    if (weights && importance) for (let i = 0; i < n; i++) weights[i] = importance[i % cols]!;
    if (format === 'int4') kQuantScales(x, scales, { bits: 4, sub: 32, scaleBits: 6 }, weights);
    else kQuantScales(x, scales, { bits: 2, sub: 16, scaleBits: 4 }, weights);
  }
  return gridFromScales(format, rows, cols, scales);
}

/**
 * The code of `grid` nearest to v at flat index i: clamp(round((v + offset) / scale), lo, hi),
 * rounding half away from zero; the middle code when the scale is 0 (every code gives −offset).
 */
export function nearestCode(grid: MatrixGrid, i: number, v: number): number {
  const s = grid.scaleAt(i);
  if (s === 0) return (grid.lo + grid.hi + 1) >> 1;
  return clamp(roundAway((v + grid.offsetAt(i)) / s), grid.lo, grid.hi);
}

/**
 * Packs integer codes [rows·cols] (flat, one per element, each in [grid.lo, grid.hi]) on `grid`
 * into a {@link QuantizedMatrix}. The padding after the last element gets the code nearest 0.
 */
export function encode(grid: MatrixGrid, codes: Int32Array): QuantizedMatrix {
  const { format, rows, cols, lo, hi } = grid;
  const n = rows * cols;
  if (codes.length !== n)
    throw new InvalidInputError(`encode: ${codes.length} codes for a [${rows}, ${cols}] matrix`);
  const bits = CODE_BITS[format];
  const per = 32 / bits;
  const mask = (1 << bits) - 1;
  const shift = Math.log2(per);
  const data = new Uint32Array(dataWords(format, n));
  for (let i = 0; i < data.length * per; i++) {
    const q = i < n ? codes[i]! : nearestCode(grid, i, 0);
    if (!Number.isInteger(q) || q < lo || q > hi)
      throw new InvalidInputError(`encode: code ${q} at ${i} is outside [${lo}, ${hi}] of ${format}`);
    data[i >> shift]! |= (q & mask) << (bits * (i & (per - 1)));
  }
  return { format, rows, cols, data, scales: grid.scales.slice() };
}

/** The grid and the codes [rows·cols] of a packed integer matrix: the inverse of {@link encode}. */
export function decode(q: QuantizedMatrix): { grid: MatrixGrid; codes: Int32Array } {
  const { format, rows, cols, data, scales } = q;
  checkShape(format, rows, cols);
  if (!isIntFormat(format)) throw new InvalidInputError(`decode: ${format} is not an integer format`);
  if (!scales) throw new InvalidInputError(`decode: a ${format} matrix needs scales`);
  checkWords('decode', q);
  const grid = gridFromScales(format, rows, cols, scales);
  const bits = CODE_BITS[format];
  const per = 32 / bits;
  const mask = (1 << bits) - 1;
  const shift = Math.log2(per);
  const n = rows * cols;
  const codes = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const raw = (data[i >> shift]! >>> (bits * (i & (per - 1)))) & mask;
    codes[i] = format === 'int8' ? (raw << 24) >> 24 : raw;
  }
  return { grid, codes };
}

/**
 * Packs `w` [rows, cols] row-major into `format`: floats bit for bit (f16 rounds to nearest
 * even), integer formats as encode(gridOf(w), nearest codes).
 */
export function quantize(w: Float32Array, rows: number, cols: number, format: WeightFormat): QuantizedMatrix {
  checkShape(format, rows, cols);
  if (w.length !== rows * cols)
    throw new InvalidInputError(`quantize: w has ${w.length} elements, expected ${rows} * ${cols}`);
  if (format === 'f32') return { format, rows, cols, data: new Uint32Array(w.slice().buffer) };
  if (format === 'f16') {
    const data = new Uint32Array(w.length / 2);
    for (let i = 0; i < data.length; i++)
      data[i] = (f32ToF16Bits(w[2 * i]!) | (f32ToF16Bits(w[2 * i + 1]!) << 16)) >>> 0;
    return { format, rows, cols, data };
  }
  const grid = gridOf(w, rows, cols, format);
  const codes = new Int32Array(w.length);
  for (let i = 0; i < w.length; i++) codes[i] = nearestCode(grid, i, w[i]!);
  return encode(grid, codes);
}

/**
 * The reference unpacking, which the GPU kernels match: W [rows, cols] as f32, element i =
 * fround(scaleAt(i)·q_i − offsetAt(i)) for integer formats.
 */
export function dequantize(q: QuantizedMatrix): Float32Array {
  const { format, rows, cols, data } = q;
  checkShape(format, rows, cols);
  const n = rows * cols;
  if (format === 'f32') {
    checkWords('dequantize', q);
    return new Float32Array(data.buffer, data.byteOffset, n).slice();
  }
  if (format === 'f16') {
    checkWords('dequantize', q);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = f16BitsToF32((data[i >> 1]! >>> (i & 1 ? 16 : 0)) & 0xffff);
    return out;
  }
  const { grid, codes } = decode(q);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = grid.scaleAt(i) * codes[i]! - grid.offsetAt(i);
  return out;
}

// IEEE binary16 conversions live with the other float formats.
export { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';

function checkWords(where: string, q: QuantizedMatrix): void {
  const n = q.rows * q.cols;
  if (q.data.length !== dataWords(q.format, n))
    throw new InvalidInputError(
      `${where}: ${q.format} [${q.rows}, ${q.cols}] data has ${q.data.length} words, expected ${dataWords(q.format, n)}`,
    );
}

/** `width` bits at bit `pos` of a little-endian field array in u32 words (width < 32). */
function getBits(words: Uint32Array, pos: number, width: number): number {
  const w = pos >> 5;
  const off = pos & 31;
  let v = words[w]! >>> off;
  if (off + width > 32) v |= words[w + 1]! << (32 - off);
  return v & ((1 << width) - 1);
}

function setBits(words: Uint32Array, pos: number, width: number, value: number): void {
  const w = pos >> 5;
  const off = pos & 31;
  words[w]! |= value << off;
  if (off + width > 32) words[w + 1]! |= value >>> (32 - off);
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

/** Writes sub-block j's (sc, mn) into one super-block's zeroed scale words (int4: 8 subs, int2: 16). */
function writeSub(out: Uint32Array, nsub: number, j: number, sc: number, mn: number): void {
  if (nsub === 8) {
    setBits(out, 6 * j, 6, sc);
    setBits(out, 6 * (8 + j), 6, mn);
  } else {
    out[j >> 2]! |= (sc | (mn << 4)) << (8 * (j & 3));
  }
}

/**
 * The integers behind a K-quant grid (int4, int2), one entry per super-block s (`D`, `M`: f16 bit
 * patterns) and per sub-block u = 256·s / sub + j (`sc`, `mn` ∈ [0, 2^scaleBits − 1]): unit u
 * dequantizes q to fround(f32(D)·sc·q − f32(M)·mn). {@link kQuantGrid} packs them back; calibrated
 * rounding (quant/refine) searches over them.
 */
export interface KQuantParams {
  readonly format: 'int4' | 'int2';
  readonly rows: number;
  readonly cols: number;
  /** Elements per sub-block: 32 (int4) or 16 (int2). */
  readonly sub: number;
  /** Largest sc or mn: 63 (int4) or 15 (int2). */
  readonly maxScale: number;
  readonly D: Uint16Array;
  readonly M: Uint16Array;
  readonly sc: Uint8Array;
  readonly mn: Uint8Array;
}

/** The {@link KQuantParams} of an int4 or int2 grid (copies, free to change). */
export function kQuantParams(grid: MatrixGrid): KQuantParams {
  const { format, rows, cols, scales } = grid;
  if (format !== 'int4' && format !== 'int2')
    throw new InvalidInputError(`kQuantParams: ${format} is not a K-quant format`);
  const sub = format === 'int4' ? 32 : 16;
  const nsub = 256 / sub;
  const words = nsub === 8 ? 4 : 5;
  const blocks = scales.length / words;
  const p = {
    format,
    rows,
    cols,
    sub,
    maxScale: format === 'int4' ? 63 : 15,
    D: new Uint16Array(blocks),
    M: new Uint16Array(blocks),
    sc: new Uint8Array(blocks * nsub),
    mn: new Uint8Array(blocks * nsub),
  };
  for (let s = 0; s < blocks; s++) {
    const w = scales.subarray(words * s, words * s + words);
    p.D[s] = w[words - 1]! & 0xffff;
    p.M[s] = w[words - 1]! >>> 16;
    for (let j = 0; j < nsub; j++) {
      const u = s * nsub + j;
      if (nsub === 8) {
        p.sc[u] = getBits(w, 6 * j, 6);
        p.mn[u] = getBits(w, 6 * (8 + j), 6);
      } else {
        const byte = (w[j >> 2]! >>> (8 * (j & 3))) & 0xff;
        p.sc[u] = byte & 15;
        p.mn[u] = byte >> 4;
      }
    }
  }
  return p;
}

/** The grid of K-quant parameters, packed in the layout of {@link QuantizedMatrix}: the inverse of {@link kQuantParams}. */
export function kQuantGrid(p: KQuantParams): MatrixGrid {
  const nsub = 256 / p.sub;
  const words = nsub === 8 ? 4 : 5;
  const scales = new Uint32Array(scaleWords(p.format, p.rows * p.cols));
  if (p.D.length * words !== scales.length || p.sc.length !== p.D.length * nsub)
    throw new InvalidInputError(
      `kQuantGrid: ${p.D.length} super-blocks and ${p.sc.length} sub-blocks for ${p.format} [${p.rows}, ${p.cols}]`,
    );
  for (let s = 0; s < p.D.length; s++) {
    const out = scales.subarray(words * s, words * s + words);
    out[words - 1] = (p.D[s]! | (p.M[s]! << 16)) >>> 0;
    for (let j = 0; j < nsub; j++) {
      const u = s * nsub + j;
      if (p.sc[u]! > p.maxScale || p.mn[u]! > p.maxScale)
        throw new InvalidInputError(
          `kQuantGrid: sub-block ${u} has sc ${p.sc[u]}, mn ${p.mn[u]} > ${p.maxScale}`,
        );
      writeSub(out, nsub, j, p.sc[u]!, p.mn[u]!);
    }
  }
  return gridFromScales(p.format, p.rows, p.cols, scales);
}

/**
 * Squared error of a sub-block v on the grid a·q − b with each q ∈ [0, L] nearest (up to the
 * rounding of a multiply by 1/a at exact ties; a search only compares these sums).
 */
/** Squared error of rounding `v` on the grid a·q − b, q ∈ [0, L]; each term weighted by `wt` if given. */
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

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

/** Round half away from zero (Math.round rounds -2.5 to -2). */
function roundAway(v: number): number {
  return Math.sign(v) * Math.round(Math.abs(v));
}

/**
 * Rows per aligned step of a [rows, cols] matrix in `format`: the fewest rows whose elements are a
 * multiple of {@link splitAlign}, so row ranges that start on multiples of it start on a word of
 * both packed arrays (the parts of `uploadMatrix`, the slices a loader packs alone).
 */
export function alignedRowStep(format: WeightFormat, cols: number): number {
  const align = splitAlign(format);
  return align / gcd(cols, align);
}

/**
 * The word ranges [begin, end) of `data` and of `scales` that hold rows [row0, row0 + rows) of a
 * packed [N, K] matrix. row0·K must be a multiple of {@link splitAlign}, and so must
 * (row0 + rows)·K unless the range runs to the last row (it then keeps the padding): throws
 * {@link InvalidInputError} otherwise. A reader can read those words alone (see {@link sliceRows}).
 */
export function rowRangeWords(
  format: WeightFormat,
  N: number,
  K: number,
  row0: number,
  rows: number,
): { data: readonly [number, number]; scales: readonly [number, number] } {
  const align = splitAlign(format);
  const end = row0 + rows;
  if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || end > N)
    throw new InvalidInputError(`sliceRows: rows [${row0}, ${end}) of a ${N}-row matrix`);
  if ((row0 * K) % align !== 0 || (end < N && (end * K) % align !== 0))
    throw new InvalidInputError(
      `sliceRows: ${format} rows [${row0}, ${end}) of K = ${K} do not start and end on a multiple of ${align} elements`,
    );
  // At the last row, count(N·K) is the whole array, padding included.
  const words = (count: (n: number) => number) => [count(row0 * K), count(end * K)] as const;
  return { data: words((n) => dataWords(format, n)), scales: words((n) => scaleWords(format, n)) };
}

/**
 * Rows [row0, row0 + rows) of a packed matrix as a matrix of its own (views of `q`'s arrays, no
 * copy), at the word ranges of {@link rowRangeWords} (whose alignment rules it throws on).
 */
export function sliceRows(q: QuantizedMatrix, row0: number, rows: number): QuantizedMatrix {
  const { format, rows: N, cols: K } = q;
  const at = rowRangeWords(format, N, K, row0, rows);
  const slice: QuantizedMatrix = { format, rows, cols: K, data: q.data.subarray(...at.data) };
  if (q.scales) slice.scales = q.scales.subarray(...at.scales);
  return slice;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/**
 * The matrices `pieces` (one format, one cols) stacked by rows into one: a matmul over it gives
 * output rows [piece 0 | piece 1 | ...] (q, k and v projections as one). Every piece but the last
 * must hold a multiple of {@link splitAlign} elements (rows·cols), so the next one starts on a whole
 * group pair / super-block and the packed arrays simply follow each other; throws
 * {@link InvalidInputError} otherwise (the caller then keeps the matrices apart).
 */
export function concatRows(pieces: readonly QuantizedMatrix[]): QuantizedMatrix {
  const first = pieces[0];
  if (!first) throw new InvalidInputError('concatRows: no matrices');
  const { format, cols } = first;
  const align = splitAlign(format);
  pieces.forEach((q, i) => {
    if (q.format !== format || q.cols !== cols)
      throw new InvalidInputError(
        `concatRows: piece ${i} is ${q.format} [${q.rows}, ${q.cols}], piece 0 is ${format} with cols ${cols}`,
      );
    checkWords('concatRows', q);
    if (i < pieces.length - 1 && (q.rows * cols) % align !== 0)
      throw new InvalidInputError(
        `concatRows: piece ${i} of ${format} holds ${q.rows} * ${cols} elements, not a multiple of ${align}`,
      );
  });
  const join = (arrays: Uint32Array[]) => {
    const out = new Uint32Array(arrays.reduce((n, a) => n + a.length, 0));
    let at = 0;
    for (const a of arrays) {
      out.set(a, at);
      at += a.length;
    }
    return out;
  };
  const rows = pieces.reduce((n, q) => n + q.rows, 0);
  const joined: QuantizedMatrix = { format, rows, cols, data: join(pieces.map((q) => q.data)) };
  if (isIntFormat(format)) joined.scales = join(pieces.map((q) => q.scales ?? new Uint32Array(0)));
  return joined;
}
