/**
 * Which GGML type each weight of a GGUF gets: llama.cpp's fallback for a row its block does not
 * divide (`tensor_type_fallback` in src/llama-quant.cpp), and its per-tensor recipe for the K-quant
 * mixes weft writes, Q4_K_M, Q5_K_M and Q3_K_M (`llama_tensor_get_type_impl`): the same types for
 * the same tensors of the same model, so a file weft writes is the file llama-quantize would write
 * (up to the rounding of each block: weft's quantisers are its own).
 */
import { GGML_BLOCKS, GgmlType } from '../quant/ggml/blocks.js';

/** llama.cpp's K-quant mixes weft writes (`llama-quantize <in> <out> Q4_K_M`). */
export type GgufMix = 'Q4_K_M' | 'Q5_K_M' | 'Q3_K_M';

/** The {@link GgufMix}es. */
const GGUF_MIXES: readonly GgufMix[] = ['Q4_K_M', 'Q5_K_M', 'Q3_K_M'];

/** Whether `type` names a {@link GgufMix}. */
export function isGgufMix(type: string): type is GgufMix {
  return GGUF_MIXES.some((m) => m === type);
}

/**
 * llama.cpp's `tensor_type_fallback` table (src/llama-quant.cpp, since its March 2026 refactor,
 * #19770): the block-of-32 type each type of super-blocks of 256 falls back to. The i-quants go to
 * IQ4_NL, Q2_K and Q3_K to Q4_0 (before #19770 they too went to IQ4_NL), and Q4_K, Q5_K, Q6_K to
 * the legacy type of about their bits.
 */
const FALLBACK: ReadonlyMap<number, number> = new Map([
  [GgmlType.IQ2_XXS, GgmlType.IQ4_NL],
  [GgmlType.IQ2_XS, GgmlType.IQ4_NL],
  [GgmlType.IQ2_S, GgmlType.IQ4_NL],
  [GgmlType.IQ3_XXS, GgmlType.IQ4_NL],
  [GgmlType.IQ3_S, GgmlType.IQ4_NL],
  [GgmlType.IQ4_XS, GgmlType.IQ4_NL],
  [GgmlType.Q2_K, GgmlType.Q4_0],
  [GgmlType.Q3_K, GgmlType.Q4_0],
  [GgmlType.Q4_K, GgmlType.Q5_0],
  [GgmlType.Q5_K, GgmlType.Q5_1],
  [GgmlType.Q6_K, GgmlType.Q8_0],
]);

/**
 * The type a weight of `cols` columns (`ne[0]`) gets when `type` is asked for (llama.cpp's
 * `tensor_type_fallback`): `type` itself when its block divides the row; else its entry in
 * {@link FALLBACK} (i-quants → IQ4_NL, Q2_K and Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K →
 * Q8_0), and F16 when that block does not divide the row either. A type with no entry (the blocks
 * of 32, which llama-quantize refuses to fall back from) goes to F16 too, as convert_hf_to_gguf.py
 * does when gguf-py cannot quantise a row.
 */
export function fallbackType(type: number, cols: number): number {
  if (cols % GGML_BLOCKS.get(type)!.elems === 0) return type;
  const fallback = FALLBACK.get(type);
  return fallback !== undefined && cols % GGML_BLOCKS.get(fallback)!.elems === 0 ? fallback : GgmlType.F16;
}

/**
 * A tensor's role in the recipe, from its GGUF name as llama.cpp's `tensor_get_category` finds it
 * (the roles no weft mix treats apart, attn_q, attn_k, ffn_up, ffn_gate, are 'other').
 */
type Category = 'output' | 'token_embd' | 'attn_v' | 'attn_output' | 'ffn_down' | 'other';

function category(name: string): Category {
  if (name === 'output.weight') return 'output';
  if (name === 'token_embd.weight' || name === 'per_layer_token_embd.weight') return 'token_embd';
  // attn_qkv and attn_v (and attn_kv_b) are "attention-v-like" (category_is_attn_v).
  if (name.includes('attn_qkv.weight') || name.includes('attn_kv_b.weight') || name.includes('attn_v.weight'))
    return 'attn_v';
  if (name.includes('attn_k.weight') || name.includes('attn_q.weight')) return 'other';
  if (name.includes('attn_output.weight')) return 'attn_output';
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
 * (non-MoE, non-Falcon) model: the base type (Q4_K, Q5_K; Q3_K for Q3_K_M) except
 * - `output.weight`, or `token_embd.weight` when the file has no output (a tied head): Q6_K, or
 *   Q8_0 when 256 does not divide its rows (all three mixes);
 * - Q4_K_M and Q5_K_M: the attention-v-like weights (`attn_v`, `attn_qkv`, `attn_kv_b`), counted
 *   in layer order, and `ffn_down` of layer i of n: Q6_K where `use_more_bits(i, n)` (the first
 *   and last eighth and every third between);
 * - Q3_K_M: the first two attention-v-like weights Q5_K and the others Q4_K (its i_attention_wv
 *   < 2 rule: the count, not the layer); `ffn_down` of layer i of n Q5_K where i < n/16 (C integer
 *   division, so none below 16 layers) and Q4_K elsewhere (only Falcon keeps Q3_K, in the layers
 *   `use_more_bits` skips); every `attn_output` Q4_K; `attn_q`, `attn_k`, `ffn_gate`, `ffn_up`
 *   and an untied `token_embd` stay Q3_K;
 * then {@link fallbackType} for rows the chosen block does not divide. (llama.cpp's bump of
 * `attn_v` to Q5_K in 70B models, for their 8× smaller attn_v, is a size rule weft does not
 * apply; its separate attn_qkv rule is never reached, attn_qkv being attention-v-like.)
 */
export function mixTypes(
  mix: GgufMix,
  weights: readonly { readonly name: string; readonly ne: readonly number[] }[],
  layers: number,
): Map<string, number> {
  const base = mix === 'Q4_K_M' ? GgmlType.Q4_K : mix === 'Q5_K_M' ? GgmlType.Q5_K : GgmlType.Q3_K;
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
    else if (mix === 'Q3_K_M') {
      if (cat === 'attn_v') type = iAttnV++ < 2 ? GgmlType.Q5_K : GgmlType.Q4_K;
      else if (cat === 'ffn_down')
        type = iFfnDown++ < Math.trunc(layers / 16) ? GgmlType.Q5_K : GgmlType.Q4_K;
      else if (cat === 'attn_output') type = GgmlType.Q4_K;
    } else if (cat === 'attn_v') {
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
