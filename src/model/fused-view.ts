// A family's fused projections (its `fused`: Phi-3's, a mixture's stacked experts) seen as the plain
// linears every other family stores: q_proj, k_proj and v_proj are row ranges of qkv_proj,
// gate_proj and up_proj of gate_up_proj, and each expert's gate, up and down row ranges of the
// [E · R, C] view of a stack [E, R, C]. The loader wraps a checkpoint's reader in this view, so the reference, the GPU
// placement, `weft convert` and `weft export-gguf` see the plain names only; a checkpoint that
// already holds them (one `weft convert` wrote) passes through.
import { ModelFormatError } from '../formats/errors.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { splitAlign, type WeightFormat } from '../quant/formats.js';
import { fusedProjections } from './families/index.js';
import type { ModelSpec } from './spec/spec.js';

/**
 * Where a plain linear's rows lie: rows [row0, row0 + rows) of the fused tensor `fused` seen as
 * [fusedRows, cols]; a stack [E, R, cols] is read by its first index (`slab` = R of those rows each).
 */
interface Part {
  readonly fused: string;
  /** The fused tensor's rows (E · R for a stack). */
  readonly fusedRows: number;
  /** Rows per first index: 1 for a matrix, R for a stack [E, R, C]. */
  readonly slab: number;
  readonly row0: number;
  readonly rows: number;
  readonly cols: number;
}

/**
 * The plain names a checkpoint's tensors (name → shape) stand for, each fused projection it holds
 * replaced by its parts in its place, and where each part's rows lie. A fused tensor of the wrong
 * shape throws {@link ModelFormatError} naming `fileOf(name)`, the tensor and its shape.
 */
function splitNames(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  fileOf: (name: string) => string,
): { tensors: Map<string, { readonly shape: readonly number[] }>; parts: Map<string, Part> } {
  const parts = new Map<string, Part>();
  const fused = new Map<string, [string, Part][]>(); // fused name → its parts by plain name, in row order
  for (let l = 0; l < spec.layers; l++) {
    for (const fp of fusedProjections(spec, l)) {
      const found = tensors.get(fp.name);
      if (found === undefined) continue; // stored apart (a converted checkpoint), or missing
      const cols = fp.shape[fp.shape.length - 1]!;
      const slab = fp.shape.length === 3 ? fp.shape[1] : 1;
      const rows = fp.shape[0] * slab;
      if (found.shape.length !== fp.shape.length || fp.shape.some((d, i) => found.shape[i] !== d))
        throw new ModelFormatError(
          fileOf(fp.name),
          fp.name,
          found.shape,
          `wrong shape, expected [${fp.shape.join(', ')}] (${describeParts(fp.parts)})`,
        );
      const list = fp.parts.map((p): [string, Part] => [
        p.name,
        { fused: fp.name, fusedRows: rows, slab, row0: p.row0, rows: p.rows, cols },
      ]);
      for (const [plain, part] of list) parts.set(plain, part);
      fused.set(fp.name, list);
    }
  }
  if (fused.size === 0) return { tensors: new Map(tensors), parts };
  const out = new Map<string, { readonly shape: readonly number[] }>();
  for (const [name, t] of tensors) {
    const list = fused.get(name);
    if (list === undefined) {
      out.set(name, t);
      continue;
    }
    for (const [plain, part] of list) out.set(plain, { shape: [part.rows, part.cols] });
  }
  return { tensors: out, parts };
}

/** A fused tensor's parts for an error: `4 rows of q_proj, then ...`, the experts' counted. */
function describeParts(parts: readonly { readonly name: string; readonly rows: number }[]): string {
  const shown = parts.slice(0, 4).map((p) => `${p.rows} rows of ${p.name.split('.').at(-2)}`);
  return `${shown.join(', then ')}${parts.length > 4 ? `, ... (${parts.length} parts)` : ''}`;
}

/**
 * The tensors (name → shape) a checkpoint of `spec` presents once its fused projections are split
 * (see {@link splitFusedView}): what `checkTensors` checks before a reader exists (GGUF). Any other
 * family's tensors come back as they are.
 */
export function splitFusedShapes(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  fileOf: (name: string) => string,
): ReadonlyMap<string, { readonly shape: readonly number[] }> {
  return splitNames(spec, tensors, fileOf).tensors;
}

/**
 * `reader` with each fused projection it holds (Phi-3's qkv_proj and gate_up_proj:
 * `fusedProjections`) presented as its parts under the plain names (q_proj, k_proj, v_proj,
 * gate_proj, up_proj) and no longer under its own: a part's rows are read alone from the fused
 * tensor (`readRowsF32`), a packed one as stored where the reader keeps blocks (`readPacked`, at
 * the part's own shape without rotation: a GGUF's Q8_0 or Q4_K rows, a mixture's experts among
 * them, are not re-quantized), and its stored format is the fused tensor's (for an expert, where
 * it fills whole blocks of its placed stack: see `copiesWhole`). A fused tensor of the wrong shape throws
 * {@link ModelFormatError} naming `fileOf(name)`. Any other family, or a checkpoint holding the
 * plain names already: `reader` itself.
 */
