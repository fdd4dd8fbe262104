/**
 * GGUF names and layouts versus Hugging Face ones for the llama / qwen2 / qwen3 families: the one
 * table of tensor renames (both ways), and the row permutation llama.cpp's converter applies to
 * llama Q and K weights (and its inverse, whole and per row).
 */

/** Per-layer tensor renames shared by llama, qwen2 and qwen3 GGUFs: [GGUF suffix, HF suffix]. */
const LAYER_NAMES: readonly (readonly [string, string])[] = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_q.bias', 'self_attn.q_proj.bias'],
  ['attn_k.bias', 'self_attn.k_proj.bias'],
  ['attn_v.bias', 'self_attn.v_proj.bias'],
  ['attn_q_norm.weight', 'self_attn.q_norm.weight'],
  ['attn_k_norm.weight', 'self_attn.k_norm.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_gate.weight', 'mlp.gate_proj.weight'],
  ['ffn_up.weight', 'mlp.up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];
const GLOBAL_NAMES: readonly (readonly [string, string])[] = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['output_norm.weight', 'model.norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

/**
 * The Hugging Face name of a GGUF tensor of the llama / qwen2 / qwen3 families (which share one
 * naming), e.g. `blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`; undefined for
 * tensors weft does not use (`rope_freqs.weight`). The one place GGUF names are renamed.
 */
export function hfTensorName(ggufName: string): string | undefined {
  for (const [g, h] of GLOBAL_NAMES) if (ggufName === g) return h;
  const m = /^blk\.(\d+)\.(.+)$/.exec(ggufName);
  if (m === null) return undefined;
  for (const [g, h] of LAYER_NAMES) if (m[2] === g) return `model.layers.${m[1]}.${h}`;
  return undefined;
}

/** The inverse of {@link hfTensorName}, for the GGUF writer. */
export function ggufTensorName(hfName: string): string | undefined {
  for (const [g, h] of GLOBAL_NAMES) if (hfName === h) return g;
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  if (m === null) return undefined;
  for (const [g, h] of LAYER_NAMES) if (m[2] === h) return `blk.${m[1]}.${g}`;
  return undefined;
}

/**
 * llama.cpp's converter permutes the rows of llama Q and K weights for its interleaved RoPE:
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
 * The Hugging Face row of GGUF row `row` of a llama Q or K weight with `rows` rows over `heads`
 * heads: the inverse of {@link permuteRows}' move, row h·d + 2i + s back to h·d + s·d/2 + i.
 */
export function hfRowOf(row: number, rows: number, heads: number): number {
  const d = rows / heads;
  const r = row % d;
  return row - r + (r & 1) * (d / 2) + (r >> 1);
}
