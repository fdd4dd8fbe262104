// Gemma 3's language model (`Gemma3TextConfig`; `gemma3` wraps it in a vision-language config):
// the embedding scaled by √hidden, zero-centred norms, four per layer (a sandwich around each
// block), QK-norm, GeGLU, the softmax scale from `query_pre_attn_scalar`, and sliding-window layers
// with their own RoPE base beside global ones. llama.cpp's `gemma3` architecture stores the norms as
// 1 + w and fixes the softmax scale.
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCountOrZero, metaNumber } from '../../formats/gguf/meta.js';
import {
  type Fields,
  readAttentionShape,
  readRopeScaling,
  refusePrequantized,
  ropeScalingOf,
} from '../spec/fields.js';
import { attentionScale, layerAttention, type ModelSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, wrapped } from './decoder.js';
import type { Family, GgufEntries, NamePairs } from './family.js';
import {
  f32,
  GLOBAL_NAMES,
  ggufBaseSpec,
  linearRopeScaling,
  refuseExport,
  refuseRopeFreqs,
  SHARED_LAYER_NAMES,
  u32,
} from './gguf-base.js';
import { PLUS_ONE } from './stored.js';

/**
 * Gemma 3's language model (`Gemma3TextConfig`): embedding scaled by √hidden, zero-centred norms,
 * four per layer, QK-norm, GeGLU (`gelu_pytorch_tanh`), the softmax scale from
 * `query_pre_attn_scalar`, sliding-window layers (`layer_types`, or all but every
 * `sliding_window_pattern`-th) with their own RoPE base (`rope_local_base_freq`) beside global ones
 * (`rope_theta`, with the config's `rope_scaling`). Transformers 5's `rope_parameters`, per layer
 * type, is read too. Soft-capping (Gemma 2's; unset in Gemma 3's published configs) is refused.
 */
function gemma3Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  const act = f.string('hidden_activation') ?? f.string('hidden_act') ?? 'gelu_pytorch_tanh';
  if (act !== 'gelu_pytorch_tanh' && act !== 'gelu_tanh')
    f.refuse(
      f.has('hidden_activation') ? 'hidden_activation' : 'hidden_act',
      'unsupported activation (gelu_pytorch_tanh)',
    );
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'gemma3 attention has no biases');
  for (const key of ['final_logit_softcapping', 'attn_logit_softcapping'])
    if (f.has(key)) f.refuse(key, 'logit soft-capping is not supported (Gemma 3 configs leave it null)');
  if (f.boolean('use_bidirectional_attention', false))
    f.refuse(
      'use_bidirectional_attention',
      'bidirectional attention (EmbeddingGemma) is not a causal language model',
    );
  // Gemma3TextConfig's defaults where Llama's differ: head_dim 256, 4 KV heads.
  const shape = readAttentionShape(f, { headDim: 256, kvHeads: 4 });
  const layerTypes = readSlidingLayers(f, shape.layers);
  const window = f.count('sliding_window', 4096);
  const perType = f.object('rope_parameters');
  const full = perType?.object('full_attention');
  const local = perType?.object('sliding_attention');
  const fullScaling = full ? ropeScalingOf(full) : readRopeScaling(f);
  const theta = (full ?? f).positive('rope_theta', 1_000_000);
  const localTheta = local ? local.positive('rope_theta', 10000) : f.positive('rope_local_base_freq', 10000);
  const localScaling = local ? ropeScalingOf(local) : undefined;
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_word_embeddings') ? f : outer;
  return {
    family: 'gemma3',
    ...shape,
    rope: fullScaling ? { theta, scaling: fullScaling, layout: 'half' } : { theta, layout: 'half' },
    localRope: localScaling
      ? { theta: localTheta, scaling: localScaling, layout: 'half' }
      : { theta: localTheta, layout: 'half' },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', true),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    zeroCentredNorms: true,
    slidingWindow: window,
    slidingLayers: layerTypes,
    embedScale: true,
    sandwichNorms: true,
    activation: 'gelu_tanh',
    attentionScale: 1 / Math.sqrt(f.positive('query_pre_attn_scalar', shape.headDim)),
  };
}

/** Gemma 3's `layer_types` ("sliding_attention" / "full_attention"), or every `sliding_window_pattern`-th layer full. */
function readSlidingLayers(f: Fields, layers: number): boolean[] {
  const types = f.obj.layer_types;
  if (types === undefined || types === null) {
    const pattern = f.count('sliding_window_pattern', 6);
    return Array.from({ length: layers }, (_, i) => (i + 1) % pattern !== 0);
  }
  if (!Array.isArray(types) || types.length !== layers)
    f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
  return types.map((t) => {
    if (t === 'sliding_attention') return true;
    if (t === 'full_attention') return false;
    return f.refuse(
      'layer_types',
      `unknown layer type ${JSON.stringify(t)} (sliding_attention or full_attention)`,
    );
  });
}

