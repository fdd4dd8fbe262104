// Gemma 4's GGUF side (the `gemma4` family's, in a file of its own for length): llama.cpp's
// `gemma4` architecture both ways, as its converter writes it (conversion/gemma.py `Gemma4Model`,
// over `Gemma3Model` and conversion/base.py `TextModel`) and its loader and graph read it
// (src/models/gemma4.cpp). Values are stored as Transformers holds them (no 1 + w norms, no
// permutation); the full layers' proportional RoPE is the generated `rope_freqs.weight`.
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero, metaNumber } from '../../formats/gguf/meta.js';
import type { GgufEntry } from '../../formats/gguf/write.js';
import {
  attentionScale,
  firstSharedLayer,
  kvSourceLayer,
  layerAttention,
  type ModelSpec,
  type RopeSpec,
} from '../spec/spec.js';
import type { GgufEntries, GgufFamily, NamePairs } from './family.js';
import {
  f32,
  GLOBAL_NAMES,
  ggufBaseSpec,
  refuseExport,
  SHARED_LAYER_NAMES,
  tensorReads,
  u32,
} from './gguf-base.js';

/** Where llama.cpp's converter parks a pair that does not turn: θ / 1e30 ≈ 0 (`generate_extra_tensors`). */
const UNROTATED = Math.fround(1e30);

/**
 * Gemma 4's whole-tensor renames (gguf-py constants.py, tensor_mapping.py): the per-layer inputs'
 * table PER_LAYER_TOKEN_EMBD, projection PER_LAYER_MODEL_PROJ and norm PER_LAYER_PROJ_NORM.
 * `rope_freqs.weight` has no Hugging Face tensor: {@link gemma4RopeFreqs} writes it, the reader
 * reads it as the full layers' RoPE.
 */
const GEMMA4_GLOBAL_NAMES: NamePairs = [
  ...GLOBAL_NAMES,
  ['per_layer_token_embd.weight', 'model.embed_tokens_per_layer.weight'],
  ['per_layer_model_proj.weight', 'model.per_layer_model_projection.weight'],
  ['per_layer_proj_norm.weight', 'model.per_layer_projection_norm.weight'],
];

/**
 * Gemma 4's per-layer renames: Gemma 3's sandwich norms (ATTN_POST_NORM `post_attention_norm`,
 * FFN_PRE_NORM `ffn_norm`, FFN_POST_NORM `post_ffw_norm`), the layer scalar LAYER_OUT_SCALE (the
 * converter appends `.weight` to `layer_scalar`), and the per-layer input's gate PER_LAYER_INP_GATE,
 * projection PER_LAYER_PROJ and norm PER_LAYER_POST_NORM. The mixture's tensors are left out (not
 * run yet).
 */
const GEMMA4_LAYER_NAMES: NamePairs = [
  ...SHARED_LAYER_NAMES,
  ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_norm.weight', 'pre_feedforward_layernorm.weight'],
  ['post_ffw_norm.weight', 'post_feedforward_layernorm.weight'],
  ['layer_output_scale.weight', 'layer_scalar'],
  ['inp_gate.weight', 'per_layer_input_gate.weight'],
  ['proj.weight', 'per_layer_projection.weight'],
  ['post_norm.weight', 'post_per_layer_input_norm.weight'],
];

/**
 * The layer whose cache llama.cpp gives KV-shared layer `layer` (src/llama-model.cpp, the GEMMA3N /
 * GEMMA4 `layer_reuse_cb`): the second-last layer before the shared ones for a sliding layer, the
 * last for a full one, whatever their types.
 */
function llamaCppKvSource(spec: ModelSpec, layer: number): number {
  return firstSharedLayer(spec) - (layerAttention(spec, layer).window !== undefined ? 2 : 1);
}

/** The layer whose cache weft gives layer `layer` ({@link kvSourceLayer}); undefined where none. */
function weftKvSource(spec: ModelSpec, layer: number): number | undefined {
  try {
    return kvSourceLayer(spec, layer);
  } catch {
    return undefined;
  }
}

/** The first KV-shared layer whose cache llama.cpp takes from another layer than weft does. */
function kvSharingMismatch(spec: ModelSpec): number | undefined {
  for (let l = firstSharedLayer(spec); l < spec.layers; l++)
    if (weftKvSource(spec, l) !== llamaCppKvSource(spec, l)) return l;
  return undefined;
}

