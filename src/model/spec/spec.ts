/**
 * The shape of a decoder-only transformer as weft runs it: everything the forward pass, the KV
 * cache and the loaders need to know, derived once from a checkpoint's config (config.json or GGUF
 * metadata) by its family's file (model/families/). The block kinds read the switches below
 * (mlx-lm style); what a family's checkpoints call things is its family's.
 */
import type { ProportionalRopeScaling, QueryTemperature, YarnRopeScaling } from '../../kernels/rope/rope.js';

/**
 * A decoder layer's token mixer, named as its block kind: softmax attention over a KV cache,
 * Gated DeltaNet over a recurrent state (Qwen3.5's `linear_attention` layers), or a gated short
 * convolution over a window of the last few tokens (LFM2's `conv` layers).
 */
export type LayerKind = 'attention' | 'deltanet' | 'shortconv';

/**
 * LFM2's gated short convolution (`Lfm2ShortConv`): in_proj [3H, H] gives B, C and x per token, a
 * causal depthwise convolution over B · x of width `kernel`, then C · conv and out_proj [H, H].
 * Its state is the last `kernel - 1` rows of B · x.
 */
export interface ShortConvSpec {
  /** Width of the causal depthwise convolution (`conv_L_cache`). */
  readonly kernel: number;
  /** in_proj, the convolution and out_proj have biases (`conv_bias`). */
  readonly bias: boolean;
}

/**
 * The Gated DeltaNet layers' sizes (Qwen3.5's `linear_*` config keys). Per value head the state is
 * [keyDim, valueDim] f32; key heads are shared by `valueHeads / keyHeads` value heads.
 */
export interface DeltaNetSpec {
  readonly keyHeads: number;
  readonly valueHeads: number;
  readonly keyDim: number;
  readonly valueDim: number;
  /** Width of the causal depthwise convolution over q | k | v (`linear_conv_kernel_dim`). */
  readonly convKernel: number;
}

/**
 * A mixture of experts in place of the dense MLP on some layers: a router scores every expert per
 * token, the `topK` best run (SwiGLU experts of width `intermediate`), and their outputs are summed
 * by their routing weights; a shared expert may run beside them for every token.
 */
export interface MoeSpec {
  /** Experts per mixture layer (`num_experts`). */
  readonly experts: number;
  /** Experts each token runs (`num_experts_per_tok`). */
  readonly topK: number;
  /** Each expert's inner width (`moe_intermediate_size`). */
  readonly intermediate: number;
  /**
   * How router logits become scores: a softmax over all experts (Qwen3-MoE, Qwen3.5-MoE) or a
   * sigmoid of each (LFM2-MoE).
   */
  readonly scoring: 'softmax' | 'sigmoid';
  /**
   * The chosen scores are divided by their sum (`norm_topk_prob`), plus `renormEps` (LFM2-MoE:
   * 1e-6; else 0).
   */
  readonly renormalize: boolean;
  readonly renormEps: number;
  /** A learned per-expert bias is added to the scores for choosing only (LFM2's `expert_bias`). */
  readonly selectionBias: boolean;
  /** The routing weights are multiplied by this (`routed_scaling_factor`; 1 for none). */
  readonly routedScale: number;
  /**
   * A shared expert every token runs, of this inner width, scaled by sigmoid(gate · h) (Qwen3.5-MoE's
   * `shared_expert` and `shared_expert_gate`); absent: none.
   */
  readonly sharedIntermediate?: number;
  /** Per layer, whether its MLP is a mixture (else the dense MLP of `intermediate`). */
  readonly layers: readonly boolean[];
  /**
   * The router reads the block's input RMS-normed without a weight, times a learned scale [H] and
   * 1/√H (Gemma 4's `router.scale`), not the experts' normed input.
   */
  readonly scaledRouterNorm?: boolean;
  /** Each chosen expert's weight is multiplied by its learned scale (Gemma 4's `per_expert_scale`). */
  readonly perExpertScale?: boolean;
  /**
   * The mixture runs beside the layer's dense MLP (of `intermediate`, with its own input norm): each
   * branch's output is normed, their sum normed again before the residual add (Gemma 4).
   */
  readonly besideDense?: boolean;
}

