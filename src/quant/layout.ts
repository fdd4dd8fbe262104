// The weight formats and their byte layouts: the format names, the block geometry of each, and the
// sizes it gives (words of the packed arrays, bytes, bits per weight, split alignment). Pure
// TypeScript; the rest of the codec (grid.ts, rtn.ts, kquant.ts, codec.ts, rows.ts) builds on it.
import { InvalidInputError } from '../errors.js';

/**
 * Storage format of a weight matrix. Float: `f32`, `f16`. Integer, with f16 scales inside flat
 * blocks (see {@link QuantizedMatrix} for the byte layouts): `int8` (llama.cpp Q8_0, 8.5 bits per
 * weight), `int4` (Q4_K semantics, 4.5 bits) and `int2` (Q2_K semantics, 2.625 bits); and the
 * GGUF block types a file's matrices are placed in as stored ({@link GgufOnlyFormat}): `q4_0`
 * (Q4_0, 4.5 bits), `q4_1` (Q4_1, 5), `q5_0` (Q5_0, 5.5), `q5_1` (Q5_1, 6), `q5_k` (Q5_K, 5.5),
 * `q6_k` (Q6_K, 6.5625), `q3_k` (Q3_K, 3.4375), `iq4_nl` (IQ4_NL, 4.5) and `iq4_xs` (IQ4_XS, 4.25);
 * and the lattice i-quants ({@link LatticeFormat}) `iq2_xxs` (2.0625), `iq2_xs` (2.3125), `iq2_s`
 * (2.5625), `iq3_xxs` (3.0625) and `iq3_s` (3.4375).
 */
export type WeightFormat =
  | 'f32'
  | 'f16'
  | 'int8'
  | 'q4_0'
  | 'q4_1'
  | 'q5_0'
  | 'q5_1'
  | 'int4'
  | 'q5_k'
  | 'q6_k'
  | 'q3_k'
  | 'iq4_nl'
  | 'iq4_xs'
  | 'iq2_xxs'
  | 'iq2_xs'
  | 'iq2_s'
  | 'iq3_xxs'
  | 'iq3_s'
  | 'int2';

/** The integer formats: the ones with a {@link MatrixGrid}. */
export type IntFormat = Exclude<WeightFormat, 'f32' | 'f16'>;

/**
 * The formats that hold a GGUF block type as stored and nothing else weft makes on its own (weft-q
 * checkpoints do not store them; asked of another model they round to nearest, as llama.cpp's
 * reference quantizers do).
 */
export type GgufOnlyFormat =
  | 'q4_0'
  | 'q4_1'
  | 'q5_0'
  | 'q5_1'
  | 'q5_k'
  | 'q6_k'
  | 'q3_k'
  | 'iq4_nl'
  | 'iq4_xs'
  | LatticeFormat;

/**
 * The GGUF i-quants whose weights are vectors of a lattice codebook (8 or 4 weights per entry,
 * src/quant/iq-grids.ts) with sign bits and sub-block scales: there is no code per weight, so no
 * {@link MatrixGrid}; weft places a file's blocks as stored and decodes them in the kernels, and
 * does not quantize to them itself (`weft export-gguf --type` writes them).
 */
export type LatticeFormat = 'iq2_xxs' | 'iq2_xs' | 'iq2_s' | 'iq3_xxs' | 'iq3_s';

/** Whether `format` is a {@link LatticeFormat}. */
export function latticeFormat(format: WeightFormat): format is LatticeFormat {
  return (
    format === 'iq2_xxs' ||
    format === 'iq2_xs' ||
    format === 'iq2_s' ||
    format === 'iq3_xxs' ||
    format === 'iq3_s'
  );
}

/**
 * The 16 values a 4-bit code of `iq4_nl` and `iq4_xs` stands for (llama.cpp's `kvalues_iq4nl`, a
 * non-uniform grid denser near 0; part of the GGUF format): the code of those formats, as
 * {@link getCode} returns it and the grid multiplies it, is the value, not the nibble.
 */
