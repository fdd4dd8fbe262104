// How llama.cpp's converter stores a tensor's values (a family's `storedForm`): the forms several
// families share (Q and K rows permuted for interleaved RoPE, zero-centred norms stored as 1 + w),
// and the moves between stored rows and Hugging Face rows both ways.
import type { ModelSpec } from '../spec/spec.js';
import type { StoredForm } from './family.js';

/**
 * llama.cpp's converter permutes the rows of Llama's Q and K weights for its interleaved RoPE:
 * `w.reshape(heads, 2, rows / heads / 2, cols).swapaxes(1, 2).reshape(rows, cols)`, i.e. HF row
 * `h·d + s·d/2 + i` (head h, half s, pair i) goes to row `h·d + 2i + s`. `inverse` undoes it.
 * `w` is `[rows, cols]` row-major; returns a new array.
 */
export function permuteRows(
  w: Float32Array,
  rows: number,
  cols: number,
  heads: number,
  inverse: boolean,
): Float32Array {
  const d = rows / heads; // rows per head (head_dim)
  const half = d / 2;
  const out = new Float32Array(w.length);
  for (let h = 0; h < heads; h++) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < half; i++) {
        const hf = h * d + s * half + i;
        const gg = h * d + 2 * i + s;
        const [from, to] = inverse ? [gg, hf] : [hf, gg];
        out.set(w.subarray(from * cols, (from + 1) * cols), to * cols);
      }
    }
  }
  return out;
}

/**
 * The Hugging Face row of GGUF row `row` of a Q or K weight with `rows` rows over `heads`
 * heads: the inverse of {@link permuteRows}' move, row h·d + 2i + s back to h·d + s·d/2 + i.
 */
function hfRowOf(row: number, rows: number, heads: number): number {
  const d = rows / heads;
  const r = row % d;
  return row - r + (r & 1) * (d / 2) + (r >> 1);
}

/**
 * Q and K as llama.cpp's Llama converter stores them (conversion/llama.py, `LlamaModel`, which
 * `SmolLM3Model` and Ministral 3's converter extend): their rows permuted ({@link permuteRows});
 * every other tensor as it is.
 */
export function interleavedQk(spec: ModelSpec, hfName: string, shape: readonly number[]): StoredForm {
  const rows = shape[0] ?? 0;
  const heads = hfName.endsWith('self_attn.q_proj.weight')
    ? spec.heads
    : hfName.endsWith('self_attn.k_proj.weight')
      ? spec.kvHeads
      : undefined;
  return heads === undefined ? {} : { hfRow: (r) => hfRowOf(r, rows, heads) };
}

/**
 * A zero-centred norm weight w as llama.cpp's converter stores it: 1 + w (in f32, as weft's
 * `normWeight` computes the multiplier), read back as stored - 1. For every f32 w,
 * fround(1 + fround(fround(1 + w) - 1)) = fround(1 + w): the multiplier weft computes from the
 * value read is the one the file holds, bit for bit.
 */
export const PLUS_ONE: StoredForm = { toHf: (x) => x - 1, toStored: (x) => x + 1 };

/** True when `form` stores values as they are. */
function isIdentity(form: StoredForm): boolean {
  return !form.hfRow && !form.hfCol && !form.toHf;
}

/**
 * Stored rows `[row0, row0 + stored.length / cols)` of a tensor of `rows` rows stored as `form`,
 * moved to the Hugging Face rows `[hfRow0, hfRow0 + n)` they hold (the caller reads stored rows
 * that cover them: {@link storedRowsFor}), columns moved and values mapped. Returns a new array
 * unless the form is the identity and the ranges agree.
 */
export function hfRows(
  form: StoredForm,
  stored: Float32Array,
  row0: number,
  cols: number,
  hfRow0: number,
  n: number,
): Float32Array {
  const count = stored.length / cols;
  if (isIdentity(form) && row0 === hfRow0 && count === n) return stored;
  const { hfRow = (r: number) => r, hfCol, toHf } = form;
  const out = new Float32Array(n * cols);
  for (let r = 0; r < count; r++) {
    const to = hfRow(row0 + r) - hfRow0;
    if (to < 0 || to >= n) continue;
    const src = stored.subarray(r * cols, (r + 1) * cols);
    const dst = out.subarray(to * cols, (to + 1) * cols);
    if (hfCol) for (let c = 0; c < cols; c++) dst[hfCol(c)] = src[c]!;
    else dst.set(src);
    if (toHf) for (let c = 0; c < cols; c++) dst[c] = toHf(dst[c]!);
  }
  return out;
}

/**
 * The stored rows `{ row0, rows }` (one run) that hold Hugging Face rows `[hfRow0, hfRow0 + n)` of
 * a tensor of `rows` rows whose rows move by `hfRow`: the span from the first to the last.
 */
export function storedRowsFor(
  hfRow: ((row: number) => number) | undefined,
  rows: number,
  hfRow0: number,
  n: number,
): { row0: number; rows: number } {
  if (hfRow === undefined) return { row0: hfRow0, rows: n };
  let first = rows;
  let last = -1;
  for (let r = 0; r < rows; r++) {
    const h = hfRow(r);
    if (h >= hfRow0 && h < hfRow0 + n) {
      first = Math.min(first, r);
      last = r;
    }
  }
  return last < 0 ? { row0: 0, rows: 0 } : { row0: first, rows: last - first + 1 };
}

/** The inverse of {@link hfRows} for a whole tensor: Hugging Face values as `form` stores them. */
export function storedValues(form: StoredForm, hf: Float32Array, cols: number): Float32Array {
  if (isIdentity(form)) return hf;
  const rows = hf.length / cols;
  const { hfRow = (r: number) => r, hfCol, toStored } = form;
  const out = new Float32Array(hf.length);
  for (let r = 0; r < rows; r++) {
    const src = hf.subarray(hfRow(r) * cols, (hfRow(r) + 1) * cols);
    const dst = out.subarray(r * cols, (r + 1) * cols);
    for (let c = 0; c < cols; c++) {
      const x = src[hfCol ? hfCol(c) : c]!;
      dst[c] = toStored ? toStored(x) : x;
    }
  }
  return out;
}
