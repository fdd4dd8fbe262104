// The spec fields of the GGUF architectures with keys of their own beyond llama's: Qwen3.5
// (qwen35), Gemma 3, SmolLM3, LFM2 and Phi-3, read as llama.cpp's loader reads them (see
// gguf-spec.ts, which merges them into the base spec).
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero, metaNumber } from '../../formats/gguf/meta.js';
import { readGgufTensorF32 } from '../../formats/gguf/tensors.js';
import type { LayerKind, ModelSpec } from '../spec/spec.js';

/**
 * The softmax scale's 1/s² that llama.cpp's gemma3 loader uses (`llama_model_gemma3::
 * load_arch_hparams`, src/models/gemma3.cpp): head_dim, or hidden / heads for a model of 62 layers
 * (the 27B), whatever the checkpoint's `query_pre_attn_scalar` was; no GGUF key changes it.
 */
export function gemma3QueryScalar(spec: Pick<ModelSpec, 'layers' | 'hidden' | 'heads' | 'headDim'>): number {
  return spec.layers === 62 ? Math.floor(spec.hidden / spec.heads) : spec.headDim;
}

/**
 * Which of `layers` layers slide with llama.cpp's `set_swa_pattern(period)` (src/llama-hparams.cpp):
 * layer i unless i mod period = period - 1, every layer for period 0.
 */
export function slidingPattern(layers: number, period: number): boolean[] {
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
export function gemma3Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const file = g.source.name;
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
 * SmolLM3's layers without RoPE, as llama.cpp's smollm3 loader fixes them
 * (`llama_model_smollm3::load_arch_hparams`, src/models/smollm3.cpp: `n_no_rope_layer_step = 4`,
 * layer i rotates unless (i + 1) mod 4 = 0); no GGUF key changes them.
 */
export function smollm3Fields(base: ModelSpec): Partial<ModelSpec> {
  return { noRopeLayers: Array.from({ length: base.layers }, (_, i) => (i + 1) % 4 === 0) };
}

/**
 * Ministral 3's query temperature (`mistral3.attention.temperature_scale`, 0 or absent: none), its
 * floor scale YaRN's original context as llama.cpp's mistral3 loader takes it (`n_ctx_orig_yarn`);
 * a file with a temperature and no YaRN is refused, as llama.cpp refuses it.
 */
export function ministral3Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const key = 'mistral3.attention.temperature_scale';
  if (meta(g, key) === undefined || meta(g, key) === 0) return {};
  const beta = metaNumber(g, key);
  const s = base.rope.scaling;
  if (s?.type !== 'yarn')
    throw new ModelFormatError(g.source.name, key, beta, 'a query temperature needs YaRN RoPE scaling');
  return { queryTemperature: { beta, floorScale: s.originalMaxPositions } };
}

/**
 * LFM2's layers from `lfm2.attention.head_count_kv`: one count per block, 0 for a
 * short-convolution layer (`LFM2Model.set_gguf_parameters`, conversion/lfm2.py; llama.cpp's loader
 * makes a layer recurrent where it is 0, src/models/lfm2.cpp), the attention layers sharing one
 * count; or one count for every layer (all attention). Without attention layers the KV heads are
 * the query heads (unused).
 */
export function lfm2Layers(g: GgufFile, heads: number): { kvHeads: number; layerKinds: LayerKind[] } {
  const key = 'lfm2.attention.head_count_kv';
  const blocks = metaCount(g, 'lfm2.block_count');
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
      g.source.name,
      key,
      v,
      `must be one count or ${blocks} (one per block): 0 for a conv layer, the attention layers' shared count`,
    );
  return {
    kvHeads: typeof attention[0] === 'number' ? attention[0] : heads,
    layerKinds: counts.map((c) => (c === 0 ? 'conv' : 'attention')),
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
export function lfm2Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const file = g.source.name;
  const k = (key: string) => `lfm2.${key}`;
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
  const { layerKinds } = lfm2Layers(g, base.heads);
  const kernel = metaCount(g, k('shortconv.l_cache'), layerKinds.includes('conv') ? undefined : 3);
  if (kernel < 2) throw new ModelFormatError(file, k('shortconv.l_cache'), kernel, 'must be at least 2');
  return {
    qkvBias: false,
    qkNorm: true,
    layerKinds,
    ...(layerKinds.includes('conv') ? { shortConv: { kernel, bias: false } } : {}),
  };
}

