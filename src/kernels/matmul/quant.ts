// Weight formats of weft's matmul kernels: packing (quantize), the reference unpacking
// (dequantize) and sizes. Pure TypeScript, no GPU: loaders and tests import it.
import { InvalidInputError } from '../../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';

/** Storage format of a weight matrix: float (f32, f16) or integer-quantized with group scales. */
export type WeightFormat = 'f32' | 'f16' | 'int8' | 'int4' | 'int2';

/**
 * A weight matrix W [rows = N out features, cols = K in features], row-major, packed in u32 words.
 * Each row starts on a word. f32: one bit pattern per word. f16: two halves per word, element 2j in
 * the low 16 bits. int8: 4 per word, element j in bits 8*(j%4) as two's complement, w = q * scale.
 * int4: 8 per word, element j in bits 4*(j%8), q in [0, 15], w = (q - zero) * scale. int2: 16 per
 * word, bits 2*(j%16), q in [0, 3], w = (q - zero) * scale. `scales`/`zeros` are [rows, cols/group];
 * `zeros` (integers stored as f32) exist for int4 and int2 only. Float formats have group = cols.
 */
export interface QuantizedMatrix {
  format: WeightFormat;
  /** N: output features. */
  rows: number;
  /** K: input features. */
  cols: number;
  /** Elements per scale group along K (cols for per-channel int8 and for float formats). */
  group: number;
  /** Packed weights, row-major, each row starting on a u32. */
  data: Uint32Array;
  /** [rows, cols/group] scales (integer formats). */
  scales?: Float32Array;
  /** [rows, cols/group] integer zero points stored as f32 (int4, int2). */
  zeros?: Float32Array;
}

/** Bits per element of each format. */
export const FORMAT_BITS: Readonly<Record<WeightFormat, number>> = {
  f32: 32,
  f16: 16,
  int8: 8,
  int4: 4,
  int2: 2,
};

/** Group used by {@link quantize} when none is given: per channel for int8, 32 for int4/int2. */
export function defaultGroup(format: WeightFormat, cols: number): number {
  return format === 'int4' || format === 'int2' ? 32 : cols;
}

/** u32 words per packed row of `cols` elements. */
export function wordsPerRow(format: WeightFormat, cols: number): number {
  return Math.ceil((cols * FORMAT_BITS[format]) / 32);
}

/**
 * Throws {@link InvalidInputError} unless (format, rows, cols, group) satisfy the packing
 * preconditions: cols % group == 0, group % 16 == 0 for integer formats, group <= 64 for int2,
 * cols even for f16.
 */
export function checkShape(format: WeightFormat, rows: number, cols: number, group: number): void {
  const bad = (why: string) =>
    new InvalidInputError(`${format} matrix [${rows}, ${cols}] with group ${group}: ${why}`);
  if (!Number.isInteger(rows) || rows < 1 || !Number.isInteger(cols) || cols < 1)
    throw bad('rows and cols must be positive integers');
  if (format === 'f16' && cols % 2 !== 0) throw bad('f16 needs an even cols');
  if (format === 'f32' || format === 'f16') {
    if (group !== cols) throw bad('float formats have group = cols');
    return;
  }
  if (!Number.isInteger(group) || group < 16 || group % 16 !== 0) throw bad('group must be a multiple of 16');
  if (cols % group !== 0) throw bad('cols must be a multiple of group');
  if (format === 'int2' && group > 64) throw bad('int2 needs group <= 64');
}

/**
 * Bytes a matmul reads for this matrix: packed data plus scales and zero points. This is the
 * figure the benchmark divides by time to get effective bandwidth.
 */
export function packedBytes(format: WeightFormat, rows: number, cols: number, group: number): number {
  const data = rows * wordsPerRow(format, cols) * 4;
  if (format === 'f32' || format === 'f16') return data;
  const groups = rows * (cols / group);
  return data + groups * 4 * (format === 'int8' ? 1 : 2);
}

/**
 * Packs `w` [rows, cols] row-major into `format`. int8 is symmetric (scale = max|w| / 127 per
 * group); int4/int2 are asymmetric with the range widened to include 0 so that an integer zero
 * point exists: scale = (max - min) / (2^bits - 1), zero = round(-min / scale). Rounding is
 * round-half-away-from-zero (Math.round on magnitudes); f16 rounds to nearest even.
 */