/**
 * Gemma 4's metadata in the converter's order: `TextModel.set_gguf_parameters`, then
 * `Gemma3Model`'s and `Gemma4Model`'s (a key written again keeps its first place, as gguf-py's
 * writer overwrites it): the sliding layers' head as `key_length_swa` beside the full layers'
 * `key_length`, the layer types as the bool array `sliding_window_pattern`, `head_count_kv` per
 * layer with the full layers' own KV heads (written where Transformers' config has
 * `num_global_key_value_heads`: with `attention_k_eq_v`), `feed_forward_length` per layer with
 * double-wide MLPs, `shared_kv_layers` and `embedding_length_per_layer_input` (0 for none), and
 * both RoPE widths whole (the full layers' proportional RoPE is `rope_freqs.weight`).
 */
function gemma4Metadata(spec: ModelSpec): GgufEntries {
  refuseForLlamaCpp(spec);
  const k = (key: string) => `gemma4.${key}`;
  const full = spec.fullAttention ?? { headDim: spec.headDim, kvHeads: spec.kvHeads, valueIsKey: false };
  const sliding = Array.from({ length: spec.layers }, (_, i) => layerAttention(spec, i).window !== undefined);
  const first = firstSharedLayer(spec);
  const perLayer = (values: number[]): GgufEntry => ({ type: 'i32[]', value: values });
  const softcap: GgufEntries = spec.logitSoftcap
    ? [[k('final_logit_softcapping'), f32(spec.logitSoftcap)]]
    : [];
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [
      k('feed_forward_length'),
      spec.wideSharedMlp
        ? perLayer(sliding.map((_, i) => (i < first ? 1 : 2) * spec.intermediate))
        : u32(spec.intermediate),
    ],
    [k('attention.head_count'), u32(spec.heads)],
    [
      k('attention.head_count_kv'),
      full.valueIsKey || full.kvHeads !== spec.kvHeads
        ? perLayer(sliding.map((s) => (s ? spec.kvHeads : full.kvHeads)))
        : u32(spec.kvHeads),
    ],
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('rope.freq_base_swa'), f32(spec.localRope?.theta ?? spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('attention.key_length'), u32(full.headDim)],
    [k('attention.value_length'), u32(full.headDim)],
    ...softcap,
    [k('attention.sliding_window'), u32(spec.slidingWindow ?? spec.maxPositions)],
    [k('attention.shared_kv_layers'), u32(spec.kvSharedLayers ?? 0)],
    [k('embedding_length_per_layer_input'), u32(spec.perLayerInput?.width ?? 0)],
    [k('attention.sliding_window_pattern'), { type: 'bool[]', value: sliding }],
    [k('attention.key_length_swa'), u32(spec.headDim)],
    [k('attention.value_length_swa'), u32(spec.headDim)],
    [k('rope.dimension_count'), u32(full.headDim)],
    [k('rope.dimension_count_swa'), u32(spec.headDim)],
  ];
}

/**
 * `rope_freqs.weight` as the converter generates it (`generate_extra_tensors`), [full head / 2]:
 * per pair of the full layers' heads, what llama.cpp divides its frequency by: the proportional
 * RoPE's factor for the pairs that turn (1 in every published config, which is all the converter
 * writes), 1e30 for the others. A full RoPE without scaling turns every pair.
 */
function gemma4RopeFreqs(spec: ModelSpec): [string, Float32Array][] {
  const half = (spec.fullAttention?.headDim ?? spec.headDim) / 2;
  const s = spec.rope.scaling;
  const turning = s?.type === 'proportional' ? s.rotatedPairs : half;
  const factor = s?.type === 'proportional' ? s.factor : 1;
  return [
    ['rope_freqs.weight', Float32Array.from({ length: half }, (_, i) => (i < turning ? factor : UNROTATED))],
  ];
}

/**
 * Refuses a spec that llama.cpp's gemma4 graph would run differently, for want of a GGUF key: a
 * softmax scale other than its fixed 1, a full-layer RoPE other than proportional (or none), a
 * scaled or partial sliding RoPE, KV-shared layers reading other caches than llama.cpp gives them
 * ({@link llamaCppKvSource}), per-layer inputs over another vocabulary, and a mixture of experts.
 */