export function splitFusedView(
  reader: TensorReader,
  spec: ModelSpec,
  fileOf: (name: string) => string,
): TensorReader {
  const { tensors, parts } = splitNames(spec, reader.tensors, fileOf);
  if (parts.size === 0) return reader;
  const rowsOf = (name: string, row0: number, rows: number): Promise<Float32Array> => {
    const p = parts.get(name);
    if (p === undefined)
      return reader.readRowsF32
        ? reader.readRowsF32(name, row0, rows)
        : reader.readF32(name).then((all) => {
            const cols = all.length / reader.tensors.get(name)!.shape[0]!;
            return all.slice(row0 * cols, (row0 + rows) * cols);
          });
    if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || row0 + rows > p.rows)
      throw new ModelFormatError(fileOf(p.fused), name, [row0, rows], `row range outside [0, ${p.rows})`);
    // A stack is read by whole experts (its first index), then cut to the part's rows.
    const from = p.row0 + row0;
    const first = Math.floor(from / p.slab);
    const slabs = Math.ceil((from + rows) / p.slab) - first;
    const cut = (all: Float32Array, at: number) =>
      all.subarray((from - at) * p.cols, (from - at + rows) * p.cols);
    if (reader.readRowsF32 && p.slab === 1) return reader.readRowsF32(p.fused, from, rows);
    if (reader.readRowsF32)
      return reader.readRowsF32(p.fused, first, slabs).then((got) => cut(got, first * p.slab).slice());
    return reader.readF32(p.fused).then((all) => cut(all, 0).slice());
  };
  return {
    ...reader,
    tensors,
    readF32: (name) => {
      const p = parts.get(name);
      return p ? rowsOf(name, 0, p.rows) : reader.readF32(name);
    },
    readRowsF32: rowsOf,
    ...(reader.readPacked
      ? {
          readPacked: (name, want, range) => {
            const p = parts.get(name);
            if (p === undefined) return reader.readPacked!(name, want, range);
            // Only as the part's own matrix: padded rows or columns, a rotation, or an expert that
            // would not fill whole blocks of its placed stack (see copiesWhole), pack from f32.
            const own = want.rows === p.rows && want.cols === p.cols && want.rotation === 'none';
            if (!own || !copiesWhole(p, want.format)) return Promise.resolve(undefined);
            const rows = { row0: p.row0 + (range?.row0 ?? 0), rows: range?.rows ?? p.rows };
            return reader.readPacked!(p.fused, { ...want, rows: p.fusedRows }, rows);
          },
        }
      : {}),
    ...(reader.storedFormat
      ? {
          storedFormat: (name) => {
            const p = parts.get(name);
            if (p === undefined) return reader.storedFormat!(name);
            const format = reader.storedFormat!(p.fused);
            return format !== undefined && copiesWhole(p, format) ? format : undefined;
          },
        }
      : {}),
  };
}

/**
 * Whether a part is read as stored in `format`: a 2-D fused tensor's always; an expert of a stack
 * when its elements (R · C) are a multiple of `splitAlign(format)`, so that the next expert (or a
 * gated expert's up half) starts on a whole block of codes and scales where `allocateExperts`
 * places the stack. A GGUF row is whole blocks, so the expert's own rows always are; an expert
 * that fails this (q6_k's pair of super-blocks, int8's pair of scales) gets no stored format and
 * is packed from its f32 values in the chosen quant, as before experts were read as stored.
 */
function copiesWhole(p: Part, format: WeightFormat): boolean {
  return p.slab === 1 || (p.rows * p.cols) % splitAlign(format) === 0;
}

/**
 * The inverse of {@link splitFusedView}: tensors under the plain names with each fused projection
 * that `into` holds fused (see FusedProjection.written) stacked from its parts (a layer's q, k and v
 * rows as `self_attn.qkv_proj`, gate and up rows as `mlp.gate_up_proj`, a mixture's experts as one
 * [E, R, C] stack), in the place of the first part, as the published checkpoints (`'checkpoint'`,
 * the test fixtures) and llama.cpp's GGUFs (`'gguf'`, `weft export-gguf`) hold them. Tensors fused
 * already stay; any other family's are returned as they are.
 */
export function fuseProjections<
  T extends { readonly name: string; readonly shape: readonly number[]; readonly data: Float32Array },
>(
  spec: ModelSpec,
  tensors: readonly T[],
  into: 'checkpoint' | 'gguf',
): (T | { name: string; shape: readonly number[]; data: Float32Array })[] {
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const fusedAt = new Map<string, { name: string; shape: readonly number[]; data: Float32Array }>();
  const folded = new Set<string>();
  for (let l = 0; l < spec.layers; l++) {
    for (const fp of fusedProjections(spec, l)) {
      if (fp.written !== undefined && fp.written !== into) continue;
      const parts = fp.parts.map((p) => byName.get(p.name));
      if (!parts.every((p) => p !== undefined)) continue;
      const cols = fp.shape[fp.shape.length - 1]!;
      const data = new Float32Array(fp.shape.reduce((a, b) => a * b, 1)); // [rows of every part, C]
      fp.parts.forEach((p, i) => {
        data.set(parts[i]!.data, p.row0 * cols);
      });
      fusedAt.set(fp.parts[0]!.name, { name: fp.name, shape: fp.shape, data });
      for (const p of fp.parts) folded.add(p.name);
    }
  }
  return tensors.flatMap((t) => {
    const fused = fusedAt.get(t.name);
    return fused ? [fused] : folded.has(t.name) ? [] : [t];
  });
}
