/**
 * Reading GGUF tensor data: a tensor or a range of its rows dequantised to f32 in GGML layout
 * (`ne` order), and a matrix whose GGML type has a weft layout repacked as stored, without an f32
 * copy (src/quant/ggml-repack.ts). The header that locates each tensor is parsed in header.ts.
 */

import type { QuantizedMatrix } from '../../quant/formats.js';
import { DEQUANTIZABLE, dequantizeGgml, GGML_BLOCKS } from '../../quant/ggml/blocks.js';
import { emptyMatrix, repackRows, storedWeftFormat } from '../../quant/ggml-repack.js';
import { ModelFormatError } from '../errors.js';
import type { RowRange } from '../weft-checkpoint.js';
import type { GgufTensorInfo } from './header.js';

/** Reads one GGUF tensor as stored (GGML layout, `ne` order) and dequantises it to f32. */
export async function readGgufTensorF32(info: GgufTensorInfo): Promise<Float32Array> {
  const [cols = 1, ...outer] = info.ne;
  return readGgufRowsF32(
    info,
    0,
    outer.reduce((a, b) => a * b, 1),
    cols,
  );
}

/**
 * Rows [row0, row0 + rows) of a GGUF tensor as stored (a row is `ne[0]` elements, whole blocks of
 * any GGML type), read and dequantised to f32 alone.
 */
export async function readGgufRowsF32(
  info: GgufTensorInfo,
  row0: number,
  rows: number,
  cols: number,
): Promise<Float32Array> {
  if (!DEQUANTIZABLE.has(info.type)) {
    const name = GGML_BLOCKS.get(info.type)?.name ?? String(info.type);
    throw new ModelFormatError(info.bytes.name, info.name, name, 'weft cannot dequantise this GGML type');
  }
  const total = info.ne.slice(1).reduce((a, b) => a * b, 1);
  if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || row0 + rows > total)
    throw new ModelFormatError(info.bytes.name, info.name, [row0, rows], `row range outside [0, ${total})`);
  const rowBytes = info.byteLength / total;
  const bytes = await info.bytes.read(info.offset + row0 * rowBytes, rows * rowBytes);
  return dequantizeGgml(info.type, bytes, rows * cols);
}

/** Most bytes of a tensor read at once when it is repacked (whole rows; at least one). */
export const PIECE_BYTES = 4 << 20;

/**
 * Reads one GGUF matrix [rows, cols] (HF shape: `ne` reversed; a stack [E, R, cols] as the matrix
 * [E · R, cols], its experts' rows one after another) into its weft format
 * ({@link storedWeftFormat}) without decoding it to f32: a piece of whole rows (at most
 * `pieceBytes`, at least one row) at a time, each row moved to `to(row)` with its scales. Given
 * `range`, only the rows that move into it are kept, as a matrix of those rows, and only the
 * stored rows `from` ([first, count), all by default) are read: the caller names the rows that
 * `to` moves into the range (for a permutation within heads, the heads it covers).
 */
export async function readGgufTensorPacked(
  info: GgufTensorInfo,
  to: (row: number) => number = (r) => r,
  pieceBytes = PIECE_BYTES,
  range?: RowRange,
  from?: RowRange,
): Promise<QuantizedMatrix> {
  const format = storedWeftFormat(info.type);
  const [cols, ...outer] = info.ne;
  const rows = outer.length > 0 ? outer.reduce((a, b) => a * b, 1) : undefined;
  if (format === undefined || rows === undefined || cols === undefined || outer.length > 2) {
    const name = GGML_BLOCKS.get(info.type)?.name ?? String(info.type);
    throw new ModelFormatError(
      info.bytes.name,
      info.name,
      name,
      'not a matrix or stack of a type with a weft layout',
    );
  }
  const want = range ?? { row0: 0, rows };
  const read = from ?? { row0: 0, rows };
  const out = emptyMatrix(format, want.rows, cols);
  const rowBytes = info.byteLength / rows;
  const perPiece = Math.max(1, Math.floor(pieceBytes / rowBytes));
  const end = read.row0 + read.rows;
  for (let r0 = read.row0; r0 < end; r0 += perPiece) {
    const n = Math.min(perPiece, end - r0);
    const bytes = await info.bytes.read(info.offset + r0 * rowBytes, n * rowBytes);
    if (range === undefined) {
      repackRows(info.type, bytes, out, (r) => to(r0 + r));
      continue;
    }
    for (let r = 0; r < n; r++) {
      const dest = to(r0 + r) - want.row0;
      if (dest >= 0 && dest < want.rows)
        repackRows(info.type, bytes.subarray(r * rowBytes, (r + 1) * rowBytes), out, () => dest);
    }
  }
  return out;
}
