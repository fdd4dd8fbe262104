// The spec builders of the families whose config.json carries keys of their own beyond the
// Llama-shaped ones specFromConfig reads: Qwen3.5, Gemma 3, LFM2, Phi-3 and Ministral 3.

import {
  type Fields,
  readAttentionShape,
  readRopeScaling,
  refuseActivation,
  refusePrequantized,
  ropeScalingOf,
} from '../spec/fields.js';
import {
  type LayerKind,
  type LongRopeScaling,
  type ModelSpec,
  type YarnRopeScaling,
  yarnAttentionFactor,
} from '../spec/spec.js';

/**
 * Gemma 3's language model (`Gemma3TextConfig`): embedding scaled by √hidden, zero-centred norms,
 * four per layer, QK-norm, GeGLU (`gelu_pytorch_tanh`), the softmax scale from
 * `query_pre_attn_scalar`, sliding-window layers (`layer_types`, or all but every
 * `sliding_window_pattern`-th) with their own RoPE base (`rope_local_base_freq`) beside global ones
 * (`rope_theta`, with the config's `rope_scaling`). Transformers 5's `rope_parameters`, per layer
 * type, is read too. Soft-capping (Gemma 2's; unset in Gemma 3's published configs) is refused.
 */
export function gemma3Spec(f: Fields, outer: Fields): ModelSpec {
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
 * Qwen3.5's language model (`Qwen3_5TextConfig`, a Qwen3-Next without experts): Gated DeltaNet
 * layers (`linear_*` sizes) beside gated full-attention layers (`layer_types`, or every
 * `full_attention_interval`-th layer), QK-norm, partial rotary (`partial_rotary_factor`, in
 * `rope_parameters` or at the top level), zero-centred norms. `f` is the text config and `outer` the
 * file's root (the wrapper's `tie_word_embeddings` applies when the text config has none). Its
 * multimodal RoPE sections reduce to plain RoPE for text, where the three position ids agree.
 */
export function qwen35Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'qwen3_5 attention has no biases');
  const shape = readAttentionShape(f);
  const rp = f.object('rope_parameters') ?? f;
  const ropeType = rp.string('rope_type') ?? 'default';
  if (ropeType !== 'default') rp.refuse('rope_type', 'unsupported RoPE type for qwen3_5 (only "default")');
  const theta = rp.positive('rope_theta', 10000);
  const factor = rp.number('partial_rotary_factor', 0.25);
  const rotaryDim = Math.trunc(shape.headDim * factor);
  if (!(factor > 0 && factor <= 1) || rotaryDim % 2 !== 0 || rotaryDim < 2) {
    rp.refuse(
      'partial_rotary_factor',
      `must give an even rotary width in (0, head_dim]: head_dim ${shape.headDim}`,
    );
  }
  const linearAttention = {
    keyHeads: f.count('linear_num_key_heads', 16),
    valueHeads: f.count('linear_num_value_heads', 32),
    keyDim: f.count('linear_key_head_dim', 128),
    valueDim: f.count('linear_value_head_dim', 128),
    convKernel: f.count('linear_conv_kernel_dim', 4),
  };
  if (linearAttention.valueHeads % linearAttention.keyHeads !== 0) {
    f.refuse(
      'linear_num_value_heads',
      `must be a multiple of linear_num_key_heads (${linearAttention.keyHeads})`,
    );
  }
  for (const key of ['linear_key_head_dim', 'linear_value_head_dim'] as const) {
    if (f.count(key, 128) > 256) f.refuse(key, 'must be at most 256');
  }
  if (linearAttention.convKernel < 2) f.refuse('linear_conv_kernel_dim', 'must be at least 2');
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_word_embeddings') ? f : outer;
  return {
    family: 'qwen3_5',
    ...shape,
    rope: { theta, layout: 'half', rotaryDim },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    layerKinds: readLayerKinds(f, shape.layers),
    linearAttention,
    outputGate: true,
    zeroCentredNorms: true,
  };
}

/** `layer_types` ("linear_attention" / "full_attention"), or every `full_attention_interval`-th layer full. */
function readLayerKinds(f: Fields, layers: number): LayerKind[] {
  const types = f.obj.layer_types;
  if (types === undefined || types === null) {
    const interval = f.count('full_attention_interval', 4);
    return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'linear'));
  }
  if (!Array.isArray(types) || types.length !== layers) {
    f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
  }
  return types.map((t) => {
    if (t === 'linear_attention') return 'linear';
    if (t === 'full_attention') return 'attention';
    return f.refuse(
      'layer_types',
      `unknown layer type ${JSON.stringify(t)} (linear_attention or full_attention)`,
    );
  });
}

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
export function lfm2Spec(f: Fields): ModelSpec {
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
    family: 'lfm2',
    vocabSize: f.count('vocab_size'),
    hidden,
    intermediate: lfm2FeedForward(f),
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
    ...(layerKinds.includes('conv') ? { shortConv: { kernel, bias: f.boolean('conv_bias', false) } } : {}),
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
      if (t === 'conv') return 'conv';
      if (t === 'full_attention') return 'attention';
      return f.refuse('layer_types', `unknown layer type ${JSON.stringify(t)} (conv or full_attention)`);
    });
  }
  const idxs = f.obj.full_attn_idxs;
  if (idxs === undefined || idxs === null) return Array.from({ length: layers }, () => 'attention');
  if (!Array.isArray(idxs) || !idxs.every((i) => Number.isSafeInteger(i) && i >= 0 && i < layers))
    f.refuse('full_attn_idxs', `must list layer indices below num_hidden_layers (${layers})`);
  return Array.from({ length: layers }, (_, i) => (idxs.includes(i) ? 'attention' : 'conv'));
}

