/**
 * GGUF (llama.cpp's single-file format) as a Hugging Face checkpoint: tensors under HF names and
 * layouts, dequantised to f32 or, where a weft layout holds their blocks, repacked as stored
 * (`readPacked`). The entry point for GGUF files: it re-exports the header parser
 * (gguf-header.ts), the tensor reads (gguf-tensors.ts), the name and row-order mapping
 * (gguf-names.ts) and the {@link ModelSpec} from metadata (gguf-spec.ts), so importers need only
 * this module. The embedded vocabulary becomes a tokenizer.json in gguf-tokenizer.ts.
 */

import type { QuantizedMatrix, WeightFormat } from '../quant/formats.js';
import { ModelFormatError } from './errors.js';
import { storedWeftFormat } from './gguf-blocks.js';
import { type GgufFile, type GgufTensorInfo, openGguf } from './gguf-header.js';
import { hfRowOf, hfTensorName, permuteRows } from './gguf-names.js';
import { ggufSpec } from './gguf-spec.js';
import { PIECE_BYTES, readGgufRowsF32, readGgufTensorF32, readGgufTensorPacked } from './gguf-tensors.js';
import { checkTensors } from './layout.js';
import type { ByteSource } from './source.js';
import type { ModelSpec } from './spec.js';
import type { PackedWant, ReadStats, RowRange, TensorReader } from './weft-checkpoint.js';

export { type GgufFile, type GgufTensorInfo, GgufType, type GgufValue, openGguf } from './gguf-header.js';
export { ggufTensorName, hfRowOf, hfTensorName, permuteRows } from './gguf-names.js';
export { ggufSpec, llama3RopeFactors } from './gguf-spec.js';
export { readGgufTensorF32, readGgufTensorPacked } from './gguf-tensors.js';

/** One tensor of a GGUF checkpoint under its Hugging Face name and shape. */
export interface GgufTensor {
  readonly name: string;
  /** HF shape, slowest first (`ne` reversed). */
  readonly shape: readonly number[];
  readonly info: GgufTensorInfo;
}

/**
 * A GGUF file seen as a Hugging Face checkpoint: spec, tensors by HF name and HF shape,
 * `readF32(name)` that dequantises and, for llama Q/K weights, un-permutes the rows back to HF
 * order (one RoPE path at run time), and `readPacked` that gives a matrix whose GGML type has a
 * weft layout ({@link storedWeftFormat}) as stored, rows un-permuted the same way, without an f32
 * copy; both (and `readRowsF32`, its f32 rows) can read a range of rows alone. `stats` counts
 * what `readF32` and `readRowsF32` decoded. Tensors weft does not use are left out.
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
export async function openGgufCheckpoint(source: ByteSource): Promise<GgufCheckpoint> {
  const file = await openGguf(source);
  const spec = await ggufSpec(file);
  const tensors = new Map<string, GgufTensor>();
  for (const info of file.tensors.values()) {
    const name = hfTensorName(info.name);
    if (name !== undefined) tensors.set(name, { name, shape: [...info.ne].reverse(), info });
  }
  // Shapes must match the spec before any row permutation trusts heads * head_dim.
  checkTensors(spec, tensors, source.name);
  // llama.cpp permutes the rows of llama Q and K over their heads (see permuteRows).
  const permutedHeads = (name: string): number | undefined => {
    if (spec.family !== 'llama') return undefined;
    if (name.endsWith('self_attn.q_proj.weight')) return spec.heads;
    if (name.endsWith('self_attn.k_proj.weight')) return spec.kvHeads;
    return undefined;
  };
  const tensor = (name: string): GgufTensor => {
    const t = tensors.get(name);
    if (t === undefined) throw new ModelFormatError(source.name, name, undefined, 'missing tensor');
    return t;
  };
  const stats = { f32Bytes: 0, largestF32: 0 };
  const counted = (values: Float32Array) => {
    stats.f32Bytes += values.byteLength;
    stats.largestF32 = Math.max(stats.largestF32, values.length);
    return values;
  };
  // The stored rows that hold HF rows [row0, row0 + n) of a matrix whose rows are permuted within
  // blocks of d (a head; 1 when not permuted): the whole blocks they fall in.
  const covering = (row0: number, n: number, d: number): RowRange => {
    const first = row0 - (row0 % d);
    return { row0: first, rows: Math.ceil((row0 + n) / d) * d - first };
  };
  return {
    file,
    spec,
    tensors,
    stats,
    async readF32(name) {
      const t = tensor(name);
      const values = counted(await readGgufTensorF32(t.info));
      const [rows = 1, cols = 1] = t.shape.length === 2 ? t.shape : [t.shape[0], 1];
      const heads = permutedHeads(name);
      return heads === undefined ? values : permuteRows(values, rows, cols, heads, true);
    },
    async readRowsF32(name, row0, n) {
      const t = tensor(name);
      const [rows = 1, cols = 1] = t.shape;
      const heads = permutedHeads(name);
      const read = covering(row0, n, heads === undefined ? 1 : rows / heads);
      const values = counted(await readGgufRowsF32(t.info, read.row0, read.rows, cols));
      if (heads === undefined) return values;
      const hf = permuteRows(values, read.rows, cols, read.rows / (rows / heads), true);
      const at = row0 - read.row0;
      return at === 0 && n === read.rows ? hf : hf.slice(at * cols, (at + n) * cols);
    },
    storedFormat(name) {
      const t = tensors.get(name);
      return t?.shape.length === 2 ? storedWeftFormat(t.info.type) : undefined;
    },
    async readPacked(name, want, range) {
      const t = tensor(name);
      const [rows, cols] = t.shape;
      const same =
        t.shape.length === 2 &&
        storedWeftFormat(t.info.type) === want.format &&
        rows === want.rows &&
        cols === want.cols &&
        want.rotation === 'none';
      if (!same || rows === undefined || cols === undefined) return undefined;
      // A row permutation moves whole rows: each GGUF row is whole blocks, so codes and scales
      // move together and nothing is rounded.
      const heads = permutedHeads(name);
      const to = heads === undefined ? (r: number) => r : (r: number) => hfRowOf(r, rows, heads);
      if (range === undefined) return readGgufTensorPacked(t.info, to);
      const from = covering(range.row0, range.rows, heads === undefined ? 1 : rows / heads);
      return readGgufTensorPacked(t.info, to, PIECE_BYTES, range, from);
    },
  };
}