function refuseForLlamaCpp(spec: ModelSpec): void {
  if (Math.fround(attentionScale(spec)) !== 1)
    refuseExport(
      spec,
      'attention scale',
      attentionScale(spec),
      'llama.cpp’s gemma4 graph scales attention by 1',
    );
  const s = spec.rope.scaling;
  if ((s && s.type !== 'proportional') || spec.rope.rotaryDim !== undefined)
    refuseExport(
      spec,
      'full RoPE',
      spec.rope,
      'llama.cpp’s gemma4 loader takes proportional RoPE (rope_freqs.weight)',
    );
  const local = spec.localRope;
  if (!local || local.scaling || local.rotaryDim !== undefined)
    refuseExport(
      spec,
      'sliding RoPE',
      local,
      'llama.cpp’s sliding layers turn the whole head, unscaled, at rope.freq_base_swa',
    );
  const shared = kvSharingMismatch(spec);
  if (shared !== undefined)
    refuseExport(
      spec,
      `KV-shared layer ${shared}'s source`,
      weftKvSource(spec, shared),
      `llama.cpp reads layer ${llamaCppKvSource(spec, shared)}'s cache (the last layer before the shared ones for a full layer, the one before it for a sliding one)`,
    );
  if (spec.perLayerInput && spec.perLayerInput.vocab !== spec.vocabSize)
    refuseExport(
      spec,
      'vocab_size_per_layer_input',
      spec.perLayerInput.vocab,
      `llama.cpp’s table has vocab_size (${spec.vocabSize}) rows`,
    );
  if (spec.moe)
    refuseExport(
      spec,
      'mixture of experts',
      spec.moe.experts,
      'Gemma 4’s mixture (ffn_gate_up_exps, its router and expert scales) is not written to GGUF yet',
    );
}

/**
 * A per-layer count of `key` as llama.cpp's loader takes one (`get_key_or_arr`): a scalar for
 * every layer or an array of one per layer; `fallback` when absent.
 */
function perLayerCounts(g: GgufFile, key: string, layers: number, fallback?: number): number[] {
  const v = meta(g, key);
  if (!Array.isArray(v)) return Array(layers).fill(metaCount(g, key, fallback));
  if (v.length !== layers || v.some((n) => typeof n !== 'number' || !Number.isSafeInteger(n) || n <= 0))
    throw new ModelFormatError(g.bytes.name, key, v, `must be one positive integer per layer (${layers})`);
  return v.map(Number);
}

/** The one value of `values` at the layers `where` picks (`fallback` if none); throws if they differ. */
function oneOf(
  g: GgufFile,
  key: string,
  values: number[],
  where: (l: number) => boolean,
  fallback: number,
  what: string,
): number {
  const picked = values.filter((_, l) => where(l));
  if (picked.some((v) => v !== picked[0]))
    throw new ModelFormatError(g.bytes.name, key, values, `must be one value for ${what}`);
  return picked[0] ?? fallback;
}

/**
 * Gemma 4's spec from a `gemma4` file, as llama.cpp's loader reads it: layer types from the
 * `sliding_window_pattern` bool array (or one bool for all), the sliding head `key_length_swa` and
 * the full one `key_length` (each equal to its value length), KV heads and MLP widths per layer
 * (one for each layer type; the KV-shared layers' MLPs the others' or twice as wide), RoPE bases
 * `rope.freq_base` and `rope.freq_base_swa`, each turning its whole head, the full layers'
 * proportional RoPE from `rope_freqs.weight`, `shared_kv_layers`, `embedding_length_per_layer_input`,
 * soft-capping, attention scale 1, V = K where a full layer has no `attn_v`, and the layer scalar
 * where `layer_output_scale` is stored. Refused: the mixture of experts (not read from GGUF yet), RoPE
 * scaling keys, and what weft runs differently from llama.cpp (KV sharing's sources).
 */