/**
 * Phi-3, Phi-3.5 and Phi-4-mini (`Phi3Config`, `Phi3ForCausalLM`): a Llama block whose checkpoints
 * fuse q | k | v (`self_attn.qkv_proj` [q + 2 · kv, H]) and gate | up (`mlp.gate_up_proj`
 * [2I, H]), which the loader splits into the usual names (`splitFusedView`), with partial rotary
 * (`partial_rotary_factor`, at the top level or in `rope_parameters`: Phi-4-mini's 0.75) and
 * LongRoPE (`rope_scaling` or Transformers 5's `rope_parameters` of type `longrope`, or `su` /
 * `yarn`, which Phi3Config renames `longrope`), read by {@link phi3LongRope}: `short_factor` runs
 * within `original_max_position_embeddings` (Phi3Config's default 4096), where Transformers runs it
 * too, and `long_factor` for an engine whose context passes it, up to `max_position_embeddings`
 * (`ropeForContext` in formats/spec.ts, as llama.cpp chooses between the two).
 * `sliding_window` (Transformers' window mask on every layer) becomes `slidingWindow` where it is
 * shorter than that context (a longer one changes nothing). Phi3Config's defaults: 4096 positions,
 * `rope_theta` 10000, an untied head. `resid_pdrop`, `embd_pdrop` and `attention_dropout` are
 * training-only and ignored; attention biases, MLP biases, activations other than SiLU and other
 * RoPE types are refused.
 */
export function phi3Spec(f: Fields): ModelSpec {
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'phi3 attention has no biases');
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  const shape = readAttentionShape(f);
  // Transformers 5 keeps rope_theta, the type and its lists in rope_parameters; older configs in
  // rope_theta and rope_scaling (null without LongRoPE).
  const rp = f.object('rope_parameters');
  const rs = rp ?? f.object('rope_scaling');
  const theta = (rp ?? f).positive('rope_theta', 10000);
  const factorAt = rp?.has('partial_rotary_factor') ? rp : f;
  const factor = factorAt.number('partial_rotary_factor', 1);
  const rotaryDim = Math.trunc(shape.headDim * factor);
  if (!(factor > 0 && factor <= 1) || rotaryDim % 2 !== 0 || rotaryDim < 2)
    factorAt.refuse(
      'partial_rotary_factor',
      `must give an even rotary width in (0, head_dim]: head_dim ${shape.headDim}`,
    );
  const trained = f.count('max_position_embeddings', 4096);
  const original = f.count('original_max_position_embeddings', 4096);
  const scaling = rs && phi3LongRope(rs, rotaryDim, trained, original);
  const maxPositions = trained;
  const window = f.has('sliding_window') ? f.count('sliding_window') : undefined;
  const bos = f.ids('bos_token_id');
  return {
    family: 'phi3',
    ...shape,
    rope: {
      theta,
      layout: 'half',
      ...(scaling ? { scaling } : {}),
      ...(rotaryDim < shape.headDim ? { rotaryDim } : {}),
    },
    maxPositions,
    tiedEmbeddings: f.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: false,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    ...(window !== undefined && window < maxPositions ? { slidingWindow: window } : {}),
  };
}

/**
 * A Phi-3 config's RoPE scaling as weft runs it (see phi3Spec): none for `default`, else LongRoPE
 * (`longrope`, or the older `su` and `yarn` that Phi3Config renames) from `short_factor` and
 * `long_factor` (each rotaryDim / 2 positive numbers, as Phi3Config validates them; the long list
 * takes over past `original`),
 * with the attention factor of `_compute_longrope_parameters`: `attention_factor` when given, else
 * √(1 + ln(s) / ln(original)) for s = `factor` when given, else `trained` / `original` (1 when
 * s ≤ 1). Factors and attention factor are rounded to f32, as PyTorch holds them.
 */