/** Llama 3 style RoPE frequency scaling (`rope_scaling.rope_type == "llama3"`). */
export interface Llama3RopeScaling {
  readonly type?: 'llama3';
  readonly factor: number;
  readonly lowFreqFactor: number;
  readonly highFreqFactor: number;
  readonly originalMaxPositions: number;
}

/** Linear RoPE scaling (`rope_type == "linear"`, Gemma 3's global layers): every frequency / factor. */
export interface LinearRopeScaling {
  readonly type: 'linear';
  readonly factor: number;
}

/**
 * LongRoPE (`rope_type == "longrope"`, Phi-3.5 and Phi-4-mini): pair i's frequency divided by
 * `factors[i]`, i.e. inv_freq[i] = 1 / (factors[i] · theta^(2i / rotaryDim)), and cos and sin
 * multiplied by `attentionFactor` (Transformers' `_compute_longrope_parameters`).
 *
 * Which list runs is settled by the engine's context, as llama.cpp settles it
 * (`llama_model::get_rope_factors`: the long factors when the context per sequence passes
 * `original_context_length`) and exllamav2 too: {@link ropeForContext} puts `longFactors` in
 * `factors` for a context longer than `originalMaxPositions`, for every position. Within the
 * original context that is the `short_factor` list, which is what Transformers runs for every
 * sequence there. (Transformers picks per forward, by the sequence's largest position
 * (`dynamic_rope_update`), so past the original context the two agree for sequences that pass it,
 * and a long-context engine's shorter sequences run the long factors where Transformers would run
 * the short ones, as in llama.cpp.)
 */
export interface LongRopeScaling {
  readonly type: 'longrope';
  /**
   * Per rotary pair (rotaryDim / 2 of them), the factors that run, rounded to f32 as PyTorch holds
   * them: the `short_factor` list as read, the `long_factor` list after {@link ropeForContext} for a
   * context past `originalMaxPositions`.
   */
  readonly factors: readonly number[];
  /**
   * The `long_factor` list (f32), where the checkpoint has one, with the context it takes over past:
   * `original_max_position_embeddings`. Absent, the model's context stops at the original one.
   */
  readonly long?: { readonly factors: readonly number[]; readonly originalMaxPositions: number };
  /**
   * What cos and sin are multiplied by, rounded to f32 (PyTorch multiplies the f32 cos by the
   * scalar in f32): the config's `attention_factor`, else √(1 + ln(s) / ln(original)) with s the
   * config's `factor` or max_position_embeddings / original (1 when s ≤ 1).
   */
  readonly attentionFactor: number;
}

/** YaRN's attention factor from its config fields (see {@link YarnRopeScaling.attentionFactor}). */
export function yarnAttentionFactor(
  factor: number,
  mscale?: number,
  mscaleAllDim?: number,
  attentionFactor?: number,
): number {
  if (attentionFactor !== undefined) return Math.fround(attentionFactor);
  const m = (s: number, k: number) => (s <= 1 ? 1 : 0.1 * k * Math.log(s) + 1);
  if (mscale && mscaleAllDim) return Math.fround(m(factor, mscale) / m(factor, mscaleAllDim));
  return Math.fround(m(factor, 1));
}

/** Rotary position embedding settings. */
export interface RopeSpec {
  /** Base of the inverse frequencies (`rope_theta`). */
  readonly theta: number;
  readonly scaling?:
    | Llama3RopeScaling
    | LinearRopeScaling
    | LongRopeScaling
    | YarnRopeScaling
    | ProportionalRopeScaling;
  /**
   * Pairing of the rotated dimensions: `'half'` rotates (i, i + d/2) as Hugging Face checkpoints do;
   * `'interleaved'` rotates (2i, 2i + 1) as llama.cpp's converter stores Llama's Q and K.
   */
  readonly layout: 'half' | 'interleaved';
  /**
   * Rotated dimensions of each head (partial rotary: Qwen3.5 rotates the first quarter); absent: the
   * whole head. The inverse frequencies span this width, and only the `'half'` layout takes it.
   */
  readonly rotaryDim?: number;
}