/**
 * The softmax scale's 1/s² that llama.cpp's gemma3 loader uses (`llama_model_gemma3::
 * load_arch_hparams`, src/models/gemma3.cpp): head_dim, or hidden / heads for a model of 62 layers
 * (the 27B), whatever the checkpoint's `query_pre_attn_scalar` was; no GGUF key changes it.
 */
function gemma3QueryScalar(spec: Pick<ModelSpec, 'layers' | 'hidden' | 'heads' | 'headDim'>): number {
  return spec.layers === 62 ? Math.floor(spec.hidden / spec.heads) : spec.headDim;
}

/**
 * Which of `layers` layers slide with llama.cpp's `set_swa_pattern(period)` (src/llama-hparams.cpp):
 * layer i unless i mod period = period - 1, every layer for period 0.
 */
function slidingPattern(layers: number, period: number): boolean[] {
  return Array.from({ length: layers }, (_, i) => period === 0 || i % period < period - 1);
}

/**
 * Gemma 3's own fields from its `gemma3.*` metadata, as llama.cpp's loader reads them
 * (`llama_model_gemma3::load_arch_hparams`, src/models/gemma3.cpp) and its converter writes them
 * (`Gemma3Model.set_gguf_parameters`, conversion/gemma.py): layers slide when
 * `attention.sliding_window` is present and not 0, all but every `attention.sliding_window_pattern`-th
 * (a scalar, default 6; llama.cpp ignores a per-layer list, which is refused here), with RoPE base
 * `rope.freq_base_swa` (default 10000) and no scaling; without a window every layer is global. The
 * softmax scale is {@link gemma3QueryScalar}'s. Final-logit soft-capping is refused. Norms are
 * zero-centred, four per layer, with QK-norm, GeGLU and the embedding scaled by √hidden.
 */
function gemma3Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `gemma3.${key}`;
  const softcap = meta(g, k('final_logit_softcapping'));
  if (softcap !== undefined && softcap !== 0)
    throw new ModelFormatError(
      file,
      k('final_logit_softcapping'),
      softcap,
      'logit soft-capping is not supported',
    );
  const valueLength = meta(g, k('attention.value_length'));
  if (valueLength !== undefined && valueLength !== base.headDim)
    throw new ModelFormatError(
      file,
      k('attention.value_length'),
      valueLength,
      `must equal key_length (${base.headDim})`,
    );
  const window = metaCountOrZero(g, k('attention.sliding_window'));
  const periodKey = k('attention.sliding_window_pattern');
  const period = meta(g, periodKey) ?? 6;
  if (typeof period !== 'number' || !Number.isSafeInteger(period) || period < 0)
    throw new ModelFormatError(
      file,
      periodKey,
      period,
      'must be one period (a per-layer list is not read by llama.cpp’s gemma3 loader, which then uses 6)',
    );
  return {
    qkNorm: true,
    zeroCentredNorms: true,
    embedScale: true,
    sandwichNorms: true,
    activation: 'gelu_tanh',
    attentionScale: 1 / Math.sqrt(gemma3QueryScalar(base)),
    localRope: { theta: metaNumber(g, k('rope.freq_base_swa'), 10000), layout: 'half' },
    ...(window > 0 ? { slidingWindow: window, slidingLayers: slidingPattern(base.layers, period) } : {}),
  };
}

/**
 * Gemma 3's (`gemma3`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.GEMMA3]`, tensor_mapping.py): the attention output's norm
 * (`post_attention_layernorm`) is ATTN_POST_NORM `post_attention_norm`, the MLP's input norm
 * (`pre_feedforward_layernorm`) is FFN_PRE_NORM, whose GGUF name is `ffn_norm`, and the MLP
 * output's norm is FFN_POST_NORM `post_ffw_norm`.
 */
const LAYER_NAMES: NamePairs = [
  ...SHARED_LAYER_NAMES,
  ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_norm.weight', 'pre_feedforward_layernorm.weight'],
  ['post_ffw_norm.weight', 'post_feedforward_layernorm.weight'],
];

