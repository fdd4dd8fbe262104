// LFM2 and LFM2.5 (`Lfm2Config`, `Lfm2ForCausalLM`): per layer a gated short convolution or GQA
// attention with QK-norm, each followed by a SwiGLU MLP, under LFM2's own names (`operator_norm`,
// `q_layernorm`, `out_proj`, `feed_forward.w1`..`w3`, the final `embedding_norm`). llama.cpp's
// `lfm2` architecture lists KV heads per layer (0 for a convolution) and stores every value as it is.
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero } from '../../formats/gguf/meta.js';
import { type Fields, readRopeScaling, refusePrequantized, ropeScalingOf } from '../spec/fields.js';
import { type LayerKind, layerKind, type ModelSpec } from '../spec/spec.js';
import { baseConfig, type DecoderRenames, decoderBlocks } from './decoder.js';
import type { Family, GgufEntries, NamePairs } from './family.js';
import { f32, ggufBaseSpec, linearRopeScaling, refuseExport, refuseRopeFreqs, u32 } from './gguf-base.js';

/**
 * LFM2 and LFM2.5 (`Lfm2Config`, `Lfm2ForCausalLM`): per layer a gated short convolution (`conv`)
 * or GQA attention with QK-norm (`full_attention`), from `layer_types`, else `full_attn_idxs` (the
 * attention layers; absent: every layer), each followed by a SwiGLU MLP of the width
 * {@link lfm2FeedForward} derives. The config class's own keys and defaults: `norm_eps` (1e-5),
 * `conv_L_cache` (3), `conv_bias` (false), `theta` before `rope_theta` (1e6; Transformers 5's
 * `rope_parameters`, flat or per layer type), `tie_embedding` before `tie_word_embeddings` (true),
 * `head_dim` hidden / heads, 8 KV heads, 128000 positions. A non-causal config (`is_causal: false`,
 * LFM2's bidirectional embedding models) is refused.
 */
export function lfm2Spec(f: Fields, family = 'lfm2', feedForward = lfm2FeedForward): ModelSpec {
  refusePrequantized(f);
  if (!f.boolean('is_causal', true))
    f.refuse('is_causal', 'a bidirectional LFM2 (an embedding model) is not a causal language model');
  const hidden = f.count('hidden_size');
  const heads = f.count('num_attention_heads');
  const kvHeads = f.count('num_key_value_heads', 8);
  if (heads % kvHeads !== 0) f.refuse('num_key_value_heads', `must divide num_attention_heads (${heads})`);
  if (!f.has('head_dim') && hidden % heads !== 0)
    f.refuse('hidden_size', `must be a multiple of num_attention_heads (${heads}) when head_dim is absent`);
  const headDim = f.count('head_dim', hidden / heads);
  if (headDim % 2 !== 0) f.refuse('head_dim', 'must be even for RoPE');
  const layers = f.count('num_hidden_layers');
  const layerKinds = readLfm2LayerKinds(f, layers);
  const kernel = f.count('conv_L_cache', 3);
  if (kernel < 2) f.refuse('conv_L_cache', 'must be at least 2 (the window holds kernel - 1 past tokens)');
  // Lfm2Config: theta = `theta`, else `rope_theta`, else 1e6; `rope_parameters` (Transformers 5)
  // holds it instead, per layer type ({ full_attention: {...}, conv: null }) or flat.
  const theta = f.positive('theta', f.positive('rope_theta', 1_000_000));
  const rp = f.object('rope_parameters');
  const ropeFields = rp?.object('full_attention') ?? rp;
  const scaling = ropeFields ? ropeScalingOf(ropeFields) : readRopeScaling(f);
  const ropeTheta = ropeFields ? ropeFields.positive('rope_theta', theta) : theta;
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_embedding') ? 'tie_embedding' : 'tie_word_embeddings';
  return {
    family,
    vocabSize: f.count('vocab_size'),
    hidden,
    intermediate: feedForward(f),
    layers,
    heads,
    kvHeads,
    headDim,
    rmsEps: f.positive('norm_eps', 1e-5),
    rope: scaling ? { theta: ropeTheta, scaling, layout: 'half' } : { theta: ropeTheta, layout: 'half' },
    maxPositions: f.count('max_position_embeddings', 128_000),
    tiedEmbeddings: f.boolean(tied, true),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    layerKinds,
    ...(layerKinds.includes('shortconv')
      ? { shortConv: { kernel, bias: f.boolean('conv_bias', false) } }
      : {}),
  };
}

