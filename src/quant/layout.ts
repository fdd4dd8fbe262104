// The weight formats and their byte layouts: the format names, the block geometry of each, and the
// sizes it gives (words of the packed arrays, bytes, bits per weight, split alignment). Pure
// TypeScript; the rest of the codec (grid.ts, rtn.ts, kquant.ts, codec.ts, rows.ts) builds on it.
import { InvalidInputError } from '../errors.js';

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
export interface Geometry {
  readonly block: number;
  readonly scaleWords: number;
  readonly unit: number;
}

/** The {@link Geometry} of each format. */
export const GEOMETRY: Readonly<Record<WeightFormat, Geometry>> = {
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
export function paddedLength(format: WeightFormat, n: number): number {
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

/**
 * Throws {@link InvalidInputError} (naming `where`) unless `q.data` holds {@link dataWords} words
 * for its format and size.
 */
export function checkWords(where: string, q: QuantizedMatrix): void {
  const n = q.rows * q.cols;
  if (q.data.length !== dataWords(q.format, n))
    throw new InvalidInputError(
      `${where}: ${q.format} [${q.rows}, ${q.cols}] data has ${q.data.length} words, expected ${dataWords(q.format, n)}`,
    );
}