export function quantize(
  w: Float32Array,
  rows: number,
  cols: number,
  format: WeightFormat,
  group = defaultGroup(format, cols),
): QuantizedMatrix {
  checkShape(format, rows, cols, group);
  if (w.length !== rows * cols)
    throw new InvalidInputError(`quantize: w has ${w.length} elements, expected ${rows} * ${cols}`);
  const wpr = wordsPerRow(format, cols);
  const data = new Uint32Array(rows * wpr);
  if (format === 'f32') {
    const bits = new Uint32Array(w.buffer, w.byteOffset, w.length);
    data.set(bits);
    return { format, rows, cols, group, data };
  }
  if (format === 'f16') {
    for (let r = 0; r < rows; r++)
      for (let j = 0; j < cols; j += 2) {
        const lo = f32ToF16Bits(w[r * cols + j]!);
        const hi = f32ToF16Bits(w[r * cols + j + 1]!);
        data[r * wpr + j / 2] = (lo | (hi << 16)) >>> 0;
      }
    return { format, rows, cols, group, data };
  }
  const bits = FORMAT_BITS[format];
  const perWord = 32 / bits;
  const mask = (1 << bits) - 1;
  const nGroups = cols / group;
  const scales = new Float32Array(rows * nGroups);
  const zeros = format === 'int8' ? undefined : new Float32Array(rows * nGroups);
  const levels = mask; // 15 for int4, 3 for int2
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < nGroups; g++) {
      const start = r * cols + g * group;
      let lo = 0;
      let hi = 0;
      let amax = 0;
      for (let j = 0; j < group; j++) {
        const v = w[start + j]!;
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
        amax = Math.max(amax, Math.abs(v));
      }
      // q = code of element j of the group; packed at word (g*group + j) / perWord of row r.
      let code: (v: number) => number;
      if (format === 'int8') {
        const scale = Math.fround(amax / 127);
        scales[r * nGroups + g] = scale;
        code = (v) => (scale === 0 ? 0 : clamp(roundAway(v / scale), -127, 127) & 0xff);
      } else {
        const scale = hi === lo ? 1 : Math.fround((hi - lo) / levels);
        const zero = clamp(roundAway(-lo / scale), 0, levels);
        scales[r * nGroups + g] = scale;
        zeros![r * nGroups + g] = zero;
        code = (v) => clamp(roundAway(v / scale) + zero, 0, levels);
      }
      for (let j = 0; j < group; j++) {
        const k = g * group + j;
        const word = r * wpr + Math.floor(k / perWord);
        data[word] = (data[word]! | (code(w[start + j]!) << (bits * (k % perWord)))) >>> 0;
      }
    }
  }
  return zeros
    ? { format, rows, cols, group, data, scales, zeros }
    : { format, rows, cols, group, data, scales };
}

/** The reference unpacking: W [rows, cols] as f32, w = (q - zero) * scale rounded to f32. */
export function dequantize(q: QuantizedMatrix): Float32Array {
  const { format, rows, cols, group, data } = q;
  checkShape(format, rows, cols, group);
  const out = new Float32Array(rows * cols);
  const wpr = wordsPerRow(format, cols);
  if (format === 'f32') {
    for (let r = 0; r < rows; r++)
      out.set(new Float32Array(data.buffer, data.byteOffset + r * wpr * 4, cols), r * cols);
    return out;
  }
  if (format === 'f16') {
    for (let r = 0; r < rows; r++)
      for (let j = 0; j < cols; j++) {
        const word = data[r * wpr + (j >> 1)]!;
        out[r * cols + j] = f16BitsToF32((j & 1 ? word >>> 16 : word) & 0xffff);
      }
    return out;
  }
  const bits = FORMAT_BITS[format];
  const perWord = 32 / bits;
  const mask = (1 << bits) - 1;
  const nGroups = cols / group;
  const { scales, zeros } = q;
  if (!scales || scales.length !== rows * nGroups)
    throw new InvalidInputError(`dequantize: ${format} needs ${rows * nGroups} scales`);
  if (format !== 'int8' && (!zeros || zeros.length !== rows * nGroups))
    throw new InvalidInputError(`dequantize: ${format} needs ${rows * nGroups} zeros`);
  for (let r = 0; r < rows; r++)
    for (let k = 0; k < cols; k++) {
      const raw = (data[r * wpr + Math.floor(k / perWord)]! >>> (bits * (k % perWord))) & mask;
      const gi = r * nGroups + Math.floor(k / group);
      // int8 codes are two's complement bytes; int4/int2 codes are unsigned.
      const qv = format === 'int8' ? (raw << 24) >> 24 : raw - zeros![gi]!;
      out[r * cols + k] = Math.fround(qv * scales[gi]!);
    }
  return out;
}

// IEEE binary16 conversions live with the other float formats.
export { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

/** Round half away from zero (Math.round rounds -2.5 to -2). */
function roundAway(v: number): number {
  return Math.sign(v) * Math.round(Math.abs(v));
}