/** A model's architecture. Sizes are element counts. */
export interface ModelSpec {
  /** The name of its family in the family table (model/families/index.ts). */
  readonly family: string;
  readonly vocabSize: number;
  /** Residual stream width (`hidden_size`). */
  readonly hidden: number;
  /** MLP inner width (`intermediate_size`). */
  readonly intermediate: number;
  readonly layers: number;
  /** Query heads. */
  readonly heads: number;
  /** Key/value heads (GQA when fewer than `heads`). */
  readonly kvHeads: number;
  /** Per-head width; Qwen3 sets it explicitly and it may differ from hidden / heads. */
  readonly headDim: number;
  readonly rmsEps: number;
  readonly rope: RopeSpec;
  /**
   * Longest context the checkpoint was trained for (`max_position_embeddings`; with LongRoPE and no
   * long factors, `original_max_position_embeddings`, where its short factors stop).
   */
  readonly maxPositions: number;
  /** The LM head reuses the embedding table. */
  readonly tiedEmbeddings: boolean;
  /** q/k/v projections have biases (Qwen2). */
  readonly qkvBias: boolean;
  /** RMSNorm on each head of q and k before RoPE (Qwen3). */
  readonly qkNorm: boolean;
  readonly bosId: number | undefined;
  /** Generation stops on any of these. */
  readonly eosIds: readonly number[];
  /** Each layer's token mixer; absent: every layer is attention. */
  readonly layerKinds?: readonly LayerKind[];
  /** The Gated DeltaNet layers' sizes; present exactly when some layer is `'deltanet'`. */
  readonly deltaNet?: DeltaNetSpec;
  /** The short-convolution layers' sizes (LFM2); present exactly when some layer is `'shortconv'`. */
  readonly shortConv?: ShortConvSpec;
  /**
   * Attention's output is gated: q_proj yields, per head, the query then a gate of the same width,
   * and o_proj reads attention · sigmoid(gate) (Qwen3-Next, Qwen3.5).
   */
  readonly outputGate?: boolean;
  /**
   * The decoder's RMSNorm weights are stored zero-centred and applied as (1 + w): the layer norms,
   * QK-norms and the final norm (Qwen3-Next, Qwen3.5). A linear layer's gated norm is not.
   */
  readonly zeroCentredNorms?: boolean;
  /**
   * Keys a sliding-window layer's query sees: those at positions p - window < k ≤ p (Gemma 3,
   * Mistral). Which layers slide: `slidingLayers`, or every layer when that is absent.
   */
  readonly slidingWindow?: number;
  /** Per layer, whether its attention slides (Gemma 3's `sliding_attention` layers). */
  readonly slidingLayers?: readonly boolean[];
  /** The RoPE of the sliding layers where it differs from `rope` (Gemma 3's `rope_local_base_freq`). */
  readonly localRope?: RopeSpec;
  /** Per layer, true where the layer has no RoPE at all (SmolLM3's `no_rope_layers` zeros). */
  readonly noRopeLayers?: readonly boolean[];
  /** The embedding row is multiplied by √hidden, rounded to f32 (Gemma). */
  readonly embedScale?: boolean;
  /**
   * Gemma's four norms per layer: the attention output is normed (`post_attention_layernorm`) before
   * its residual add, the MLP reads `pre_feedforward_layernorm` and its output is normed
   * (`post_feedforward_layernorm`) before its residual add.
   */
  readonly sandwichNorms?: boolean;
  /** The MLP's gate activation: SiLU (default) or GELU with the tanh approximation (Gemma's GeGLU). */
  readonly activation?: 'silu' | 'gelu_tanh';
  /** Attention's softmax scale; default 1/√headDim (Gemma 3: `query_pre_attn_scalar`^-½). */
  readonly attentionScale?: number;
  /** Llama 4's per-position query temperature (Ministral 3's `llama_4_scaling_beta`). */
  readonly queryTemperature?: QueryTemperature;
  /** The mixture-of-experts layers; absent: every MLP is dense. */
  readonly moe?: MoeSpec;
  /** The full-attention (not sliding) layers' shape where it differs from the model's (Gemma 4). */
  readonly fullAttention?: FullAttentionSpec;
  /**
   * The last `kvSharedLayers` layers compute no K and V: each attends over the cache of the last
   * earlier layer of its own type (sliding or full) and holds none (Gemma 4's `num_kv_shared_layers`).
   */
  readonly kvSharedLayers?: number;
  /** Each V head is RMS-normed without a weight before it is cached (Gemma 4's `v_norm`). */
  readonly valueNorm?: boolean;
  /** The KV-shared layers' MLPs are twice `intermediate` wide (Gemma 4's `use_double_wide_mlp`). */
  readonly wideSharedMlp?: boolean;
  /**
   * Per-layer embeddings (Gemma 4's PLE): each layer ends by adding
   * norm(proj(gelu(gate · x) · p_l)) to the residual stream, p_l its slice of the token's per-layer
   * input (see {@link PerLayerInputSpec}).
   */
  readonly perLayerInput?: PerLayerInputSpec;
  /** Each layer ends by multiplying the residual stream by a learned scalar (Gemma 4's `layer_scalar`). */
  readonly layerScalar?: boolean;
  /** The logits are soft-capped: c · tanh(logits / c) (`final_logit_softcapping`). */
  readonly logitSoftcap?: number;
}

