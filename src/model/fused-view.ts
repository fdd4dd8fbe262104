// A family's fused projections (its `fused`: Phi-3's) seen as the plain linears every other family
// stores: q_proj, k_proj and v_proj are row ranges of qkv_proj, gate_proj and up_proj of
// gate_up_proj. The loader wraps a checkpoint's reader in this view, so the reference, the GPU
// placement, `weft convert` and `weft export-gguf` see the plain names only; a checkpoint that
// already holds them (one `weft convert` wrote) passes through.
import { ModelFormatError } from '../formats/errors.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { fusedProjections } from './families/index.js';
import type { ModelSpec } from './spec/spec.js';

/** Where a plain linear's rows lie: rows [row0, row0 + rows) of the fused tensor `fused` [·, cols]. */
interface Part {
  readonly fused: string;
  /** The fused tensor's rows. */
  readonly fusedRows: number;
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
      const [rows, cols] = fp.shape;
      if (found.shape.length !== 2 || found.shape[0] !== rows || found.shape[1] !== cols)
        throw new ModelFormatError(
          fileOf(fp.name),
          fp.name,
          found.shape,
          `wrong shape, expected [${rows}, ${cols}] (${fp.parts.map((p) => `${p.rows} rows of ${p.name.split('.').at(-2)}`).join(', then ')})`,
        );
      const list = fp.parts.map((p): [string, Part] => [
        p.name,
        { fused: fp.name, fusedRows: rows, row0: p.row0, rows: p.rows, cols },
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
 * the part's own shape without rotation: a GGUF's Q8_0 or Q4_K rows are not re-quantized), and its
 * stored format is the fused tensor's. A fused tensor of the wrong shape throws
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
    const from = p.row0 + row0;
    return reader.readRowsF32
      ? reader.readRowsF32(p.fused, from, rows)
      : reader.readF32(p.fused).then((all) => all.slice(from * p.cols, (from + rows) * p.cols));
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
            // Only as the part's own matrix: padded rows or columns, or a rotation, pack from f32.
            if (want.rows !== p.rows || want.cols !== p.cols || want.rotation !== 'none')
              return Promise.resolve(undefined);
            const rows = { row0: p.row0 + (range?.row0 ?? 0), rows: range?.rows ?? p.rows };
            return reader.readPacked!(p.fused, { ...want, rows: p.fusedRows }, rows);
          },
        }
      : {}),
    ...(reader.storedFormat
      ? { storedFormat: (name) => reader.storedFormat!(parts.get(name)?.fused ?? name) }
      : {}),
  };
}

/**
 * The inverse of {@link splitFusedView}: tensors under the plain names with each fused layer's q, k
 * and v rows stacked as `self_attn.qkv_proj` and its gate and up rows as `mlp.gate_up_proj`, in the
 * place of the first part, as the published checkpoints and llama.cpp's GGUFs hold them
 * (`weft export-gguf`, the test fixtures). Tensors fused already stay; any other family's are
 * returned as they are.
 */
export function fuseProjections<
  T extends { readonly name: string; readonly shape: readonly number[]; readonly data: Float32Array },
>(
  spec: ModelSpec,
  tensors: readonly T[],
): (T | { name: string; shape: readonly number[]; data: Float32Array })[] {
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const fusedAt = new Map<string, { name: string; shape: readonly number[]; data: Float32Array }>();
  const folded = new Set<string>();
  for (let l = 0; l < spec.layers; l++) {
    for (const fp of fusedProjections(spec, l)) {
      const parts = fp.parts.map((p) => byName.get(p.name));
      if (!parts.every((p) => p !== undefined)) continue;
      const cols = fp.shape[1];
      const data = new Float32Array(fp.shape[0] * cols); // [rows of every part, H]
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
