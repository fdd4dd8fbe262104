/**
 * Transcoding at load: a checkpoint tensor (already f32, in HF layout) to one of weft's matmul
 * weight formats (`QuantizedMatrix`, packed by `quantize` from kernels/matmul/quant.ts). For GGUF
 * sources, {@link weftFormatFor} picks the format that keeps the most of what the file stored:
 * Q8_0 → int8 with group 32 is exact (same codes, same scales), the 4-bit types go to int4 with
 * group 32, Q6_K to int8 with group 16 (more levels than it had), floats stay floats.
 */
import { defaultGroup, type QuantizedMatrix, quantize, type WeightFormat } from '../kernels/matmul/quant.js';
import { ModelFormatError } from './errors.js';
import { GgmlType } from './gguf-blocks.js';

/** A weft weight format with its group size along K. */
export interface WeftFormatChoice {
  readonly format: WeightFormat;
  readonly group: number;
}

/**
 * The weft format for a GGML type and row length `cols` (see the module comment). Falls back to
 * f16 when `cols` does not divide into the group (weft's int formats need K % group == 0).
 */
export function weftFormatFor(ggmlType: number, cols: number): WeftFormatChoice {
  const pick = (format: WeightFormat, group: number): WeftFormatChoice =>
    cols % group === 0 ? { format, group } : { format: 'f16', group: cols };
  switch (ggmlType) {
    case GgmlType.F32:
      return { format: 'f32', group: cols };
    case GgmlType.Q8_0:
      return pick('int8', 32);
    case GgmlType.Q4_0:
    case GgmlType.Q4_K:
      return pick('int4', 32);
    case GgmlType.Q6_K:
      return pick('int8', 16);
    default:
      return cols % 2 === 0 ? { format: 'f16', group: cols } : { format: 'f32', group: cols };
  }
}

/**
 * Packs a `[rows, cols]` f32 matrix (HF layout) as `format` with `group` (default: the format's
 * default group). Shape problems that come from the file are reported as {@link ModelFormatError}
 * naming `file` and the tensor.
 */
export function toWeftMatrix(
  values: Float32Array,
  shape: readonly number[],
  format: WeightFormat,
  file: string,
  name: string,
  group?: number,
): QuantizedMatrix {
  if (shape.length !== 2 || values.length !== shape[0]! * shape[1]!) {
    throw new ModelFormatError(file, name, shape, 'a weight matrix must be 2-D [rows, cols]');
  }
  const rows = shape[0]!;
  const cols = shape[1]!;
  try {
    return quantize(values, rows, cols, format, group ?? defaultGroup(format, cols));
  } catch (cause) {
    throw new ModelFormatError(file, name, [rows, cols], `cannot pack as ${format}: ${String(cause)}`, {
      cause,
    });
  }
}