async function gemma4GgufSpec(g: GgufFile): Promise<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `gemma4.${key}`;
  for (const key of ['expert_count', 'expert_used_count', 'expert_feed_forward_length'].map(k))
    if (meta(g, key) !== undefined)
      throw new ModelFormatError(
        file,
        key,
        meta(g, key),
        'Gemma 4’s mixture-of-experts layers are not read from GGUF yet',
      );
  const layers = metaCount(g, k('block_count'));
  const sliding = ggufSlidingLayers(g, layers);
  const shared = metaCountOrZero(g, k('attention.shared_kv_layers'));
  if (shared >= layers)
    throw new ModelFormatError(
      file,
      k('attention.shared_kv_layers'),
      shared,
      `must leave layers of their own (${layers})`,
    );
  const heads = metaCount(g, k('attention.head_count'));
  const kvKey = k('attention.head_count_kv');
  const kv = perLayerCounts(g, kvKey, layers, heads);
  const kvHeads = oneOf(g, kvKey, kv, (l) => sliding[l]!, kv[0]!, 'the sliding layers');
  const fullKvHeads = oneOf(g, kvKey, kv, (l) => !sliding[l], kvHeads, 'the full layers');
  const ffKey = k('feed_forward_length');
  const ff = perLayerCounts(g, ffKey, layers);
  const intermediate = oneOf(
    g,
    ffKey,
    ff,
    (l) => l < layers - shared,
    ff[0]!,
    'the layers before the shared ones',
  );
  const sharedFf = oneOf(g, ffKey, ff, (l) => l >= layers - shared, intermediate, 'the KV-shared layers');
  if (sharedFf !== intermediate && sharedFf !== 2 * intermediate)
    throw new ModelFormatError(
      file,
      ffKey,
      ff,
      `the KV-shared layers' MLPs must be ${intermediate} or twice that wide`,
    );
  const base = await ggufBaseSpec(g, {
    family: 'gemma4',
    arch: 'gemma4',
    ropeFreqs: false,
    qkNorm: true,
    kvHeads: () => kvHeads,
    intermediate: () => intermediate,
  });
  if (base.rope.scaling)
    throw new ModelFormatError(
      file,
      k('rope.scaling.type'),
      base.rope.scaling,
      'llama.cpp’s gemma4 RoPE is scaled by rope_freqs.weight alone',
    );
  if (fullKvHeads <= 0 || heads % fullKvHeads !== 0)
    throw new ModelFormatError(file, kvKey, kv, `must divide head_count (${heads})`);
  const fullHead = base.headDim;
  const swaHead = metaCount(g, k('attention.key_length_swa'));
  for (const [key, want] of [
    ['attention.value_length', fullHead],
    ['attention.value_length_swa', swaHead],
    ['rope.dimension_count', fullHead],
    ['rope.dimension_count_swa', swaHead],
  ] as const) {
    const v = meta(g, k(key)) ?? want;
    if (v !== want)
      throw new ModelFormatError(
        file,
        k(key),
        v,
        `must be ${want} (${key.startsWith('rope') ? 'weft turns the whole head' : 'llama.cpp’s gemma4 loader requires keys and values of one width'})`,
      );
  }
  if (swaHead % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length_swa'), swaHead, 'must be even for RoPE');
  const rope = sliding.every((s) => s)
    ? { theta: base.rope.theta, layout: 'half' as const }
    : await ggufFullRope(g, base.rope.theta, fullHead);
  const firstShared = layers - shared;
  const hasV = (l: number) => g.tensors.has(`blk.${l}.attn_v.weight`);
  const owners = Array.from({ length: firstShared }, (_, l) => l);
  if (owners.some((l) => sliding[l] && !hasV(l)))
    throw new ModelFormatError(
      file,
      `blk.${owners.find((l) => sliding[l] && !hasV(l))}.attn_v.weight`,
      undefined,
      'missing tensor (V = K only on full layers)',
    );
  const fullOwners = owners.filter((l) => !sliding[l]);
  const valueIsKey = fullOwners.length > 0 && !hasV(fullOwners[0]!);
  if (fullOwners.some((l) => hasV(l) === valueIsKey))
    throw new ModelFormatError(
      file,
      'attn_v.weight',
      fullOwners.map(hasV),
      'must be on every full layer or none (V = K)',
    );
  const scalars = Array.from({ length: layers }, (_, l) =>
    g.tensors.has(`blk.${l}.layer_output_scale.weight`),
  );
  if (scalars.some((s) => s !== scalars[0]))
    throw new ModelFormatError(file, 'layer_output_scale.weight', scalars, 'must be on every layer or none');
  const width = metaCountOrZero(g, k('embedding_length_per_layer_input'));
  const softcap = meta(g, k('final_logit_softcapping')) ?? 0;
  const spec: ModelSpec = {
    ...base,
    headDim: swaHead,
    rope,
    localRope: { theta: metaNumber(g, k('rope.freq_base_swa'), base.rope.theta), layout: 'half' },
    slidingWindow: metaCount(g, k('attention.sliding_window')),
    slidingLayers: sliding,
    embedScale: true,
    sandwichNorms: true,
    activation: 'gelu_tanh',
    attentionScale: 1,
    fullAttention: { headDim: fullHead, kvHeads: fullKvHeads, valueIsKey },
    ...(shared > 0 ? { kvSharedLayers: shared } : {}),
    valueNorm: true,
    ...(sharedFf !== intermediate ? { wideSharedMlp: true } : {}),
    ...(width > 0
      ? {
          perLayerInput: {
            width,
            vocab: g.tensors.get('per_layer_token_embd.weight')?.ne[1] ?? base.vocabSize,
          },
        }
      : {}),
    ...(scalars[0] ? { layerScalar: true } : {}),
    ...(softcap === 0 ? {} : { logitSoftcap: metaNumber(g, k('final_logit_softcapping')) }),
  };
  const mismatch = kvSharingMismatch(spec);
  if (mismatch !== undefined)
    throw new ModelFormatError(
      file,
      k('attention.sliding_window_pattern'),
      sliding,
      `llama.cpp's KV-shared layer ${mismatch} reads layer ${llamaCppKvSource(spec, mismatch)}'s cache, not the last earlier layer of its own type`,
    );
  return spec;
}