/**
 * Gemma 3's metadata in the converter's order (conversion/base.py `TextModel.set_gguf_parameters`,
 * then conversion/gemma.py `Gemma3Model.set_gguf_parameters`): the global RoPE base and its linear
 * scaling, the local base as `rope.freq_base_swa`, and `attention.sliding_window` unless no layer
 * slides (the converter leaves it out for `sliding_window_pattern` 1). The sliding layers must be
 * all but every p-th ({@link slidingPeriod}); p is written as `attention.sliding_window_pattern`
 * when it is not the 6 llama.cpp's gemma3 loader assumes (it reads the key since llama.cpp
 * a976ff08, March 2026; older builds take 6 whatever the file says).
 */
function metadata(spec: ModelSpec): GgufEntries {
  refuseForLlamaCpp(spec);
  const k = (key: string) => `gemma3.${key}`;
  const period = slidingPeriod(spec);
  const window: GgufEntries =
    period === undefined ? [] : [[k('attention.sliding_window'), u32(spec.slidingWindow ?? 0)]];
  if (period !== undefined && period !== 6) window.push([k('attention.sliding_window_pattern'), u32(period)]);
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    ...linearRopeScaling(spec, 'gemma3'),
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('rope.freq_base_swa'), f32(spec.localRope?.theta ?? spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('attention.key_length'), u32(spec.headDim)],
    [k('attention.value_length'), u32(spec.headDim)],
    ...window,
  ];
}

/**
 * The `set_swa_pattern` period p that gives a Gemma 3 spec's sliding layers (layer i slides unless
 * i mod p = p - 1; every layer for p = 0: {@link slidingPattern}), preferring llama.cpp's 6;
 * undefined when no layer slides. Throws when no period does.
 */
function slidingPeriod(spec: ModelSpec): number | undefined {
  const sliding = Array.from({ length: spec.layers }, (_, i) => layerAttention(spec, i).window !== undefined);
  if (!sliding.includes(true)) return undefined;
  const first = sliding.indexOf(false);
  for (const p of [6, first + 1]) {
    const pattern = slidingPattern(spec.layers, p);
    if (pattern.every((s, i) => s === sliding[i])) return p;
  }
  throw new InvalidInputError(
    `exportGguf: gemma3 layer_types [${sliding.map((s) => (s ? 'sliding' : 'full'))}] are not every p-th layer full, the only pattern llama.cpp's gemma3 loader takes (attention.sliding_window_pattern)`,
  );
}

/**
 * Refuses a spec that llama.cpp's gemma3 loader would run differently from weft, for want of a
 * GGUF key: a softmax scale other than its fixed one ({@link gemma3QueryScalar}), a RoPE scaling
 * on the local layers (llama.cpp scales only the global ones), or Llama 3 scaling (it reads no
 * `rope_freqs.weight`).
 */
function refuseForLlamaCpp(spec: ModelSpec): void {
  refuseRopeFreqs(spec, 'gemma3');
  // llama.cpp computes its scale in f32: a spec within f32 rounding of it runs the same.
  const scalar = gemma3QueryScalar(spec);
  const scale = attentionScale(spec);
  if (Math.fround(scale) !== Math.fround(1 / Math.sqrt(scalar)))
    refuseExport(
      spec,
      'query_pre_attn_scalar',
      Number((scale ** -2).toPrecision(6)),
      `llama.cpp's gemma3 loader scales attention by 1/√${scalar} (${spec.layers === 62 ? 'hidden / heads for 62 layers' : 'head_dim'}) and has no key for another scale`,
    );
  if (spec.localRope?.scaling)
    refuseExport(
      spec,
      'local RoPE scaling',
      spec.localRope.scaling,
      'llama.cpp does not scale the sliding layers’ RoPE',
    );
}

export const gemma3: Family = {
  configTypes: { gemma3: wrapped('gemma3', gemma3Spec), gemma3_text: gemma3Spec },
  config: (spec) => baseConfig(spec, 'Gemma3ForCausalLM', 'gemma3_text'),
  // The MLP reads `pre_feedforward_layernorm`; its output and attention's are normed (sandwich).
  blocks: (spec) => decoderBlocks(spec, { mlp: { norm: 'pre_feedforward_layernorm.weight' } }),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'gemma3',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, { family: 'gemma3', arch: 'gemma3', ropeFreqs: false });
      return { ...base, ...gemma3Fields(g, base) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: LAYER_NAMES },
    squeezed: [],
    // conversion/gemma.py, `Gemma3Model.modify_tensors`: every `*norm.weight` stored as 1 + w.
    storedForm: (_spec, hfName) => (hfName.endsWith('norm.weight') ? PLUS_ONE : {}),
  },
};
