// GGUF (llama.cpp's single-file format) as a Hugging Face checkpoint: tensors under HF names and
// shapes, dequantised to f32 or, where a weft layout holds their blocks, repacked as stored
// (`readPacked`). The container is formats/gguf/ (header, tensor reads, tokenizer); the spec, the
// names and the stored forms are the file's family's (families/).

import { ModelFormatError } from '../formats/errors.js';
import { type GgufFile, type GgufTensorInfo, openGguf } from '../formats/gguf/header.js';
import {
  PIECE_BYTES,
  readGgufRowsF32,
  readGgufTensorF32,
  readGgufTensorPacked,
} from '../formats/gguf/tensors.js';
import type { FileBytes } from '../formats/io/bytes.js';
import type { PackedWant, ReadStats, RowRange, TensorReader } from '../formats/weft-checkpoint.js';
import type { QuantizedMatrix, WeightFormat } from '../quant/formats.js';
import { storedWeftFormat } from '../quant/ggml-repack.js';
import { ggufSpec, hfShape, hfTensorName, storedForm } from './families/index.js';
import { hfRows, storedRowsFor } from './families/stored.js';
import { splitFusedShapes } from './fused-view.js';
import type { ModelSpec } from './spec/spec.js';
import { checkTensors } from './tensors.js';

/** One tensor of a GGUF checkpoint under its Hugging Face name and shape. */
export interface GgufTensor {
  readonly name: string;
  /** HF shape, slowest first (`ne` reversed). */
  readonly shape: readonly number[];
  readonly info: GgufTensorInfo;
}

/**
 * A GGUF file seen as a Hugging Face checkpoint: spec, tensors by HF name and HF shape,
 * `readF32(name)` that dequantises and undoes how llama.cpp's converter stored the values
 * (the family's `storedForm`: Q/K rows permuted for interleaved RoPE, so one RoPE path at
 * run time; Qwen3.5's tiled value heads, 1 + w norms and -exp(A_log); Gemma 3's 1 + w norms), and
 * `readPacked` that gives a matrix whose GGML type has a weft layout ({@link storedWeftFormat}) as
 * stored, rows moved back the same way, without an f32 copy (not a matrix whose columns or values
 * were changed: Qwen3.5's out_proj); both (and `readRowsF32`, its f32 rows) can read a range of rows alone. `stats` counts
 * what `readF32` and `readRowsF32` decoded. A family's fused projections (Phi-3's `attn_qkv` and `ffn_up`,
 * a mixture's expert stacks `ffn_{gate,up,down}_exps`) stay fused here, as `self_attn.qkv_proj`,
 * `mlp.gate_up_proj` and `mlp.experts.gate_proj` and so on (a stack [E, R, C] read packed as the
 * matrix [E · R, C], its stored format its type's): the loader reads them through
 * `splitFusedView`, and the spec check sees them split. Tensors weft does not use are left out (a qwen35
 * file's MTP blocks among them).
 */
export interface GgufCheckpoint extends TensorReader {
  readonly file: GgufFile;
  readonly spec: ModelSpec;
  readonly tensors: ReadonlyMap<string, GgufTensor>;
  readonly stats: ReadStats;
  readRowsF32(name: string, row0: number, rows: number): Promise<Float32Array>;
  readPacked(name: string, want: PackedWant, range?: RowRange): Promise<QuantizedMatrix | undefined>;
  storedFormat(name: string): WeightFormat | undefined;
}

/**
 * Opens a GGUF file as a {@link GgufCheckpoint}: parses the header, derives the spec and checks
 * that every tensor the spec needs is present with its HF shape ({@link checkTensors}).
 */
export async function openGgufCheckpoint(source: FileBytes): Promise<GgufCheckpoint> {
  const file = await openGguf(source);
  const spec = await ggufSpec(file);
  const tensors = new Map<string, GgufTensor>();
  for (const info of file.tensors.values()) {
    const name = hfTensorName(info.name, spec);
    if (name !== undefined) tensors.set(name, { name, shape: hfShape(name, info.ne, spec), info });
  }
  // Shapes must match the spec before a stored layout trusts its sizes (heads, head widths); a
  // family's fused projections as the plain linears the loader reads them as.
  checkTensors(
    spec,
    splitFusedShapes(spec, tensors, () => source.name),
    source.name,
  );
  const tensor = (name: string): GgufTensor => {
    const t = tensors.get(name);
    if (t === undefined) throw new ModelFormatError(source.name, name, undefined, 'missing tensor');
    return t;
  };
  // A tensor as rows × cols (a vector is a column) and how llama.cpp stored it (see storedForm).
  const viewOf = (name: string) => {
    const t = tensor(name);
    const rows = t.shape[0] ?? 1;
    const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
    return { t, rows, cols, layout: storedForm(spec, name, t.shape) };
  };
  const stats = { f32Bytes: 0, largestF32: 0 };
  const counted = (values: Float32Array) => {
    stats.f32Bytes += values.byteLength;
    stats.largestF32 = Math.max(stats.largestF32, values.length);
    return values;
  };
  return {
    file,
    spec,
    tensors,
    stats,
    async readF32(name) {
      const { t, rows, cols, layout } = viewOf(name);
      return hfRows(layout, counted(await readGgufTensorF32(t.info)), 0, cols, 0, rows);
    },
    async readRowsF32(name, row0, n) {
      const { t, rows, cols, layout } = viewOf(name);
      const read = storedRowsFor(layout.hfRow, rows, row0, n);
      // GGUF rows are `ne[0]` values: a stack [E, R, C] has R of them per first index.
      const last = t.shape[t.shape.length - 1] ?? 1;
      const per = t.shape.length > 2 ? cols / last : 1;
      const values = counted(
        await readGgufRowsF32(t.info, read.row0 * per, read.rows * per, per === 1 ? cols : last),
      );
      return hfRows(layout, values, read.row0, cols, row0, n);
    },
    storedFormat(name) {
      const t = tensors.get(name);
      return t !== undefined && isMatrixOrStack(t.shape) ? storedWeftFormat(t.info.type) : undefined;
    },
    async readPacked(name, want, range) {
      const t = tensor(name);
      // A matrix [rows, cols], or a stack [E, R, cols] as the matrix [E · R, cols] (splitFusedView
      // reads an expert's rows from it).
      const cols = t.shape[t.shape.length - 1];
      const rows = t.shape.slice(0, -1).reduce((a, b) => a * b, 1);
      const same =
        isMatrixOrStack(t.shape) &&
        storedWeftFormat(t.info.type) === want.format &&
        rows === want.rows &&
        cols === want.cols &&
        want.rotation === 'none';
      if (!same || cols === undefined) return undefined;
      // A row permutation moves whole rows: each GGUF row is whole blocks, so codes and scales
      // move together and nothing is rounded. Moved columns or mapped values are not stored blocks,
      // and a stack's layout (over its first index) is not a permutation of its rows.
      const { layout } = viewOf(name);
      if (layout.hfCol || layout.toHf || (t.shape.length === 3 && layout.hfRow)) return undefined;
      const to = layout.hfRow ?? ((r: number) => r);
      if (range === undefined) return readGgufTensorPacked(t.info, to);
      const from = storedRowsFor(layout.hfRow, rows, range.row0, range.rows);
      return readGgufTensorPacked(t.info, to, PIECE_BYTES, range, from);
    },
  };
}

/** A matrix [rows, cols] or a stack of them [E, R, cols]: what a GGUF stores as blocks of rows. */
function isMatrixOrStack(shape: readonly number[]): boolean {
  return shape.length === 2 || shape.length === 3;
}