/**
 * Gemma 4's full-attention layers: a wider head (`global_head_dim`), their own KV heads
 * (`num_global_key_value_heads`, with `attention_k_eq_v`), and V equal to K before its norms
 * (`attention_k_eq_v`: no v_proj).
 */
export interface FullAttentionSpec {
  readonly headDim: number;
  readonly kvHeads: number;
  readonly valueIsKey: boolean;
}

/**
 * Gemma 4's per-layer inputs: for each token, a table row [layers · width] (of `vocab` rows) times
 * √width, plus RMSNorm(per_layer_model_projection · embedding / √hidden) per layer slice, both
 * times 1/√2; layer l reads slice l ([width]).
 */
export interface PerLayerInputSpec {
  /** `hidden_size_per_layer_input` */
  readonly width: number;
  /** `vocab_size_per_layer_input` */
  readonly vocab: number;
}

/** The first KV-shared layer (`spec.layers` when none is). */
export function firstSharedLayer(spec: ModelSpec): number {
  return spec.layers - (spec.kvSharedLayers ?? 0);
}

/**
 * Layer `layer`'s view of the spec: the spec with the layer's own head size and KV heads (Gemma 4's
 * full layers) and MLP width (its double-wide shared layers). Every block kind reads its layer's
 * sizes through it, so a model whose layers differ runs the same blocks.
 */
export function layerSpec(spec: ModelSpec, layer: number): ModelSpec {
  const full = spec.fullAttention && layerAttention(spec, layer).window === undefined;
  const wide = spec.wideSharedMlp && layer >= firstSharedLayer(spec);
  if (!full && !wide) return spec;
  return {
    ...spec,
    ...(full ? { headDim: spec.fullAttention!.headDim, kvHeads: spec.fullAttention!.kvHeads } : {}),
    ...(wide ? { intermediate: 2 * spec.intermediate } : {}),
  };
}

/**
 * The layer whose KV cache layer `layer` attends over: its own, or for a KV-shared layer the last
 * layer before the shared ones of the same type (sliding or full; Transformers'
 * `store_full_length_kv`).
 */
export function kvSourceLayer(spec: ModelSpec, layer: number): number {
  const first = firstSharedLayer(spec);
  if (layer < first) return layer;
  const sliding = layerAttention(spec, layer).window !== undefined;
  for (let l = first - 1; l >= 0; l--)
    if (layerKind(spec, l) === 'attention' && (layerAttention(spec, l).window !== undefined) === sliding)
      return l;
  throw new Error(`kvSourceLayer: no layer before ${first} shares layer ${layer}'s attention type`);
}

/** Whether layer `layer`'s V is its K (Gemma 4's full layers with `attention_k_eq_v`). */
export function valueIsKey(spec: ModelSpec, layer: number): boolean {
  return (spec.fullAttention?.valueIsKey ?? false) && layerAttention(spec, layer).window === undefined;
}

/** Whether layer `layer`'s MLP is a mixture of experts. */
export function isMoeLayer(spec: ModelSpec, layer: number): boolean {
  return spec.moe?.layers[layer] ?? false;
}