export const IQ4_VALUES: readonly number[] = [
  -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/** Nibble of each {@link IQ4_VALUES} value (by value + 127); −1 for the others. */
const IQ4_NIBBLE = new Int8Array(241).fill(-1);
for (const [k, v] of IQ4_VALUES.entries()) IQ4_NIBBLE[v + 127] = k;

/** Whether a format's 4-bit codes index {@link IQ4_VALUES}. */
export function iq4Format(format: WeightFormat): boolean {
  return format === 'iq4_nl' || format === 'iq4_xs';
}

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
 * - `q4_1` (GGUF Q4_1): codes as q4_0, q ∈ [0, 15]. Group g = i >> 5: scales[g] = f16 d | f16 m
 *   << 16. w_i = fround(d·q_i + m) (d·q exact), i.e. a = d, b = −m.
 *
 * The 5- and 6-bit codes are stored in two planes per chunk c = i >> 7 of 128 elements (r = i & 127),
 * so that a 16-element block's codes are whole words and a chunk is whole vec4<u32>s: the low
 * nibbles, nibble (r & 7) of data[W·c + (r >> 3)] (16 words), then the high bits, 1 bit (5-bit
 * codes: bit r & 31 of data[20c + 16 + (r >> 5)], 4 words; W = 20) or 2 bits (6-bit codes: bits
 * 2·(r & 15) of data[24c + 16 + (r >> 4)], 8 words; W = 24). The raw code is lo | hi << 4.
 * - `q5_0` (GGUF Q5_0): raw ∈ [0, 31], q = raw − 16 ∈ [−16, 15]; scales as int8 (one f16 d per
 *   group of 32). w_i = fround(d·q_i) (exact), a = d, b = 0: llama.cpp's (raw − 16)·d, zeros'
 *   signs included.
 * - `q5_1` (GGUF Q5_1): q = raw ∈ [0, 31]; scales as q4_1. w_i = fround(d·q_i + m).
 * - `q5_k` (GGUF Q5_K): q = raw ∈ [0, 31]; scales as int4 (super-block of 256, 8 sub-blocks of
 *   32 with 6-bit sc, mn). w_i = fround(a·q_i − b) as int4 (a·q exact).
 * - `q6_k` (GGUF Q6_K): 6-bit raw ∈ [0, 63], q = raw − 32 ∈ [−32, 31]. Super-block s = i >> 8 of
 *   16 sub-blocks j = (i >> 4) & 15 of 16, pairs t = s >> 1 of super-blocks in scales[9t ..
 *   9t+8]: word 0 = f16 d of super-block 2t (low half) | of 2t + 1 (high half); words 1–4 the
 *   sub-scales of 2t, words 5–8 those of 2t + 1: byte (j & 3) of word (j >> 2) = sc_j, an int8.
 *   A last unpaired super-block has words 0–4 only. w_i = fround(a·q_i), a = f32(d)·sc_j (exact),
 *   b = 0: llama.cpp's d·sc·(raw − 32).
 * - `q3_k` (GGUF Q3_K): 3-bit raw ∈ [0, 7], q = raw − 4 ∈ [−4, 3], stored planar like the 5-bit
 *   codes but with a 2-bit low plane: per chunk c of 128, bits 2·(r & 15) of data[12c + (r >> 4)]
 *   (8 words), then the high bit, bit r & 31 of data[12c + 8 + (r >> 5)] (4 words); raw = lo | hi
 *   << 2. Super-blocks and sub-blocks as q6_k, pairs t of super-blocks in scales[7t .. 7t+6]: word
 *   0 = the two f16 d's as q6_k's, words 1–3 the 16 6-bit sub-scales of 2t as a 96-bit field array
 *   (raw sc_j ∈ [0, 63] at bit 6·j, as int4's fields), words 4–6 those of 2t + 1; a last unpaired
 *   super-block has words 0–3 only. w_i = a·q_i, a = f32(d)·(sc_j − 32) (exact, as is a·q):
 *   llama.cpp's d·(sc − 32)·q.
 * - `iq4_nl` (GGUF IQ4_NL): nibbles as q4_0, but nibble k stands for q = IQ4_VALUES[k] (an int8);
 *   scales as int8 (one f16 d per 32). w_i = d·q_i (exact), a = d, b = 0.
 * - `iq4_xs` (GGUF IQ4_XS): codes as iq4_nl. Super-block s = i >> 8 of 8 sub-blocks j = (i >> 5) & 7
 *   of 32 in scales[2s], scales[2s + 1]: the file's first 8 bytes (f16 d, u16 scales_h, u8
 *   scales_l[4]), i.e. word 0 = f16 d | scales_h << 16, word 1 = scales_l; the 6-bit ls_j = nibble j
 *   of word 1 | bits 2j..2j+1 of scales_h << 4. w_i = a·q_i, a = f32(d)·(ls_j − 32) (exact, as is
 *   a·q), b = 0.
 * - The lattice formats ({@link LatticeFormat}): super-block s = i >> 8 is the GGUF block without
 *   its leading f16 d, byte for byte, at data[W·s ..] (W = 16, 18, 20, 24, 27 words for iq2_xxs,
 *   iq2_xs, iq2_s, iq3_xxs, iq3_s: 2, 2.25, 2.5, 3, 3.375 bits per weight, their {@link CODE_BITS});
 *   the d's two to a word as q6_k's (scales[s >> 1], half s & 1; a last unpaired one has its own
 *   word). The weights are llama.cpp's `dequantize_row_iq*` of the block (see src/quant/lattice.ts).
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
  q4_1: 4,
  q5_0: 5,
  q5_1: 5,
  int4: 4,
  q5_k: 5,
  q6_k: 6,
  q3_k: 3,
  iq4_nl: 4,
  iq4_xs: 4,
  iq2_xxs: 2,
  iq2_xs: 2.25,
  iq2_s: 2.5,
  iq3_xxs: 3,
  iq3_s: 3.375,
  int2: 2,
};