/**
 * Phi-3's own fields from its `phi3.*` metadata and tensors, as llama.cpp's converter writes them
 * (`Phi3MiniModel`, conversion/phi.py) and its loader reads them (src/models/phi3.cpp,
 * `llama_model::get_rope_factors`): `rope.dimension_count` rotated dimensions (partial rotary);
 * LongRoPE from `rope_factors_short.weight` and `rope_factors_long.weight` (one factor per rotary
 * pair) with `rope.scaling.attn_factor` (1 when absent, as llama.cpp takes it) and
 * `rope.scaling.original_context_length`, past which the long factors run (`ropeForContext`, as
 * llama.cpp chooses); without long factors `maxPositions` stops at the original context.
 * `attention.sliding_window`
 * (0: none) is kept as Transformers applies it, where shorter than the context: llama.cpp's phi3
 * loader currently ignores it (runs full attention), so its outputs differ past the window.
 * Refused: long factors without short ones, an attention factor without factors, and linear
 * scaling beside LongRoPE.
 */
export async function phi3Fields(g: GgufFile, base: ModelSpec): Promise<Partial<ModelSpec>> {
  const file = g.source.name;
  const k = (key: string) => `phi3.${key}`;
  const rotaryDim = metaCount(g, k('rope.dimension_count'), base.headDim);
  if (rotaryDim % 2 !== 0 || rotaryDim > base.headDim)
    throw new ModelFormatError(
      file,
      k('rope.dimension_count'),
      rotaryDim,
      `must be even and at most the head width (${base.headDim})`,
    );
  const window = metaCountOrZero(g, k('attention.sliding_window'));
  const short = g.tensors.get('rope_factors_short.weight');
  const attnKey = k('rope.scaling.attn_factor');
  const attn = meta(g, attnKey);
  const rope = { ...base.rope, ...(rotaryDim < base.headDim ? { rotaryDim } : {}) };
  if (short === undefined) {
    if (g.tensors.has('rope_factors_long.weight'))
      throw new ModelFormatError(
        file,
        'rope_factors_long.weight',
        g.tensors.get('rope_factors_long.weight')!.ne,
        'long RoPE factors without rope_factors_short.weight (the factors weft runs)',
      );
    if (attn !== undefined && attn !== 1)
      throw new ModelFormatError(
        file,
        attnKey,
        attn,
        'an attention factor without rope_factors_short.weight',
      );
    const maxPositions = base.maxPositions;
    return {
      rope,
      qkvBias: false,
      ...(window > 0 && window < maxPositions ? { slidingWindow: window } : {}),
    };
  }
  const pairs = rotaryDim / 2;
  if (base.rope.scaling !== undefined)
    throw new ModelFormatError(
      file,
      k('rope.scaling.factor'),
      base.rope.scaling,
      'linear RoPE scaling beside LongRoPE factors',
    );
  const readFactors = async (name: string): Promise<number[]> => {
    const info = g.tensors.get(name)!;
    if (info.ne.length !== 1 || info.ne[0] !== pairs)
      throw new ModelFormatError(
        file,
        name,
        info.ne,
        `must hold ${pairs} factors, one per rotary pair (rope.dimension_count ${rotaryDim})`,
      );
    const factors = [...(await readGgufTensorF32(info))];
    if (!factors.every((f) => f > 0 && Number.isFinite(f)))
      throw new ModelFormatError(file, name, factors.slice(0, 8), 'factors must be finite and > 0');
    return factors;
  };
  const factors = await readFactors('rope_factors_short.weight');
  const longFactors = g.tensors.has('rope_factors_long.weight')
    ? await readFactors('rope_factors_long.weight')
    : undefined;
  if (attn !== undefined && (typeof attn !== 'number' || !(attn > 0) || !Number.isFinite(attn)))
    throw new ModelFormatError(file, attnKey, attn, 'must be a finite number > 0');
  const attentionFactor = Math.fround(typeof attn === 'number' ? attn : 1);
  const original = metaCount(g, k('rope.scaling.original_context_length'), base.maxPositions);
  const long =
    longFactors && original < base.maxPositions
      ? { factors: longFactors, originalMaxPositions: original }
      : undefined;
  const maxPositions = long ? base.maxPositions : Math.min(base.maxPositions, original);
  return {
    rope: { ...rope, scaling: { type: 'longrope', factors, ...(long ? { long } : {}), attentionFactor } },
    maxPositions,
    qkvBias: false,
    ...(window > 0 && window < maxPositions ? { slidingWindow: window } : {}),
  };
}