/** llama.cpp's gemma4 layer types (`get_key_or_arr` of bools): one per layer, or one for all. */
function ggufSlidingLayers(g: GgufFile, layers: number): boolean[] {
  const key = 'gemma4.attention.sliding_window_pattern';
  const v = meta(g, key);
  if (typeof v === 'boolean') return Array(layers).fill(v);
  if (!Array.isArray(v) || v.length !== layers || v.some((b) => typeof b !== 'boolean'))
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v,
      v === undefined ? 'missing' : `must be one bool per layer (${layers})`,
    );
  return v.map((b) => b === true);
}

/**
 * The full layers' RoPE from `rope_freqs.weight` (which llama.cpp's gemma4 loader requires of a
 * model with full layers): one factor for the pairs that turn, then 1e30 for the rest, as
 * {@link gemma4RopeFreqs} writes it; every pair turning at factor 1 is RoPE unscaled.
 */
async function ggufFullRope(g: GgufFile, theta: number, headDim: number): Promise<RopeSpec> {
  const name = 'rope_freqs.weight';
  const info = g.tensors.get(name);
  if (info === undefined)
    throw new ModelFormatError(
      g.bytes.name,
      name,
      undefined,
      'missing tensor (llama.cpp’s gemma4 loader requires it for full layers)',
    );
  const f = await (await tensorReads()).readGgufTensorF32(info);
  const rotatedPairs = f.includes(UNROTATED) ? f.indexOf(UNROTATED) : f.length;
  const factor = rotatedPairs > 0 ? f[0]! : 1;
  if (
    f.length !== headDim / 2 ||
    !(factor > 0 && factor < UNROTATED) ||
    f.some((v, i) => v !== (i < rotatedPairs ? factor : UNROTATED))
  )
    throw new ModelFormatError(
      g.bytes.name,
      name,
      [...f].slice(0, 8),
      `must be ${headDim / 2} factors: one for the pairs that turn, then 1e30`,
    );
  if (rotatedPairs === f.length && factor === 1) return { theta, layout: 'half' };
  return { theta, layout: 'half', scaling: { type: 'proportional', rotatedPairs, factor } };
}

/** Gemma 4's GGUF side: llama.cpp's `gemma4` architecture, read and written. */
export const gemma4Gguf: GgufFamily = {
  arch: 'gemma4',
  reads: true,
  spec: gemma4GgufSpec,
  metadata: gemma4Metadata,
  names: { global: GEMMA4_GLOBAL_NAMES, layer: GEMMA4_LAYER_NAMES },
  squeezed: [],
  // Gemma4Model.norm_shift is 0: every tensor as Transformers holds it.
  storedForm: () => ({}),
  extraTensors: gemma4RopeFreqs,
};