/** How layer `layer` attends: its window (undefined: the whole context) and its RoPE (undefined: none). */
export interface LayerAttention {
  readonly window: number | undefined;
  readonly rope: RopeSpec | undefined;
}

/** Layer `layer`'s window and RoPE, from the spec's per-layer switches. */
export function layerAttention(spec: ModelSpec, layer: number): LayerAttention {
  const sliding = spec.slidingWindow !== undefined && (spec.slidingLayers?.[layer] ?? true);
  const rope = spec.noRopeLayers?.[layer] ? undefined : sliding ? (spec.localRope ?? spec.rope) : spec.rope;
  return { window: sliding ? spec.slidingWindow : undefined, rope };
}

/**
 * The spec an engine with `context` tokens of KV cache runs: with LongRoPE, the long factors in
 * place of the short ones when `context` passes the original context (see {@link LongRopeScaling});
 * every other spec as it is.
 */
export function ropeForContext(spec: ModelSpec, context: number): ModelSpec {
  const scaling = spec.rope.scaling;
  if (scaling?.type !== 'longrope' || !scaling.long || context <= scaling.long.originalMaxPositions)
    return spec;
  return { ...spec, rope: { ...spec.rope, scaling: { ...scaling, factors: scaling.long.factors } } };
}

/**
 * What a RoPE multiplies cos and sin by: LongRoPE's or YaRN's attention factor, else 1. The rotated
 * dimensions of q and of k are both scaled by it (so their dot products by its square); the
 * dimensions past `rotaryDim` are not.
 */
export function ropeAttentionFactor(rope: RopeSpec): number {
  const s = rope.scaling;
  return s?.type === 'longrope' || s?.type === 'yarn' ? s.attentionFactor : 1;
}

/** The softmax scale of a spec's attention. */
export function attentionScale(spec: ModelSpec): number {
  return spec.attentionScale ?? 1 / Math.sqrt(spec.headDim);
}

/** Layer `layer`'s token mixer. */
export function layerKind(spec: ModelSpec, layer: number): LayerKind {
  return spec.layerKinds?.[layer] ?? 'attention';
}

/**
 * Whether some layer carries a recurrent state (a Gated DeltaNet or a short convolution): such a
 * state holds only the end of the sequence, so the committed rows can be kept whole or dropped,
 * not trimmed part way.
 */
export function isRecurrent(spec: ModelSpec): boolean {
  return spec.deltaNet !== undefined || spec.shortConv !== undefined;
}

/** Widths of a spec's Gated DeltaNet layers, derived here and nowhere else. */
export interface DeltaNetWidths {
  /** keyHeads · keyDim: width of q and of k. */
  readonly keyWidth: number;
  /** valueHeads · valueDim: width of v, of the gate z and of the output. */
  readonly valueWidth: number;
  /** 2 · keyWidth + valueWidth: the convolution's channels (q | k | v). */
  readonly convChannels: number;
}

/** Derives {@link DeltaNetWidths}; throws when the spec has no DeltaNet layers. */
export function deltaNetWidths(spec: ModelSpec): DeltaNetWidths {
  const la = spec.deltaNet;
  if (!la) throw new Error(`deltaNetWidths: the ${spec.family} spec has no DeltaNet layers`);
  const keyWidth = la.keyHeads * la.keyDim;
  const valueWidth = la.valueHeads * la.valueDim;
  return { keyWidth, valueWidth, convChannels: 2 * keyWidth + valueWidth };
}

/** Sizes derived from a spec, computed here and nowhere else. */
export interface DerivedSizes {
  /** heads * headDim: width of the attention output and of q. */
  readonly qWidth: number;
  /** kvHeads * headDim: width of k and v per token. */
  readonly kvWidth: number;
  /** Query heads per KV head. */
  readonly groupSize: number;
}

/** Derives the sizes every consumer of a {@link ModelSpec} needs. */
export function deriveSizes(spec: ModelSpec): DerivedSizes {
  return {
    qWidth: spec.heads * spec.headDim,
    kvWidth: spec.kvHeads * spec.headDim,
    groupSize: spec.heads / spec.kvHeads,
  };
}
