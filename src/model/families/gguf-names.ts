/**
 * GGUF names and layouts versus Hugging Face ones: the one table of tensor renames per naming
 * (llama / qwen2 / qwen3 / smollm3 share one, Qwen3.5's `qwen35`, Gemma 3's `gemma3`, LFM2's
 * `lfm2` and Phi-3's `phi3` have their own), and how llama.cpp's converter stores a tensor's values ({@link StoredLayout}: llama and
 * smollm3 Q and K rows permuted for interleaved RoPE, Qwen3.5's value heads tiled, its norms and
 * Gemma 3's stored as 1 + w and `A_log` as -exp(A_log)), both ways.
 */

import type { LinearAttentionSpec, ModelFamily, ModelSpec } from '../spec/spec.js';

type Names = readonly (readonly [string, string])[];

/** Per-layer renames every naming shares: [GGUF suffix, HF suffix]. */
const SHARED_LAYER_NAMES: Names = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_q_norm.weight', 'self_attn.q_norm.weight'],
  ['attn_k_norm.weight', 'self_attn.k_norm.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_gate.weight', 'mlp.gate_proj.weight'],
  ['ffn_up.weight', 'mlp.up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];

/** The llama / qwen2 / qwen3 naming's own per-layer renames. */
const LLAMA_LAYER_NAMES: Names = [
  ...SHARED_LAYER_NAMES,
  ['attn_q.bias', 'self_attn.q_proj.bias'],
  ['attn_k.bias', 'self_attn.k_proj.bias'],
  ['attn_v.bias', 'self_attn.v_proj.bias'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
];

/**
 * Qwen3.5's (`qwen35`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.QWEN35]`, tensor_mapping.py) and the loader in src/models/qwen35.cpp:
 * the MLP's norm is `post_attention_norm` (ATTN_POST_NORM, not FFN_NORM), the Gated DeltaNet's
 * tensors are `attn_qkv`, `attn_gate` and `ssm_*`; `dt_bias` is renamed `dt_proj.bias` by the
 * converter before mapping (hence `ssm_dt.bias`) and `A_log` has no suffix (`ssm_a`).
 */
const QWEN35_LAYER_NAMES: Names = [
  ...SHARED_LAYER_NAMES,
  ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
  ['attn_qkv.weight', 'linear_attn.in_proj_qkv.weight'],
  ['attn_gate.weight', 'linear_attn.in_proj_z.weight'],
  ['ssm_beta.weight', 'linear_attn.in_proj_b.weight'],
  ['ssm_alpha.weight', 'linear_attn.in_proj_a.weight'],
  ['ssm_conv1d.weight', 'linear_attn.conv1d.weight'],
  ['ssm_dt.bias', 'linear_attn.dt_bias'],
  ['ssm_a', 'linear_attn.A_log'],
  ['ssm_norm.weight', 'linear_attn.norm.weight'],
  ['ssm_out.weight', 'linear_attn.out_proj.weight'],
];

/**
 * Gemma 3's (`gemma3`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.GEMMA3]`, tensor_mapping.py): the attention output's norm
 * (`post_attention_layernorm`) is ATTN_POST_NORM `post_attention_norm`, the MLP's input norm
 * (`pre_feedforward_layernorm`) is FFN_PRE_NORM, whose GGUF name is `ffn_norm`, and the MLP
 * output's norm is FFN_POST_NORM `post_ffw_norm`.
 */
const GEMMA3_LAYER_NAMES: Names = [
  ...SHARED_LAYER_NAMES,
  ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_norm.weight', 'pre_feedforward_layernorm.weight'],
  ['post_ffw_norm.weight', 'post_feedforward_layernorm.weight'],
];

/**
 * LFM2's (`lfm2`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.LFM2]`, tensor_mapping.py) and its loader (src/models/lfm2.cpp): the
 * token mixer's `operator_norm` is ATTN_NORM `attn_norm`, the QK-norms `q_layernorm` and
 * `k_layernorm` ATTN_Q_NORM and ATTN_K_NORM, `out_proj` ATTN_OUT, the MLP's `w1`, `w3`, `w2`
 * FFN_GATE, FFN_UP, FFN_DOWN, and the short convolution's `conv.*` SHORTCONV_* `shortconv.*`.
 */
const LFM2_LAYER_NAMES: Names = [
  ['attn_norm.weight', 'operator_norm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_q_norm.weight', 'self_attn.q_layernorm.weight'],
  ['attn_k_norm.weight', 'self_attn.k_layernorm.weight'],
  ['attn_output.weight', 'self_attn.out_proj.weight'],
  ['shortconv.in_proj.weight', 'conv.in_proj.weight'],
  ['shortconv.conv.weight', 'conv.conv.weight'],
  ['shortconv.out_proj.weight', 'conv.out_proj.weight'],
  ['ffn_norm.weight', 'ffn_norm.weight'],
  ['ffn_gate.weight', 'feed_forward.w1.weight'],
  ['ffn_up.weight', 'feed_forward.w3.weight'],
  ['ffn_down.weight', 'feed_forward.w2.weight'],
];

/**
 * Phi-3's (`phi3`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.PHI3]`, tensor_mapping.py: `self_attn.qkv_proj` is ATTN_QKV,
 * `mlp.gate_up_proj` is FFN_UP) and its loader (src/models/phi3.cpp): q | k | v stay fused as
 * `attn_qkv` [q + 2 · kv] (or apart as `attn_q`, `attn_k`, `attn_v`, which `create_tensor_qkv` takes
 * too), gate | up as `ffn_up` [2I] (gate rows first: `ggml_swiglu` applies SiLU to the first half),
 * the MLP's norm as `ffn_norm`. The loader splits the fused ones (`splitFusedView`).
 */
const PHI3_LAYER_NAMES: Names = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_qkv.weight', 'self_attn.qkv_proj.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_up.weight', 'mlp.gate_up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];

const GLOBAL_NAMES: Names = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['output_norm.weight', 'model.norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

/**
 * LFM2's globals: its final norm `model.embedding_norm` maps to TOKEN_EMBD_NORM, `token_embd_norm`
 * (tensor_mapping.py), which llama.cpp's lfm2 loader reads as the output norm
 * (LLM_TENSOR_OUTPUT_NORM_LFM2 in src/llama-arch.cpp, "fix for wrong tensor name").
 */
const LFM2_GLOBAL_NAMES: Names = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['token_embd_norm.weight', 'model.embedding_norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

const layerNames = (family: ModelFamily | undefined): Names =>
  family === 'qwen3_5'
    ? QWEN35_LAYER_NAMES
    : family === 'gemma3'
      ? GEMMA3_LAYER_NAMES
      : family === 'lfm2'
        ? LFM2_LAYER_NAMES
        : family === 'phi3'
          ? PHI3_LAYER_NAMES
          : LLAMA_LAYER_NAMES;

const globalNames = (family: ModelFamily | undefined): Names =>
  family === 'lfm2' ? LFM2_GLOBAL_NAMES : GLOBAL_NAMES;

/**
 * The Hugging Face name of a GGUF tensor of a model of `spec` (the llama / qwen2 / qwen3 naming
 * when absent), e.g. `blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`; undefined
 * for tensors weft does not use (`rope_freqs.weight`, a phi3 file's `rope_factors_short.weight` and
 * `rope_factors_long.weight`, which the spec reads, and blocks from `spec.layers` on: a qwen35
 * file's MTP layers). The one place GGUF names are renamed.
 */
export function hfTensorName(
  ggufName: string,
  spec?: Pick<ModelSpec, 'family' | 'layers'>,
): string | undefined {
  for (const [g, h] of globalNames(spec?.family)) if (ggufName === g) return h;
  const m = /^blk\.(\d+)\.(.+)$/.exec(ggufName);
  if (m === null || (spec !== undefined && Number(m[1]) >= spec.layers)) return undefined;
  for (const [g, h] of layerNames(spec?.family)) if (m[2] === g) return `model.layers.${m[1]}.${h}`;
  return undefined;
}

/** The inverse of {@link hfTensorName} for a model of `family`, for the GGUF writer. */
export function ggufTensorName(hfName: string, family?: ModelFamily): string | undefined {
  for (const [g, h] of globalNames(family)) if (hfName === h) return g;
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  if (m === null) return undefined;
  for (const [g, h] of layerNames(family)) if (m[2] === h) return `blk.${m[1]}.${g}`;
  return undefined;
}

/** Qwen3.5's conv1d and LFM2's short convolution: depthwise [C, 1, K] weights. */
const isConv1d = (hfName: string) =>
  hfName.endsWith('linear_attn.conv1d.weight') || hfName.endsWith('.conv.conv.weight');

/**
 * A tensor's Hugging Face shape from its GGUF `ne` (fastest first): `ne` reversed, except that
 * llama.cpp's converter squeezes a depthwise convolution's weight [C, 1, K] (Qwen3.5's conv1d,
 * LFM2's `conv.conv`: `LFM2Model.modify_tensors`, conversion/lfm2.py) to `ne` [K, C].
 */
export function hfShape(hfName: string, ne: readonly number[]): number[] {
  const shape = [...ne].reverse();
  return isConv1d(hfName) && shape.length === 2 ? [shape[0]!, 1, shape[1]!] : shape;
}

/** The inverse of {@link hfShape}: the `ne` a tensor of Hugging Face shape `shape` is written with. */
export function ggufNe(hfName: string, shape: readonly number[]): number[] {
  const kept = isConv1d(hfName) ? shape.filter((d, i) => i !== 1 || d !== 1) : shape;
  return [...kept].reverse();
}

/**
 * How llama.cpp's converter stores a tensor's values, relative to its Hugging Face values viewed
 * as rows × cols (the first dimension by the rest; a vector is a column): rows and columns moved
 * by permutations, then each value mapped on its own. Absent parts are identities.
 */
export interface StoredLayout {
  /** The Hugging Face row of each stored row. */
  readonly hfRow?: (row: number) => number;
  /** The Hugging Face column of each stored column. */
  readonly hfCol?: (col: number) => number;
  /** A stored value's Hugging Face value, and {@link toStored} the way back. */
  readonly toHf?: (x: number) => number;
  readonly toStored?: (x: number) => number;
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

/**
 * Qwen3.5's value heads as llama.cpp stores them: Hugging Face groups the value heads by the key
 * head they share (head g·r + j is the j-th of key head g's r), llama.cpp tiles them (stored head
 * j·Hk + g) so that ggml's broadcast repeats the Hk key heads over them (`_reorder_v_heads` of
 * `_LinearAttentionVReorderBase` in llama.cpp's conversion/qwen.py). The Hugging Face index of
 * stored index `i` of a run of Hv heads of `width` values starting at `start` (indices outside it
 * stay).
 */
function vHeadIndex(la: LinearAttentionSpec, start: number, width: number): (i: number) => number {
  const hk = la.keyHeads;
  const r = la.valueHeads / hk;
  return (i) => {
    const p = i - start;
    if (p < 0 || p >= la.valueHeads * width) return i;
    const head = Math.floor(p / width);
    const j = Math.floor(head / hk);
    const g = head % hk;
    return start + (g * r + j) * width + (p % width);
  };
}

/**
 * A zero-centred norm weight w as llama.cpp's converter stores it: 1 + w (in f32, as weft's
 * `normWeight` computes the multiplier), read back as stored - 1. For every f32 w,
 * fround(1 + fround(fround(1 + w) - 1)) = fround(1 + w): the multiplier weft computes from the
 * value read is the one the file holds, bit for bit.
 */
const PLUS_ONE: StoredLayout = { toHf: (x) => x - 1, toStored: (x) => x + 1 };

/**
 * How the tensor `hfName` (Hugging Face shape `shape`) of a model of `spec` is stored in a GGUF
 * written by llama.cpp's converter. llama, smollm3 and mistral3 (conversion/llama.py, `LlamaModel`,
 * which `SmolLM3Model` and Ministral 3's converter extend): Q and K rows permuted ({@link permuteRows}). Gemma 3 (conversion/gemma.py,
 * `Gemma3Model.modify_tensors`): every `*norm.weight` stored as 1 + w ({@link PLUS_ONE}). Qwen3.5
 * (conversion/qwen.py, `Qwen3NextModel.modify_tensors` and `_LinearAttentionVReorderBase`): the
 * zero-centred norms (every `*norm.weight` but the DeltaNet's `linear_attn.norm.weight`) stored as
 * 1 + w, `A_log` as -exp(A_log), and the value heads tiled ({@link vHeadIndex}) in the v rows of
 * in_proj_qkv, the rows of in_proj_z, in_proj_b and in_proj_a, `A_log`, `dt_bias`, the v channels
 * of conv1d and the columns of out_proj. q_proj keeps its per-head query | gate rows as they are.
 * LFM2 (conversion/lfm2.py, `LFM2Model`) and Phi-3 (conversion/phi.py, `Phi3MiniModel`): every
 * value as it is (plain norms, NEOX RoPE; Phi-3's fused rows in the checkpoint's order).
 */
export function storedLayout(spec: ModelSpec, hfName: string, shape: readonly number[]): StoredLayout {
  if (
    spec.family === 'llama' ||
    spec.family === 'mistral' ||
    spec.family === 'smollm3' ||
    spec.family === 'ministral3'
  ) {
    // Mistral GGUFs are written as llama (and read back as llama); Ministral 3's as mistral3, whose
    // converter (conversion/mistral3.py) is a LlamaModel.
    const rows = shape[0] ?? 0;
    const heads = hfName.endsWith('self_attn.q_proj.weight')
      ? spec.heads
      : hfName.endsWith('self_attn.k_proj.weight')
        ? spec.kvHeads
        : undefined;
    return heads === undefined ? {} : { hfRow: (r) => hfRowOf(r, rows, heads) };
  }
  if (spec.family === 'gemma3') return hfName.endsWith('norm.weight') ? PLUS_ONE : {};
  if (spec.family !== 'qwen3_5') return {};
  if (hfName.endsWith('norm.weight') && !hfName.endsWith('linear_attn.norm.weight')) return PLUS_ONE;
  const la = spec.linearAttention;
  if (la === undefined || !hfName.includes('.linear_attn.')) return {};
  const vStart = 2 * la.keyHeads * la.keyDim; // the v rows of q | k | v
  if (hfName.endsWith('in_proj_qkv.weight') || isConv1d(hfName))
    return { hfRow: vHeadIndex(la, vStart, la.valueDim) };
  if (hfName.endsWith('in_proj_z.weight')) return { hfRow: vHeadIndex(la, 0, la.valueDim) };
  if (
    hfName.endsWith('in_proj_b.weight') ||
    hfName.endsWith('in_proj_a.weight') ||
    hfName.endsWith('dt_bias')
  )
    return { hfRow: vHeadIndex(la, 0, 1) };
  if (hfName.endsWith('A_log'))
    return { hfRow: vHeadIndex(la, 0, 1), toHf: (x) => Math.log(-x), toStored: (x) => -Math.exp(x) };
  if (hfName.endsWith('out_proj.weight')) return { hfCol: vHeadIndex(la, 0, la.valueDim) };
  return {};
}

/** True when `layout` stores values as they are. */
function isIdentityLayout(layout: StoredLayout): boolean {
  return !layout.hfRow && !layout.hfCol && !layout.toHf;
}

/**
 * Stored rows `[row0, row0 + stored.length / cols)` of a tensor of `rows` rows stored as `layout`,
 * moved to the Hugging Face rows `[hfRow0, hfRow0 + n)` they hold (the caller reads stored rows
 * that cover them: {@link storedRowsFor}), columns moved and values mapped. Returns a new array
 * unless the layout is the identity and the ranges agree.
 */
export function hfRows(
  layout: StoredLayout,
  stored: Float32Array,
  row0: number,
  cols: number,
  hfRow0: number,
  n: number,
): Float32Array {
  const count = stored.length / cols;
  if (isIdentityLayout(layout) && row0 === hfRow0 && count === n) return stored;
  const { hfRow = (r: number) => r, hfCol, toHf } = layout;
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

/** The inverse of {@link hfRows} for a whole tensor: Hugging Face values as `layout` stores them. */
export function storedValues(layout: StoredLayout, hf: Float32Array, cols: number): Float32Array {
  if (isIdentityLayout(layout)) return hf;
  const rows = hf.length / cols;
  const { hfRow = (r: number) => r, hfCol, toStored } = layout;
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
