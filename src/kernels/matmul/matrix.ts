// A weight matrix resident on the GPU: its rows in parts, each within one storage binding, as
// uploaded from a QuantizedMatrix (a gated pair's rows interleaved) or allocated empty.
import { InvalidInputError } from '../../errors.js';
import { createBuffer, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  CODE_BITS,
  checkShape,
  concatRows,
  dataWords,
  isIntFormat,
  packedBytes,
  type QuantizedMatrix,
  scaleWords,
  sliceRows,
  splitAlign,
  type WeightFormat,
} from '../../quant/formats.js';

/**
 * Rows [row0, row0 + rows) of a {@link GpuMatrix}, each buffer within one storage binding. The
 * part's flat elements start at row0·K, a multiple of `splitAlign(format)`, so its data and scales
 * are the words of those elements (the layouts of `QuantizedMatrix`) starting at word 0.
 */
export interface GpuMatrixPart {
  readonly row0: number;
  readonly rows: number;
  /** Codes (or floats) of the part's flat elements, u32 words. */
  readonly data: GPUBuffer;
  /** Block metadata of the part's flat elements (integer formats). */
  readonly scales?: GPUBuffer;
}

/**
 * A weight matrix resident on the GPU in its packed format (never expanded). Its rows are split
 * into parts so that no buffer exceeds the device's storage-binding and buffer limits; a matmul
 * dispatches once per part (one part for all but the largest matrices, e.g. a big LM head).
 */
export interface GpuMatrix {
  readonly format: WeightFormat;
  /** N: output features. */
  readonly rows: number;
  /** K: input features. */
  readonly cols: number;
  readonly parts: readonly GpuMatrixPart[];
  /** Bytes a matmul reads (packed data + scales, see `packedBytes`). */
  readonly bytes: number;
  /**
   * A gated pair (see {@link uploadGatedPair}): `rows` counts outputs, and each part holds its
   * `rows` gate rows followed by the matching up rows. Only a gated (`silu` or `gelu`) {@link Matmul}
   * takes it.
   */
  readonly gated?: boolean;
  destroy(): void;
}

/**
 * Uploads a packed matrix as-is (no expansion), split by rows into parts whose buffers each fit
 * `maxBindingBytes` (default: the smaller of the device's maxStorageBufferBindingSize and
 * maxBufferSize). Every part but the first starts at a row whose flat index row0·K is a multiple
 * of `splitAlign(format)` (a whole group pair or super-block), so each part's words are a plain
 * slice of `data` and `scales`. Throws {@link InvalidInputError} when K is not a multiple of 16 (the
 * kernels' block), when the arrays have the wrong sizes, or when no aligned run of rows fits.
 */
export function uploadMatrix(
  ctx: GpuContext,
  q: QuantizedMatrix,
  label: string,
  maxBindingBytes = maxBinding(ctx),
): GpuMatrix {
  checkUpload(q, label);
  const { format, rows: N, cols: K } = q;
  const parts = partition(format, N, K, 1, maxBindingBytes, label).map(([row0, rows]) =>
    uploadPart(ctx, sliceRows(q, row0, rows), row0, rows, `${label}[${row0}:${row0 + rows}]`),
  );
  return residentMatrix(format, N, K, parts, packedBytes(format, N, K));
}

/**
 * Uploads the gate and up projections of a gated MLP (each [I, K], one format) as one gated pair for
 * a `silu` or `gelu` {@link Matmul}: output j is act(gate_j · x) · (up_j · x), one dispatch per part
 * instead of two matmuls and an elementwise pass. Each part holds gate rows [row0, row0 + rows)
 * then up rows [row0, row0 + rows), packed as `concatRows` stacks them, so every part's up half
 * must start on a whole group pair / super-block: throws {@link InvalidInputError} unless I·K is a
 * multiple of `splitAlign(format)` (the caller then keeps the matmuls apart), and as
 * {@link uploadMatrix} does for bad shapes or sizes.
 */
export function uploadGatedPair(
  ctx: GpuContext,
  gate: QuantizedMatrix,
  up: QuantizedMatrix,
  label: string,
  maxBindingBytes = maxBinding(ctx),
): GpuMatrix {
  checkUpload(gate, `${label}.gate`);
  checkUpload(up, `${label}.up`);
  const { format, rows: I, cols: K } = gate;
  if (up.format !== format || up.rows !== I || up.cols !== K)
    throw new InvalidInputError(
      `uploadGatedPair ${label}: gate is ${format} [${I}, ${K}], up is ${up.format} [${up.rows}, ${up.cols}]`,
    );
  checkGatedSplit(format, I, K, label);
  const parts = partition(format, I, K, 2, maxBindingBytes, label).map(([row0, rows]) =>
    uploadPart(
      ctx,
      concatRows([sliceRows(gate, row0, rows), sliceRows(up, row0, rows)]),
      row0,
      rows,
      `${label}[${row0}:${row0 + rows}]`,
    ),
  );
  return { ...residentMatrix(format, I, K, parts, 2 * packedBytes(format, I, K)), gated: true };
}