/**
 * The MLP width of an LFM2 config as `Lfm2MLP.__init__` computes it from `block_ff_dim` (else
 * `intermediate_size`, 12288): with `block_auto_adjust_ff_dim` (default true), int(2 · ff / 3), then,
 * unless `block_ffn_dim_multiplier` is null (default 1.0), int(multiplier · that) rounded up to a
 * multiple of `block_multiple_of` (default 256). (llama.cpp's converter rounds up even when the
 * multiplier is null; Transformers does not, and weft follows Transformers.)
 */
function lfm2FeedForward(f: Fields): number {
  const key = f.has('block_ff_dim') ? 'block_ff_dim' : 'intermediate_size';
  let width = f.count(key, 12288);
  if (!f.boolean('block_auto_adjust_ff_dim', true)) return width;
  width = Math.trunc((2 * width) / 3);
  if (f.obj.block_ffn_dim_multiplier !== null) {
    const multipleOf = f.count('block_multiple_of', 256);
    width = Math.trunc(f.positive('block_ffn_dim_multiplier', 1) * width);
    width = multipleOf * Math.ceil(width / multipleOf);
  }
  if (width < 1) f.refuse(key, 'gives an MLP width below 1 once adjusted (block_auto_adjust_ff_dim)');
  return width;
}

/**
 * LFM2's `layer_types` ("conv" / "full_attention"), else `full_attn_idxs` (the attention layers'
 * indices), else every layer attention, as `Lfm2Config` fills them.
 */
function readLfm2LayerKinds(f: Fields, layers: number): LayerKind[] {
  const types = f.obj.layer_types;
  if (types !== undefined && types !== null) {
    if (!Array.isArray(types) || types.length !== layers)
      f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
    return types.map((t): LayerKind => {
      if (t === 'conv') return 'shortconv';
      if (t === 'full_attention') return 'attention';
      return f.refuse('layer_types', `unknown layer type ${JSON.stringify(t)} (conv or full_attention)`);
    });
  }
  const idxs = f.obj.full_attn_idxs;
  if (idxs === undefined || idxs === null) return Array.from({ length: layers }, () => 'attention');
  if (!Array.isArray(idxs) || !idxs.every((i) => Number.isSafeInteger(i) && i >= 0 && i < layers))
    f.refuse('full_attn_idxs', `must list layer indices below num_hidden_layers (${layers})`);
  return Array.from({ length: layers }, (_, i) => (idxs.includes(i) ? 'attention' : 'shortconv'));
}

/**
 * LFM2's layers from `lfm2.attention.head_count_kv`: one count per block, 0 for a
 * short-convolution layer (`LFM2Model.set_gguf_parameters`, conversion/lfm2.py; llama.cpp's loader
 * makes a layer recurrent where it is 0, src/models/lfm2.cpp), the attention layers sharing one
 * count; or one count for every layer (all attention). Without attention layers the KV heads are
 * the query heads (unused).
 */
export function lfm2Layers(
  g: GgufFile,
  heads: number,
  arch = 'lfm2',
): { kvHeads: number; layerKinds: LayerKind[] } {
  const key = `${arch}.attention.head_count_kv`;
  const blocks = metaCount(g, `${arch}.block_count`);
  const v = meta(g, key);
  if (typeof v === 'number') {
    const kvHeads = metaCount(g, key);
    return { kvHeads, layerKinds: Array.from({ length: blocks }, () => 'attention') };
  }
  const counts = Array.isArray(v) ? v : [];
  const attention = [...new Set(counts.filter((c) => c !== 0))];
  if (
    counts.length !== blocks ||
    !counts.every((c) => typeof c === 'number' && Number.isSafeInteger(c) && c >= 0) ||
    attention.length > 1
  )
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v,
      `must be one count or ${blocks} (one per block): 0 for a conv layer, the attention layers' shared count`,
    );
  return {
    kvHeads: typeof attention[0] === 'number' ? attention[0] : heads,
    layerKinds: counts.map((c) => (c === 0 ? 'shortconv' : 'attention')),
  };
}

