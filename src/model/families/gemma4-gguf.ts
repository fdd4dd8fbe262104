import type { GgufEntry } from '../../formats/gguf/write.js';
import {
  attentionScale,
  firstSharedLayer,
  kvSourceLayer,
  layerAttention,
  type ModelSpec,
  type MoeSpec,
} from '../spec/spec.js';
import type { GgufEntries, GgufFamily, NamePairs } from './family.js';
import { f32, GLOBAL_NAMES, refuseExport, SHARED_LAYER_NAMES, u32 } from './gguf-base.js';

/**
 * Gemma 4's routing (`Gemma4TextRouter`, `Gemma4TextExperts`), as llama.cpp's gemma4 graph runs it
 * too (src/models/gemma4.cpp, `build_moe_ffn`): the router reads the residual stream RMS-normed
 * without a weight, times 1/√hidden and `router.scale` (`ffn_gate_inp.scale`); a softmax over the
 * experts, the top k renormalised (norm_w), unscaled and unbiased; each expert's output times its
 * `per_expert_scale` (`ffn_down_exps.scale`); the experts beside the dense MLP.
 */
export const GEMMA4_ROUTING = {
  scoring: 'softmax',
  renormalize: true,
  renormEps: 0,
  selectionBias: false,
  routedScale: 1,
  scaledRouterNorm: true,
  perExpertScale: true,
  besideDense: true,
} as const satisfies Partial<MoeSpec>;

/** Where llama.cpp's converter parks a pair that does not turn: θ / 1e30 ≈ 0 (`generate_extra_tensors`). */
export const UNROTATED = Math.fround(1e30);

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
 * projection PER_LAYER_PROJ and norm PER_LAYER_POST_NORM; the mixture's (26B-A4B): its input norm
 * FFN_PRE_NORM_2, the dense MLP's and the experts' output norms FFN_POST_NORM_1 and _2, the router
 * FFN_GATE_INP with its input scale (`router.scale` as `ffn_gate_inp.scale`), the experts' gate |
 * up FFN_GATE_UP_EXP fused as the checkpoint holds it ([E, 2I, H]: each expert's gate rows, then
 * its up rows, which llama.cpp's `build_moe_ffn` views as gate then up), FFN_DOWN_EXP [E, H, I]
 * and its per-expert scale (`router.per_expert_scale` as `ffn_down_exps.scale`). The dense MLP
 * beside the mixture keeps `ffn_gate`, `ffn_up`, `ffn_down`, `ffn_norm` and `post_ffw_norm`. Read
 * only: the experts' gate and up apart, FFN_GATE_EXP and FFN_UP_EXP, which llama.cpp's loader
 * takes where the fused stack is absent.
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
  ['pre_ffw_norm_2.weight', 'pre_feedforward_layernorm_2.weight'],
  ['post_ffw_norm_1.weight', 'post_feedforward_layernorm_1.weight'],
  ['post_ffw_norm_2.weight', 'post_feedforward_layernorm_2.weight'],
  ['ffn_gate_inp.weight', 'router.proj.weight'],
  ['ffn_gate_inp.scale', 'router.scale'],
  ['ffn_gate_up_exps.weight', 'experts.gate_up_proj'],
  ['ffn_gate_exps.weight', 'experts.gate_proj'],
  ['ffn_up_exps.weight', 'experts.up_proj'],
  ['ffn_down_exps.weight', 'experts.down_proj'],
  ['ffn_down_exps.scale', 'router.per_expert_scale'],
];

/**
 * The layer whose cache llama.cpp gives KV-shared layer `layer` (src/llama-model.cpp, the GEMMA3N /
 * GEMMA4 `layer_reuse_cb`): the second-last layer before the shared ones for a sliding layer, the
 * last for a full one, whatever their types.
 */
export function llamaCppKvSource(spec: ModelSpec, layer: number): number {
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
export function kvSharingMismatch(spec: ModelSpec): number | undefined {
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
 * both RoPE widths whole (the full layers' proportional RoPE is `rope_freqs.weight`); a mixture's
 * `expert_count` and `expert_used_count` (TextModel's, after the norm epsilon) and
 * `expert_feed_forward_length` (Gemma4Model's, last).
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
  const m = spec.moe;
  const experts: GgufEntries = m
    ? [
        [k('expert_count'), u32(m.experts)],
        [k('expert_used_count'), u32(m.topK)],
      ]
    : [];
  const expertWidth: GgufEntries = m ? [[k('expert_feed_forward_length'), u32(m.intermediate)]] : [];
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
    ...experts,
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
    ...expertWidth,
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
 * ({@link llamaCppKvSource}), per-layer inputs over another vocabulary, and a mixture other than
 * Gemma 4's ({@link GEMMA4_ROUTING} on every layer, no shared expert).
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
  const m = spec.moe;
  const routing = Object.entries(GEMMA4_ROUTING) as [keyof typeof GEMMA4_ROUTING, unknown][];
  if (
    m &&
    (m.sharedIntermediate !== undefined || m.layers.includes(false) || routing.some(([k, v]) => m[k] !== v))
  )
    refuseExport(
      spec,
      'mixture of experts',
      m,
      'llama.cpp’s gemma4 graph runs Gemma 4’s mixture on every layer (GEMMA4_ROUTING)',
    );
}

/**
 * Gemma 4's GGUF side but its reader: llama.cpp's `gemma4` architecture's names and metadata, the
 * reader (`gemma4-gguf-read.ts`) loaded when a file is opened (the engine worker's chunk carries
 * none of it for the other models).
 */
export const gemma4Gguf: Omit<GgufFamily, 'spec'> = {
  arch: 'gemma4',
  reads: true,
  metadata: gemma4Metadata,
  names: { global: GEMMA4_GLOBAL_NAMES, layer: GEMMA4_LAYER_NAMES },
  squeezed: [],
  // Gemma4Model.norm_shift is 0: every tensor as Transformers holds it.
  storedForm: () => ({}),
  extraTensors: gemma4RopeFreqs,
};
