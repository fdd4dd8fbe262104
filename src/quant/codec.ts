// Packing and the reference unpacking of a weight matrix: integer codes on a grid to packed words
// (encode) and back (decode), and whole float matrices to any format (quantize) and back
// (dequantize, which the GPU kernels match bit for bit).
import { InvalidInputError } from '../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';
import { gridFromScales, type MatrixGrid, nearestCode } from './grid.js';
import { latticeDequantize } from './lattice.js';
import {
  checkShape,
  checkWords,
  dataWords,
  getCode,
  isIntFormat,
  latticeFormat,
  paddedLength,
  putCode,
  type QuantizedMatrix,
  type WeightFormat,
} from './layout.js';
import { gridOf } from './rtn.js';

/**
 * Packs integer codes [rows·cols] (flat, one per element, each in [grid.lo, grid.hi]) on `grid`
 * into a {@link QuantizedMatrix}. The padding after the last element gets the code nearest 0.
 */
export function encode(grid: MatrixGrid, codes: Int32Array): QuantizedMatrix {
  const { format, rows, cols, lo, hi } = grid;
  const n = rows * cols;
  if (codes.length !== n)
    throw new InvalidInputError(`encode: ${codes.length} codes for a [${rows}, ${cols}] matrix`);
  const data = new Uint32Array(dataWords(format, n));
  for (let i = 0; i < paddedLength(format, n); i++) {
    const q = i < n ? codes[i]! : nearestCode(grid, i, 0);
    if (!Number.isInteger(q) || q < lo || q > hi)
      throw new InvalidInputError(`encode: code ${q} at ${i} is outside [${lo}, ${hi}] of ${format}`);
    putCode(format, data, i, q);
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
  const n = rows * cols;
  const codes = new Int32Array(n);
  for (let i = 0; i < n; i++) codes[i] = getCode(format, data, i);
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
  if (latticeFormat(format)) return latticeDequantize({ ...q, format });
  const { grid, codes } = decode(q);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = grid.scaleAt(i) * codes[i]! - grid.offsetAt(i);
  return out;
}
