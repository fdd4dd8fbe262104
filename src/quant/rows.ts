// Row ranges of packed matrices: where a range of rows lies in the packed arrays, a range as a
// matrix of its own (no copy), and matrices stacked by rows into one.
import { InvalidInputError } from '../errors.js';
import {
  checkWords,
  dataWords,
  isIntFormat,
  type QuantizedMatrix,
  scaleWords,
  splitAlign,
  type WeightFormat,
} from './layout.js';

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
/** Greatest common divisor of two non-negative integers. */
function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}
