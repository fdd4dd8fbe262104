/**
 * Which GGML type each weight of a GGUF gets: llama.cpp's fallback for a row its block does not
 * divide (`tensor_type_fallback` in src/llama-quant.cpp), and its per-tensor recipe for the K-quant
 * mixes weft writes, Q4_K_M and Q5_K_M (`llama_tensor_get_type_impl`): the same types for the same
 * tensors of the same model, so a file weft writes is the file llama-quantize would write (up to
 * the rounding of each block: weft's quantisers are plain round-to-nearest).
 */
import { GGML_BLOCKS, GgmlType } from './gguf-blocks.js';

/** llama.cpp's K-quant mixes weft writes (`llama-quantize <in> <out> Q4_K_M`). */
export type GgufMix = 'Q4_K_M' | 'Q5_K_M';

/** The {@link GgufMix}es. */
export const GGUF_MIXES: readonly GgufMix[] = ['Q4_K_M', 'Q5_K_M'];

/** Whether `type` names a {@link GgufMix}. */
export function isGgufMix(type: string): type is GgufMix {
  return GGUF_MIXES.some((m) => m === type);
}

/**
 * The type a weight of `cols` columns (`ne[0]`) gets when `type` is asked for (llama.cpp's
 * `tensor_type_fallback`): `type` itself when its block divides the row; else Q4_K → Q5_0, Q5_K →
 * Q5_1, Q6_K → Q8_0 (and the types of blocks of 32 themselves), and F16 when 32 does not divide it
 * either.
 */
export function fallbackType(type: number, cols: number): number {
  if (cols % GGML_BLOCKS.get(type)!.elems === 0) return type;
  const fallback =
    type === GgmlType.Q4_K
      ? GgmlType.Q5_0
      : type === GgmlType.Q5_K
        ? GgmlType.Q5_1
        : type === GgmlType.Q6_K
          ? GgmlType.Q8_0
          : type;
  return cols % GGML_BLOCKS.get(fallback)!.elems === 0 ? fallback : GgmlType.F16;
}

/** A tensor's role in the recipe, from its GGUF name as llama.cpp's `tensor_get_category` finds it. */
type Category = 'output' | 'token_embd' | 'attn_v' | 'ffn_down' | 'other';

function category(name: string): Category {
  if (name === 'output.weight') return 'output';
  if (name === 'token_embd.weight') return 'token_embd';
  // attn_qkv and attn_v (and attn_kv_b) are "attention-v-like" (category_is_attn_v).
  if (name.includes('attn_qkv.weight') || name.includes('attn_kv_b.weight') || name.includes('attn_v.weight'))
    return 'attn_v';
  if (name.includes('ffn_up') || name.includes('ffn_gate')) return 'other';
  if (name.includes('ffn_down')) return 'ffn_down';
  return 'other';
}

/** Layer of a `blk.N.` name (−1 for the others), the order llama.cpp's tensor map keeps them in. */
function layerOf(name: string): number {
  const m = /^blk\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : -1;
}

/**
 * llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third in between
 * (C integer division).
 */
function useMoreBits(i: number, n: number): boolean {
  const eighth = Math.trunc(n / 8);
  return i < eighth || i >= Math.trunc((7 * n) / 8) || (i - eighth) % 3 === 2;
}

/**
 * The GGML type of each weight a `mix` file quantises (by GGUF name; `weights` are those, with
 * their `ne`, and `layers` the model's layer count), as llama-quantize chooses it for a dense
 * (non-MoE, non-Falcon) model: the base type (Q4_K, Q5_K) except
 * - `output.weight`, or `token_embd.weight` when the file has no output (a tied head): Q6_K, or
 *   Q8_0 when 256 does not divide its rows;
 * - the attention-v-like weights (`attn_v`, `attn_qkv`), counted in layer order, and `ffn_down`
 *   of layer i of n: Q6_K where `use_more_bits(i, n)` (the first and last eighth and every third
 *   between);
 * then {@link fallbackType} for rows the chosen block does not divide. (llama.cpp's bump of
 * `attn_v` to Q5_K in 70B models, for their 8× smaller attn_v, is a size rule weft does not
 * apply.)
 */
export function mixTypes(
  mix: GgufMix,
  weights: readonly { readonly name: string; readonly ne: readonly number[] }[],
  layers: number,
): Map<string, number> {
  const base = mix === 'Q4_K_M' ? GgmlType.Q4_K : GgmlType.Q5_K;
  // The tensor map's order: by layer (the others first), then by name.
  const ordered = [...weights].sort(
    (a, b) => layerOf(a.name) - layerOf(b.name) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  const tied = !weights.some((w) => w.name === 'output.weight');
  const nAttnV = weights.filter((w) => category(w.name) === 'attn_v').length;
  let iAttnV = 0;
  let iFfnDown = 0;
  const types = new Map<string, number>();
  for (const { name, ne } of ordered) {
    const cols = ne[0]!;
    let type: number = base;
    const cat = category(name);
    if (cat === 'output' || (tied && cat === 'token_embd'))
      type = cols % GGML_BLOCKS.get(base)!.elems !== 0 ? GgmlType.Q8_0 : GgmlType.Q6_K;
    else if (cat === 'attn_v') {
      if (useMoreBits(iAttnV, nAttnV)) type = GgmlType.Q6_K;
      iAttnV++;
    } else if (cat === 'ffn_down') {
      if (useMoreBits(iFfnDown, layers)) type = GgmlType.Q6_K;
      iFfnDown++;
    }
    types.set(name, fallbackType(type, cols));
  }
  return types;
}