/**
 * The `rope.dimension_sections` llama.cpp wants for a rotary width of `pairs` (i, i + R/2) pairs:
 * Qwen3.5 rotates with interleaved multimodal RoPE (`ggml_rope_multi`, IMROPE: pair j takes the
 * temporal, height or width position by j mod 3, while j < 3 · that section), and for text the
 * three positions are the token's, so any sections that give every pair one of the three are plain
 * RoPE. These are the counts of each residue mod 3 below `pairs` ([11, 11, 10, 0] for Qwen3.5's 32
 * pairs, the published `mrope_section`).
 */
export function imropeSections(pairs: number): number[] {
  return [0, 1, 2].map((s) => Math.max(0, Math.ceil((pairs - s) / 3))).concat(0);
}

/**
 * The rotary pair of `pairs` that IMROPE `sections` rotate by the fourth position (which llama.cpp
 * sets to 0 for text, leaving the pair unrotated), or -1 when every pair is rotated by the token's
 * position as plain RoPE does (see {@link imropeSections}).
 */
function unrotatedPair(sections: readonly number[], pairs: number): number {
  const total = sections.reduce((a, b) => a + b, 0);
  for (let j = 0; j < pairs; j++) {
    const sector = j % total;
    if (sector >= 3 * sections[sector % 3]!) return j;
  }
  return -1;
}

/**
 * Qwen3.5's own fields from its `qwen35.*` metadata, as llama.cpp's loader reads them
 * (`llama_model_qwen35::load_arch_hparams`, src/models/qwen35.cpp) and its converter writes them
 * (`Qwen3NextModel.set_gguf_parameters`, conversion/qwen.py): the decoder layers are `block_count`
 * less `nextn_predict_layers` (MTP blocks appended after them, left out); a layer is recurrent
 * (Gated DeltaNet) per `attention.recurrent_layers` if present, else unless it is every
 * `full_attention_interval`-th (default 4); `ssm.group_count` key heads of `ssm.state_size`,
 * `ssm.time_step_rank` value heads of `ssm.inner_size / time_step_rank`, `ssm.conv_kernel`;
 * `rope.dimension_count` rotated dimensions (partial rotary) and `rope.dimension_sections` that
 * must rotate every pair by the token's position ({@link unrotatedPair}). Norms are zero-centred
 * and q_proj carries the output gate.
 */