/** A gated pair's up half must start on a whole group pair / super-block (see {@link uploadGatedPair}). */
function checkGatedSplit(format: WeightFormat, I: number, K: number, label: string): void {
  if ((I * K) % splitAlign(format) !== 0)
    throw new InvalidInputError(
      `uploadGatedPair ${label}: ${format} [${I}, ${K}] has ${I * K} elements, not a multiple of ${splitAlign(format)}: the up half would not start on a block`,
    );
}

/**
 * Allocates the part buffers of a matrix [N, K] in `format` without filling them: the parts, sizes
 * and labels {@link uploadMatrix} gives (`gated`: those of {@link uploadGatedPair}, each part gate
 * rows then up rows), so a loader can write a matrix into them a slice of rows at a time
 * (`queue.writeBuffer` at each slice's words) instead of holding it packed whole. Throws
 * {@link InvalidInputError} where those would.
 */
export function allocateMatrix(
  ctx: GpuContext,
  format: WeightFormat,
  N: number,
  K: number,
  label: string,
  gated = false,
  maxBindingBytes = maxBinding(ctx),
): GpuMatrix {
  checkShape(format, N, K);
  if (K % 16 !== 0) throw new InvalidInputError(`uploadMatrix ${label}: K = ${K} must be a multiple of 16`);
  if (gated) checkGatedSplit(format, N, K, label);
  const copies = gated ? 2 : 1;
  // Every part starts on a block, so its words are those of its own rows (padding in the last).
  const parts = partition(format, N, K, copies, maxBindingBytes, label).map(([row0, rows]) => {
    const tag = `${label}[${row0}:${row0 + rows}]`;
    const data = createBuffer(ctx, 4 * copies * dataWords(format, rows * K), `${tag}.data`);
    const words = copies * scaleWords(format, rows * K);
    const scales = isIntFormat(format) ? createBuffer(ctx, 4 * words, `${tag}.scales`) : undefined;
    return { row0, rows, data, ...(scales ? { scales } : {}) };
  });
  const m = residentMatrix(format, N, K, parts, copies * packedBytes(format, N, K));
  return gated ? { ...m, gated } : m;
}

/** The smaller of the device's maxStorageBufferBindingSize and maxBufferSize. */
export function maxBinding(ctx: GpuContext): number {
  return Math.min(ctx.limits.maxStorageBufferBindingSize, ctx.limits.maxBufferSize);
}

/** Throws unless `q` can be uploaded: a packable shape with K % 16 == 0 and arrays of the right size. */
function checkUpload(q: QuantizedMatrix, label: string): void {
  const { format, rows: N, cols: K } = q;
  checkShape(format, N, K);
  if (K % 16 !== 0) throw new InvalidInputError(`uploadMatrix ${label}: K = ${K} must be a multiple of 16`);
  if (q.data.length !== dataWords(format, N * K))
    throw new InvalidInputError(
      `uploadMatrix ${label}: data has ${q.data.length} words, expected ${dataWords(format, N * K)}`,
    );
  if (isIntFormat(format) && q.scales?.length !== scaleWords(format, N * K))
    throw new InvalidInputError(
      `uploadMatrix ${label}: ${format} needs ${scaleWords(format, N * K)} scale words, got ${q.scales?.length}`,
    );
}

/**
 * Row ranges [row0, rows] of the parts of an [N, K] matrix whose parts store `copies` rows per row
 * (2 for a gated pair) in buffers of at most `maxBindingBytes`: each a multiple of `step` rows (so
 * the next part starts on `splitAlign(format)`), as many as fit.
 */
function partition(
  format: WeightFormat,
  N: number,
  K: number,
  copies: number,
  maxBindingBytes: number,
  label: string,
): [number, number][] {
  const align = splitAlign(format);
  const step = align / gcd(K, align);
  const fits = (rows: number) =>
    4 * Math.max(dataWords(format, copies * rows * K), scaleWords(format, copies * rows * K)) <=
    maxBindingBytes;
  // The data array is the larger: start from its bytes per row and step down until both fit.
  let perPart = Math.floor(maxBindingBytes / ((copies * K * CODE_BITS[format]) / 8)) + step;
  perPart -= perPart % step;
  while (perPart > 0 && !fits(perPart)) perPart -= step;
  if (perPart < 1)
    throw new InvalidInputError(
      `uploadMatrix ${label}: ${step} rows of ${format} [${N}, ${K}] (the smallest aligned part) exceed ${maxBindingBytes} bytes`,
    );
  const ranges: [number, number][] = [];
  for (let row0 = 0; row0 < N; row0 += perPart) ranges.push([row0, Math.min(perPart, N - row0)]);
  return ranges;
}

function uploadPart(
  ctx: GpuContext,
  q: QuantizedMatrix,
  row0: number,
  rows: number,
  tag: string,
): GpuMatrixPart {
  const data = uploadBuffer(ctx, q.data, `${tag}.data`);
  const scales = q.scales && uploadBuffer(ctx, q.scales, `${tag}.scales`);
  return { row0, rows, data, ...(scales ? { scales } : {}) };
}

function residentMatrix(
  format: WeightFormat,
  rows: number,
  cols: number,
  parts: GpuMatrixPart[],
  bytes: number,
): GpuMatrix {
  return {
    format,
    rows,
    cols,
    parts,
    bytes,
    destroy() {
      for (const p of parts) {
        p.data.destroy();
        p.scales?.destroy();
      }
    },
  };
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}