/**
 * Block geometry of a format: the flat array is padded to a multiple of `pad` elements; `block`
 * elements (the smallest run whose codes and metadata both start and end on a u32) share
 * `scaleWords` u32 of metadata (int8, q4_0, q5_0: two groups of 32 per word; q4_1, q5_1: a word
 * per group; int4, q5_k, iq4_xs, int2: one super-block of 256; q6_k, q3_k: a pair of them), of which
 * a last partial block of `pad` elements keeps `tailWords` (int8, q4_0, iq4_nl: one word; q6_k: 5;
 * q3_k: 4); `unit`
 * elements share one (scale, offset) pair. Float formats: block 2 (one f16 word), no metadata.
 */
export interface Geometry {
  readonly pad: number;
  readonly block: number;
  readonly scaleWords: number;
  readonly tailWords: number;
  readonly unit: number;
}

/** The {@link Geometry} of each format. */
export const GEOMETRY: Readonly<Record<WeightFormat, Geometry>> = {
  f32: { pad: 1, block: 1, scaleWords: 0, tailWords: 0, unit: 1 },
  f16: { pad: 1, block: 2, scaleWords: 0, tailWords: 0, unit: 1 },
  int8: { pad: 32, block: 64, scaleWords: 1, tailWords: 1, unit: 32 },
  q4_0: { pad: 32, block: 64, scaleWords: 1, tailWords: 1, unit: 32 },
  q4_1: { pad: 32, block: 32, scaleWords: 1, tailWords: 0, unit: 32 },
  q5_0: { pad: 128, block: 128, scaleWords: 2, tailWords: 0, unit: 32 },
  q5_1: { pad: 128, block: 128, scaleWords: 4, tailWords: 0, unit: 32 },
  int4: { pad: 256, block: 256, scaleWords: 4, tailWords: 0, unit: 32 },
  q5_k: { pad: 256, block: 256, scaleWords: 4, tailWords: 0, unit: 32 },
  q6_k: { pad: 256, block: 512, scaleWords: 9, tailWords: 5, unit: 16 },
  q3_k: { pad: 256, block: 512, scaleWords: 7, tailWords: 4, unit: 16 },
  iq4_nl: { pad: 32, block: 64, scaleWords: 1, tailWords: 1, unit: 32 },
  iq4_xs: { pad: 256, block: 256, scaleWords: 2, tailWords: 0, unit: 32 },
  iq2_xxs: { pad: 256, block: 512, scaleWords: 1, tailWords: 1, unit: 256 },
  iq2_xs: { pad: 256, block: 512, scaleWords: 1, tailWords: 1, unit: 256 },
  iq2_s: { pad: 256, block: 512, scaleWords: 1, tailWords: 1, unit: 256 },
  iq3_xxs: { pad: 256, block: 512, scaleWords: 1, tailWords: 1, unit: 256 },
  iq3_s: { pad: 256, block: 512, scaleWords: 1, tailWords: 1, unit: 256 },
  int2: { pad: 256, block: 256, scaleWords: 5, tailWords: 0, unit: 16 },
};

