// A checkpoint seen with each output-gated q_proj split into its query rows and its gate rows
// ({@link outputGateParts}), so the GPU placement can stack them as q | k | v | gate.
import type { TensorReader } from '../../../formats/weft-checkpoint.js';
import { deriveSizes, type ModelSpec } from '../../spec/spec.js';
import type { Block } from '../blocks.js';

/**
 * The two parts of an output-gated q_proj `[2 · qWidth, H]` (Qwen3.5), under names of their own:
 * its query rows and its gate rows, each `[qWidth, H]` in head order. Per head, q_proj holds
 * headDim query rows then headDim gate rows; `outputGateView` serves the parts from a checkpoint.
 */
export function outputGateParts(qProj: string): readonly [string, string] {
  const stem = qProj.replace(/q_proj\.weight$/, '');
  return [`${stem}q_query_proj.weight`, `${stem}q_gate_proj.weight`];
}

/**
 * `reader` with, for every attention block of an output-gated spec, two more tensors: q_proj's
 * query rows and its gate rows, each [qWidth, H] (head h's rows of q_proj [2 · qWidth, H] are
 * h · 2D .. h · 2D + D - 1 for the query, the next D for the gate). They are read as f32 rows (a
 * packed file's rows are dequantized and packed again where they are placed). Any other spec:
 * `reader` itself.
 */
export function outputGateView(
  reader: TensorReader,
  spec: ModelSpec,
  blocks: readonly Block[],
): TensorReader {
  if (!spec.outputGate) return reader;
  const { qWidth } = deriveSizes(spec);
  const D = spec.headDim;
  const H = spec.hidden;
  // virtual name → [q_proj, 0 for the query rows or 1 for the gate rows]
  const parts = new Map<string, [string, 0 | 1]>();
  for (const block of blocks) {
    if (block.kind !== 'attention') continue;
    const q = block.names.q;
    const [query, gate] = outputGateParts(q);
    parts.set(query, [q, 0]);
    parts.set(gate, [q, 1]);
  }
  const tensors = new Map<string, { readonly shape: readonly number[] }>(reader.tensors);
  for (const name of parts.keys()) tensors.set(name, { shape: [qWidth, H] });
  // Rows [row0, row0 + rows) of a part, gathered a head's run at a time.
  const rowsOf = async (name: string, row0: number, rows: number): Promise<Float32Array> => {
    const [q, half] = parts.get(name)!;
    const out = new Float32Array(rows * H);
    for (let r = row0; r < row0 + rows; ) {
      const head = Math.floor(r / D);
      const run = Math.min(D - (r % D), row0 + rows - r);
      const from = head * 2 * D + half * D + (r % D);
      const got = reader.readRowsF32
        ? await reader.readRowsF32(q, from, run)
        : (await reader.readF32(q)).subarray(from * H, (from + run) * H);
      out.set(got, (r - row0) * H);
      r += run;
    }
    return out;
  };
  return {
    ...reader,
    tensors,
    readF32: (name) => (parts.has(name) ? rowsOf(name, 0, qWidth) : reader.readF32(name)),
    readRowsF32: (name, row0, rows) =>
      parts.has(name)
        ? rowsOf(name, row0, rows)
        : reader.readRowsF32
          ? reader.readRowsF32(name, row0, rows)
          : reader.readF32(name).then((all) => {
              const cols = all.length / reader.tensors.get(name)!.shape[0]!;
              return all.slice(row0 * cols, (row0 + rows) * cols);
            }),
    ...(reader.readPacked
      ? {
          readPacked: (name, want, range) =>
            parts.has(name) ? Promise.resolve(undefined) : reader.readPacked!(name, want, range),
        }
      : {}),
    ...(reader.storedFormat
      ? { storedFormat: (name) => (parts.has(name) ? undefined : reader.storedFormat!(name)) }
      : {}),
  };
}