/**
 * LFM2's own fields from its `lfm2.*` metadata, as llama.cpp's loader reads them
 * (`llama_model_lfm2::load_arch_hparams`, src/models/lfm2.cpp) and its converter writes them
 * (`LFM2Model.set_gguf_parameters`, conversion/lfm2.py): the layer kinds ({@link lfm2Layers}),
 * the short convolution's width `shortconv.l_cache` (no biases: llama.cpp's graph has none), QK-norm
 * with plain weights. Refused: a sliding window (`attention.sliding_window`, which llama.cpp's
 * loader applies to every attention layer and Transformers' Lfm2 has not), a non-causal model
 * (`attention.causal` false, the bidirectional embedding models) and ColBERT's `dense_2.weight`
 * output projection.
 */
export function lfm2Fields(g: GgufFile, base: ModelSpec, arch = 'lfm2'): Partial<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `${arch}.${key}`;
  const window = metaCountOrZero(g, k('attention.sliding_window'));
  if (window > 0)
    throw new ModelFormatError(
      file,
      k('attention.sliding_window'),
      window,
      'sliding-window LFM2 attention is not implemented (Transformers’ Lfm2 has none)',
    );
  const causal = meta(g, k('attention.causal'));
  if (causal !== undefined && causal !== true)
    throw new ModelFormatError(
      file,
      k('attention.causal'),
      causal,
      'a non-causal LFM2 is not a language model',
    );
  if (g.tensors.has('dense_2.weight'))
    throw new ModelFormatError(
      file,
      'dense_2.weight',
      g.tensors.get('dense_2.weight')!.ne,
      'an LFM2 embedding model (ColBERT’s output projection), not a language model',
    );
  const { layerKinds } = lfm2Layers(g, base.heads, arch);
  const kernel = metaCount(g, k('shortconv.l_cache'), layerKinds.includes('shortconv') ? undefined : 3);
  if (kernel < 2) throw new ModelFormatError(file, k('shortconv.l_cache'), kernel, 'must be at least 2');
  return {
    qkvBias: false,
    qkNorm: true,
    layerKinds,
    ...(layerKinds.includes('shortconv') ? { shortConv: { kernel, bias: false } } : {}),
  };
}

/**
 * LFM2's (`lfm2`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.LFM2]`, tensor_mapping.py) and its loader (src/models/lfm2.cpp): the
 * token mixer's `operator_norm` is ATTN_NORM `attn_norm`, the QK-norms `q_layernorm` and
 * `k_layernorm` ATTN_Q_NORM and ATTN_K_NORM, `out_proj` ATTN_OUT, the MLP's `w1`, `w3`, `w2`
 * FFN_GATE, FFN_UP, FFN_DOWN, and the short convolution's `conv.*` SHORTCONV_* `shortconv.*`.
 */
export const LFM2_LAYER_NAMES: NamePairs = [
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
 * LFM2's globals: its final norm `model.embedding_norm` maps to TOKEN_EMBD_NORM, `token_embd_norm`
 * (tensor_mapping.py), which llama.cpp's lfm2 loader reads as the output norm
 * (LLM_TENSOR_OUTPUT_NORM_LFM2 in src/llama-arch.cpp, "fix for wrong tensor name").
 */
export const LFM2_GLOBAL_NAMES: NamePairs = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['token_embd_norm.weight', 'model.embedding_norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

/**
 * LFM2's metadata in the converter's order (conversion/base.py `TextModel.set_gguf_parameters`,
 * then conversion/lfm2.py `LFM2Model.set_gguf_parameters`, whose later `feed_forward_length` and
 * `layer_norm_rms_epsilon` replace the base's values in place): `attention.head_count_kv` one
 * count per layer, 0 for a short-convolution layer (i32, as gguf-py types Python ints), the MLP
 * width as adjusted (`_add_feed_forward_length`), `vocab_size` and `shortconv.l_cache`. No
 * key_length (LFM2 configs have no head_dim; llama.cpp takes hidden / heads).
 */
export function lfm2Metadata(spec: ModelSpec, arch = 'lfm2'): GgufEntries {
  refuseForLlamaCpp(spec, arch);
  const k = (key: string) => `${arch}.${key}`;
  const kv = Array.from({ length: spec.layers }, (_, i) =>
    layerKind(spec, i) === 'shortconv' ? 0 : spec.kvHeads,
  );
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), { type: 'i32[]', value: kv }],
    ...linearRopeScaling(spec, arch),
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('vocab_size'), u32(spec.vocabSize)],
    [k('shortconv.l_cache'), u32(spec.shortConv?.kernel ?? 3)],
  ];
}