/**
 * Bias of the stored (unsigned) code field: the code is raw − bias (q5_0: 16, q6_k: 32; int8
 * stores two's complement instead, see {@link getCode}).
 */
export function codeBias(format: WeightFormat): number {
  return format === 'q5_0' ? 16 : format === 'q6_k' ? 32 : format === 'q3_k' ? 4 : 0;
}

/**
 * Bits of a planar format's low plane: 4 (a nibble plane) for the 5- and 6-bit codes, 2 for the
 * 3-bit ones; 0 for the formats that are not planar.
 */
export function lowPlaneBits(format: WeightFormat): number {
  if (latticeFormat(format)) return 0;
  const bits = CODE_BITS[format];
  return bits === 5 || bits === 6 ? 4 : bits === 3 ? 2 : 0;
}

/** u32 words of one 128-element chunk of a planar format (3-, 5- or 6-bit codes), else 0. */
function chunkWords(format: WeightFormat): number {
  return lowPlaneBits(format) === 0 ? 0 : 4 * CODE_BITS[format];
}

/**
 * Code i (flat) of a packed integer matrix's `data`, as the layouts of {@link QuantizedMatrix}
 * store it: int8 sign-extended, q5_0, q6_k and q3_k minus their {@link codeBias}, iq4_nl and iq4_xs
 * the {@link IQ4_VALUES} value of the nibble.
 */
export function getCode(format: IntFormat, data: Uint32Array, i: number): number {
  if (latticeFormat(format))
    throw new InvalidInputError(`${format}: a lattice format has no code per weight`);
  const bits = CODE_BITS[format];
  const cw = chunkWords(format);
  if (cw === 0) {
    const per = 32 / bits;
    const raw = (data[Math.floor(i / per)]! >>> (bits * (i % per))) & ((1 << bits) - 1);
    return format === 'int8' ? (raw << 24) >> 24 : iq4Format(format) ? IQ4_VALUES[raw]! : raw;
  }
  // Planar: the low plane of lb bits per element, then the high plane of hb bits.
  const base = cw * Math.floor(i / 128);
  const r = i & 127;
  const lb = lowPlaneBits(format);
  const hb = bits - lb;
  const lo = (data[base + ((r * lb) >> 5)]! >>> ((r * lb) & 31)) & ((1 << lb) - 1);
  const hi = (data[base + 4 * lb + ((r * hb) >> 5)]! >>> ((r * hb) & 31)) & ((1 << hb) - 1);
  return (lo | (hi << lb)) - codeBias(format);
}

/**
 * Stores code q at flat index i of a zeroed `data` (the inverse of {@link getCode}); q must be in
 * the format's range (for iq4_nl and iq4_xs, one of {@link IQ4_VALUES}; another throws
 * {@link InvalidInputError}).
 */