function phi3LongRope(
  rs: Fields,
  rotaryDim: number,
  trained: number,
  original: number,
): LongRopeScaling | undefined {
  const key = rs.has('rope_type') ? 'rope_type' : 'type';
  const kind = rs.string(key) ?? 'default';
  if (kind === 'default') return undefined;
  if (kind !== 'longrope' && kind !== 'su' && kind !== 'yarn')
    rs.refuse(key, 'unsupported RoPE type for phi3 (longrope, or default; su and yarn read as longrope)');
  const pairs = rotaryDim / 2;
  const list = (name: string): number[] => {
    const v = rs.obj[name];
    if (!Array.isArray(v) || v.length !== pairs || !v.every((x) => typeof x === 'number' && x > 0))
      rs.refuse(
        name,
        `must list ${pairs} positive numbers, one per rotary pair (rotary width ${rotaryDim} = head_dim × partial_rotary_factor)`,
      );
    return v.map((x: number) => Math.fround(x));
  };
  const factors = list('short_factor');
  const longFactors = list('long_factor');
  // The long list runs only for a context past the original one, which the model must allow.
  const long = original < trained ? { factors: longFactors, originalMaxPositions: original } : undefined;
  let attentionFactor = rs.has('attention_factor') ? rs.positive('attention_factor') : undefined;
  if (attentionFactor === undefined) {
    const s = rs.has('factor') ? rs.positive('factor') : trained / original;
    attentionFactor = s <= 1 ? 1 : Math.sqrt(1 + Math.log(s) / Math.log(original));
  }
  return {
    type: 'longrope',
    factors,
    ...(long ? { long } : {}),
    attentionFactor: Math.fround(attentionFactor),
  };
}

/**
 * Ministral 3 (`ministral3`, the language model inside Mistral's `mistral3` wrapper, or
 * `Ministral3ForCausalLM` alone): a Llama with an explicit `head_dim`, YaRN RoPE and Llama 4's
 * query temperature, both read from Transformers 5's `rope_parameters` (or the older `rope_scaling`
 * with `rope_theta` and a top-level `llama_4_scaling_beta`). The temperature's floor scale is
 * YaRN's `original_max_position_embeddings`, as Transformers and llama.cpp take it. A
 * `sliding_window` applies to every layer, as Mistral's. `outer` is the file's root (the
 * wrapper's `tie_word_embeddings` applies when the text config has none).
 */
export function ministral3Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'ministral3 attention has no biases');
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  const shape = readAttentionShape(f);
  const rp = f.object('rope_parameters') ?? f.object('rope_scaling');
  const theta = (rp?.has('rope_theta') ? rp : f).positive('rope_theta', 1_000_000);
  const kind = rp?.string(rp.has('rope_type') ? 'rope_type' : 'type');
  let scaling: ModelSpec['rope']['scaling'];
  if (rp && kind === 'yarn') scaling = yarnOf(rp, f.count('max_position_embeddings'));
  else if (rp) scaling = ropeScalingOf(rp);
  const betaAt = rp?.has('llama_4_scaling_beta') ? rp : f;
  const beta = betaAt.number('llama_4_scaling_beta', 0);
  let queryTemperature: ModelSpec['queryTemperature'];
  if (beta !== 0) {
    const floorScale = rp?.has('original_max_position_embeddings')
      ? rp.count('original_max_position_embeddings')
      : betaAt.refuse(
          'llama_4_scaling_beta',
          'needs rope_parameters.original_max_position_embeddings (its floor scale)',
        );
    queryTemperature = { beta, floorScale };
  }
  const tied = f.has('tie_word_embeddings') ? f : outer;
  const window = f.has('sliding_window') ? f.count('sliding_window') : undefined;
  return {
    family: 'ministral3',
    ...shape,
    rope: scaling ? { theta, scaling, layout: 'half' } : { theta, layout: 'half' },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: false,
    bosId: (f.has('bos_token_id') ? f : outer).ids('bos_token_id')[0],
    eosIds: (f.has('eos_token_id') ? f : outer).ids('eos_token_id'),
    ...(queryTemperature ? { queryTemperature } : {}),
    ...(window === undefined ? {} : { slidingWindow: window }),
  };
}

/**
 * YaRN's fields (`_compute_yarn_parameters`): `factor`; `original_max_position_embeddings`
 * (default the model's `max_position_embeddings`); `beta_fast` 32 and `beta_slow` 1 by default;
 * `truncate` true by default; the attention factor from `attention_factor`, or `mscale` and
 * `mscale_all_dim` (see yarnAttentionFactor).
 */
function yarnOf(rs: Fields, maxPositions: number): YarnRopeScaling {
  const factor = rs.positive('factor');
  const mscale = rs.has('mscale') ? rs.number('mscale') : undefined;
  const mscaleAllDim = rs.has('mscale_all_dim') ? rs.number('mscale_all_dim') : undefined;
  const explicit = rs.has('attention_factor') ? rs.positive('attention_factor') : undefined;
  return {
    type: 'yarn',
    factor,
    originalMaxPositions: rs.count('original_max_position_embeddings', maxPositions),
    betaFast: rs.positive('beta_fast', 32),
    betaSlow: rs.positive('beta_slow', 1),
    truncate: rs.boolean('truncate', true),
    ...(mscale === undefined ? {} : { mscale }),
    ...(mscaleAllDim === undefined ? {} : { mscaleAllDim }),
    attentionFactor: yarnAttentionFactor(factor, mscale, mscaleAllDim, explicit),
  };
}