/**
 * LFM2's own keys (`Lfm2Config`): its layer types, the convolution's width and bias, `norm_eps`,
 * and the MLP width as it is (`block_ff_dim` without `block_auto_adjust_ff_dim`).
 */
function ownConfig(spec: ModelSpec): Record<string, unknown> {
  if (spec.family !== 'lfm2') return {};
  return {
    layer_types: Array.from({ length: spec.layers }, (_, i) =>
      spec.layerKinds?.[i] === 'shortconv' ? 'conv' : 'full_attention',
    ),
    conv_L_cache: spec.shortConv?.kernel ?? 3,
    conv_bias: spec.shortConv?.bias ?? false,
    norm_eps: spec.rmsEps,
    block_ff_dim: spec.intermediate,
    block_auto_adjust_ff_dim: false,
  };
}

/**
 * What llama.cpp's lfm2 loader and graph (src/models/lfm2.cpp) cannot hold: convolution biases, a
 * head_dim other than hidden / heads (q and out_proj are [H, H]), and Llama 3 scaling (it reads
 * no `rope_freqs.weight`).
 */
function refuseForLlamaCpp(spec: ModelSpec, arch: string): void {
  refuseRopeFreqs(spec, arch);
  if (spec.shortConv?.bias)
    refuseExport(
      spec,
      'conv_bias',
      true,
      `llama.cpp’s ${arch} graph has no biases in in_proj, the convolution or out_proj`,
    );
  if (spec.heads * spec.headDim !== spec.hidden)
    refuseExport(
      spec,
      'head_dim',
      spec.headDim,
      `llama.cpp’s ${arch} loader wants num_attention_heads × head_dim = hidden_size (${spec.hidden})`,
    );
}

/** LFM2's names: the short convolutions under the kind's own; attention and the MLP renamed. */
export const LFM2_RENAMES = {
  attention: {
    norm: 'operator_norm.weight',
    qNorm: 'self_attn.q_layernorm.weight',
    kNorm: 'self_attn.k_layernorm.weight',
    o: 'self_attn.out_proj.weight',
  },
  mlp: {
    norm: 'ffn_norm.weight',
    gate: 'feed_forward.w1.weight',
    up: 'feed_forward.w3.weight',
    down: 'feed_forward.w2.weight',
  },
} as const satisfies DecoderRenames;

export const lfm2: Family = {
  configTypes: { lfm2: (f) => lfm2Spec(f) },
  config: (spec) => ({ ...baseConfig(spec, 'Lfm2ForCausalLM', 'lfm2'), ...ownConfig(spec) }),
  blocks: (spec) => decoderBlocks(spec, LFM2_RENAMES),
  // Applied after the last layer (Transformers' `embedding_norm`).
  finalNorm: 'model.embedding_norm.weight',
  fused: () => [],
  gguf: {
    arch: 'lfm2',
    reads: true,
    async spec(g) {
      const heads = (h: number) => lfm2Layers(g, h).kvHeads;
      const base = await ggufBaseSpec(g, { family: 'lfm2', arch: 'lfm2', kvHeads: heads, ropeFreqs: false });
      return { ...base, ...lfm2Fields(g, base) };
    },
    metadata: (spec) => lfm2Metadata(spec),
    names: { global: LFM2_GLOBAL_NAMES, layer: LFM2_LAYER_NAMES },
    squeezed: ['.conv.conv.weight'],
    // conversion/lfm2.py, `LFM2Model`: plain norms, NEOX RoPE, every value as it is.
    storedForm: () => ({}),
  },
};