export function putCode(format: IntFormat, data: Uint32Array, i: number, q: number): void {
  if (latticeFormat(format))
    throw new InvalidInputError(`${format}: a lattice format has no code per weight`);
  const bits = CODE_BITS[format];
  let raw = (q + codeBias(format)) & ((1 << bits) - 1);
  if (iq4Format(format)) {
    raw = Number.isInteger(q) && q >= -127 && q <= 113 ? IQ4_NIBBLE[q + 127]! : -1;
    if (raw < 0) throw new InvalidInputError(`${format}: code ${q} at ${i} is not one of the IQ4 values`);
  }
  const cw = chunkWords(format);
  if (cw === 0) {
    const per = 32 / bits;
    const w = Math.floor(i / per);
    data[w] = (data[w]! | (raw << (bits * (i % per)))) >>> 0;
    return;
  }
  const base = cw * Math.floor(i / 128);
  const r = i & 127;
  const lb = lowPlaneBits(format);
  const hb = bits - lb;
  const lw = base + ((r * lb) >> 5);
  const hw = base + 4 * lb + ((r * hb) >> 5);
  data[lw] = (data[lw]! | ((raw & ((1 << lb) - 1)) << ((r * lb) & 31))) >>> 0;
  data[hw] = (data[hw]! | ((raw >> lb) << ((r * hb) & 31))) >>> 0;
}

/**
 * WGSL type the matmul kernels read one format's codes as (matmul_common.wgsl, matmul_w8a8.wgsl): one
 * 16-element block per load where a block is 16 bytes or less (int8, the 4-bit formats, int2),
 * vec4<u32> for the wider floats, u32 for the planar 5- and 6-bit codes (a block's three words are
 * not adjacent). matmul_split_k.wgsl reads the 2-, 4-, 5- and 6-bit codes as vec4<u32>
 * where K allows (see `wideLoads` in kernels/matmul/plan.ts). Every part's data array is a whole number of
 * these, and of vec4<u32>.
 */
export function codeWordType(format: WeightFormat): string {
  if (latticeFormat(format)) return 'u32';
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
 * multiple of this (int8, q4_0, iq4_nl: 64, two f16 scales per word; q4_1: 32; q5_0, q5_1: 128, a chunk
 * of planar codes; int4, q5_k, iq4_xs, int2: 256; q6_k, q3_k: 512, a pair of super-blocks; f32: 1;
 * f16: 2).
 */
export function splitAlign(format: WeightFormat): number {
  return GEOMETRY[format].block;
}

/** Elements the flat array holds for `n` weights: padded to whole groups / chunks / super-blocks. */
export function paddedLength(format: WeightFormat, n: number): number {
  const { pad } = GEOMETRY[format];
  return Math.ceil(n / pad) * pad;
}

/** u32 words of the `data` array of `n` flat elements (codes or floats). */
export function dataWords(format: WeightFormat, n: number): number {
  return (paddedLength(format, n) * CODE_BITS[format]) / 32;
}

/**
 * u32 words of the `scales` array of `n` flat elements (0 for float formats): whole blocks, and
 * for a last partial block of int8, q4_0 (one group) or q6_k (one super-block) its words.
 */
export function scaleWords(format: WeightFormat, n: number): number {
  const g = GEOMETRY[format];
  const padded = paddedLength(format, n);
  return Math.floor(padded / g.block) * g.scaleWords + (padded % g.block === 0 ? 0 : g.tailWords);
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
 * 4.5 (q4_0, iq4_nl, int4), 4.25 (iq4_xs), 5 (q4_1), 5.5 (q5_0, q5_k), 6 (q5_1), 6.5625 (q6_k),
 * 3.4375 (q3_k) and 2.625 (int2) when
 * rows·cols fills whole blocks (their GGUF types' sizes), slightly more otherwise (the padding of
 * the last block; q6_k: 2 bytes when the super-blocks are odd in number).
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