export function qwen35Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const file = g.source.name;
  const k = (key: string) => `qwen35.${key}`;
  const blocks = base.layers;
  const nextn = metaCountOrZero(g, k('nextn_predict_layers'));
  if (nextn >= blocks)
    throw new ModelFormatError(
      file,
      k('nextn_predict_layers'),
      nextn,
      `must be below block_count (${blocks})`,
    );
  const layers = blocks - nextn;
  const valueLength = meta(g, k('attention.value_length'));
  if (valueLength !== undefined && valueLength !== base.headDim)
    throw new ModelFormatError(
      file,
      k('attention.value_length'),
      valueLength,
      `must equal key_length (${base.headDim})`,
    );
  const rotaryDim = metaCount(g, k('rope.dimension_count'), base.headDim);
  if (rotaryDim % 2 !== 0 || rotaryDim > base.headDim)
    throw new ModelFormatError(
      file,
      k('rope.dimension_count'),
      rotaryDim,
      `must be even and at most key_length (${base.headDim})`,
    );
  const sections = meta(g, k('rope.dimension_sections'));
  if (
    !Array.isArray(sections) ||
    sections.length > 4 ||
    !sections.every((x): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0) ||
    !sections.some((x) => x > 0)
  ) {
    throw new ModelFormatError(
      file,
      k('rope.dimension_sections'),
      sections,
      sections === undefined ? 'missing' : 'must be up to 4 non-negative integers, not all 0',
    );
  }
  const padded = [0, 1, 2, 3].map((i) => sections[i] ?? 0);
  const pair = unrotatedPair(padded, rotaryDim / 2);
  if (pair >= 0) {
    throw new ModelFormatError(
      file,
      k('rope.dimension_sections'),
      sections,
      `rotary pair ${pair} falls outside the text sections (llama.cpp leaves it unrotated for text)`,
    );
  }
  const layerKinds = qwen35LayerKinds(g, blocks, layers);
  const keyHeads = metaCount(g, k('ssm.group_count'));
  const valueHeads = metaCount(g, k('ssm.time_step_rank'));
  if (valueHeads % keyHeads !== 0)
    throw new ModelFormatError(
      file,
      k('ssm.time_step_rank'),
      valueHeads,
      `must be a multiple of ssm.group_count (${keyHeads})`,
    );
  const keyDim = metaCount(g, k('ssm.state_size'));
  const inner = metaCount(g, k('ssm.inner_size'));
  const valueDim = inner / valueHeads;
  if (!Number.isInteger(valueDim))
    throw new ModelFormatError(
      file,
      k('ssm.inner_size'),
      inner,
      `must be a multiple of ssm.time_step_rank (${valueHeads})`,
    );
  if (keyDim > 256) throw new ModelFormatError(file, k('ssm.state_size'), keyDim, 'must be at most 256');
  if (valueDim > 256)
    throw new ModelFormatError(
      file,
      k('ssm.inner_size'),
      inner,
      `gives value heads of ${valueDim} (at most 256)`,
    );
  const convKernel = metaCount(g, k('ssm.conv_kernel'));
  if (convKernel < 2)
    throw new ModelFormatError(file, k('ssm.conv_kernel'), convKernel, 'must be at least 2');
  return {
    layers,
    rope: { ...base.rope, rotaryDim },
    qkvBias: false,
    qkNorm: true,
    layerKinds,
    ...(layerKinds.includes('linear')
      ? { linearAttention: { keyHeads, valueHeads, keyDim, valueDim, convKernel } }
      : {}),
    outputGate: true,
    zeroCentredNorms: true,
  };
}

/**
 * The kinds of the first `layers` of `blocks` blocks: `qwen35.attention.recurrent_layers` (one
 * bool per block, true for Gated DeltaNet) if present, else every `full_attention_interval`-th
 * layer (default 4, as llama.cpp) full attention.
 */
function qwen35LayerKinds(g: GgufFile, blocks: number, layers: number): LayerKind[] {
  const key = 'qwen35.attention.recurrent_layers';
  const recurrent = meta(g, key);
  if (recurrent !== undefined) {
    if (
      !Array.isArray(recurrent) ||
      recurrent.length !== blocks ||
      !recurrent.every((x) => typeof x === 'boolean')
    ) {
      throw new ModelFormatError(g.source.name, key, recurrent, `must be ${blocks} booleans (one per block)`);
    }
    return recurrent.slice(0, layers).map((r) => (r ? 'linear' : 'attention'));
  }
  const interval = metaCount(g, 'qwen35.full_attention_interval', 4);
  return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'linear'));
}
