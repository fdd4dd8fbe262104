// What the decoder families share, each piece taken by a family's file with its own options: the
// layer list (a token mixer then an MLP per layer), the Llama-shaped config.json reader, the
// vision-language wrapper, and the config.json keys every family writes.
import type { AttentionNames } from '../blocks/attention/block.js';
import { attentionBlock } from '../blocks/attention/block.js';
import type { Block } from '../blocks/blocks.js';
import { type DeltaNetNames, deltaNetBlock } from '../blocks/deltanet/block.js';
import { type MlpNames, mlpBlock } from '../blocks/mlp/block.js';
import { type MoeSuffixes, moeBlock } from '../blocks/moe/block.js';
import type { Renames } from '../blocks/names.js';
import { type ShortConvNames, shortConvBlock } from '../blocks/shortconv/block.js';
import {
  type Fields,
  readAttentionShape,
  readRopeScaling,
  refuseActivation,
  ropeScalingOf,
} from '../spec/fields.js';
import { isMoeLayer, type LayerKind, layerKind, type ModelSpec } from '../spec/spec.js';
import type { ConfigReader, FusedProjection } from './family.js';

/** A family's renames of the kinds' default tensor names. */
export interface DecoderRenames {
  readonly attention?: Renames<AttentionNames>;
  readonly mlp?: Renames<MlpNames>;
  readonly moe?: Renames<MoeSuffixes>;
  readonly deltanet?: Renames<DeltaNetNames>;
  readonly shortconv?: Renames<ShortConvNames>;
}

/**
 * A decoder's blocks: per layer its token mixer (`spec.layerKinds`: attention, a Gated DeltaNet or
 * a short convolution) then a gated MLP with the spec's activation (a mixture of experts on the
 * layers `spec.moe` says), under `model.layers.N` with the family's renames. What else sets the families apart (biases, QK-norm, an output gate, partial
 * rotary, sandwich norms, windows, RoPE scaling) are switches of the spec the blocks read.
 */
export function decoderBlocks(spec: ModelSpec, renames: DecoderRenames = {}): Block[] {
  const prefix = (layer: number) => `model.layers.${layer}`;
  const mixers: Readonly<Record<LayerKind, (layer: number) => Block>> = {
    attention: (layer) => attentionBlock(layer, prefix(layer), renames.attention),
    deltanet: (layer) => deltaNetBlock(layer, prefix(layer), renames.deltanet),
    shortconv: (layer) => shortConvBlock(layer, prefix(layer), renames.shortconv),
  };
  return Array.from({ length: spec.layers }, (_, layer): Block[] => [
    mixers[layerKind(spec, layer)](layer),
    isMoeLayer(spec, layer)
      ? moeBlock(layer, spec.moe!.experts, spec.activation ?? 'silu', prefix(layer), renames.moe)
      : mlpBlock(layer, spec.activation ?? 'silu', prefix(layer), renames.mlp),
  ]).flat();
}

/**
 * A vision-language wrapper's reader: the language model's config is `text_config`, whose own
 * `model_type` (when `textTypes` is given) must be one of them; `read` reads it with the wrapper's
 * top level as `root`.
 */
export function wrapped(wrapper: string, read: ConfigReader, textTypes?: readonly string[]): ConfigReader {
  return (f) => {
    const text =
      f.object('text_config') ??
      f.refuse('text_config', `missing (a ${wrapper} config holds its language model there)`);
    const type = text.string('model_type');
    if (textTypes && (type === undefined || !textTypes.includes(type)))
      text.refuse(
        'model_type',
        `unsupported language model in a ${wrapper} wrapper (weft runs ${textTypes.join(', ')})`,
      );
    return read(text, f);
  };
}

/** How a Llama-shaped family's config differs from Llama's (see {@link decoderSpec}). */
export interface DecoderConfig {
  /** `family` of the spec. */
  readonly family: ModelSpec['family'];
  /** The config class's defaults where they differ from Llama's. */
  readonly defaults?: { readonly kvHeads?: number; readonly theta?: number; readonly tied?: boolean };
  /** q/k/v projections carry biases (always, not by `attention_bias`: Qwen2). */
  readonly qkvBias?: boolean;
  /** RMSNorm on each head of q and k (Qwen3). */
  readonly qkNorm?: boolean;
  /**
   * What `sliding_window` means: `'every-layer'`, a window on every layer (Mistral); otherwise it
   * applies only with `use_sliding_window`, past `max_window_layers`, and caps the context at the
   * window, where full and windowed attention agree (Qwen2).
   */
  readonly window?: 'every-layer';
  /** The family's own fields (SmolLM3's layers without RoPE), from the config and the layer count. */
  readonly extra?: (f: Fields, layers: number) => Partial<ModelSpec>;
}

/**
 * The spec of a Llama-shaped config.json: Transformers' defaults (`num_key_value_heads` = heads,
 * `head_dim` = hidden / heads, `rope_theta` 10000, untied head) unless the family's differ, RoPE
 * scaling from `rope_scaling` or Transformers 5's `rope_parameters` (linear or Llama 3), and the
 * refusals every such family shares: activations other than SiLU, attention biases where the
 * family has none, MLP biases and partial RoPE (each changes which tensors the checkpoint holds or
 * what they mean; running it as a plain block would give wrong outputs rather than an error).
 */
export function decoderSpec(f: Fields, o: DecoderConfig): ModelSpec {
  refuseActivation(f);
  // Llama's `attention_bias` adds biases to q, k, v and o; weft's block has q/k/v biases only.
  if (!o.qkvBias && f.boolean('attention_bias', false))
    f.refuse('attention_bias', `attention biases (q, k, v and o) are not supported for ${o.family}`);
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  if (f.number('partial_rotary_factor', 1) !== 1)
    f.refuse('partial_rotary_factor', 'partial RoPE is not supported (only 1: every head dimension)');
  const shape = readAttentionShape(f, o.defaults?.kvHeads ? { kvHeads: o.defaults.kvHeads } : {});
  let maxPositions = f.count('max_position_embeddings');
  const window =
    o.window === 'every-layer' && f.has('sliding_window') ? f.count('sliding_window') : undefined;
  if (o.window === undefined && f.boolean('use_sliding_window', false) && f.has('sliding_window'))
    maxPositions = Math.min(maxPositions, f.count('sliding_window'));
  const bos = f.ids('bos_token_id');
  // Transformers 5 writes `rope_parameters` ({ rope_theta, rope_type, ... }) in place of the two keys.
  const rp = f.object('rope_parameters');
  const scaling = rp ? ropeScalingOf(rp) : readRopeScaling(f);
  const theta = (rp ?? f).positive('rope_theta', o.defaults?.theta ?? 10000);
  return {
    family: o.family,
    ...shape,
    rope: scaling ? { theta, scaling, layout: 'half' } : { theta, layout: 'half' },
    maxPositions,
    tiedEmbeddings: f.boolean('tie_word_embeddings', o.defaults?.tied ?? false),
    qkvBias: o.qkvBias ?? false,
    qkNorm: o.qkNorm ?? false,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    ...(o.extra?.(f, shape.layers) ?? {}),
    ...(window === undefined ? {} : { slidingWindow: window }),
  };
}

/**
 * The config.json keys every family writes for a spec (see Family.config): Hugging Face's class
 * `architecture` and `model_type`, the sizes, RoPE's base and scaling (`rope_scaling`, Transformers
 * 5's `rope_parameters` for YaRN), the head, the special ids and the per-layer attention keys (sliding
 * layers, their RoPE base, RoPE-less layers, the softmax scale).
 */
export function baseConfig(
  spec: ModelSpec,
  architecture: string,
  modelType: string,
): Record<string, unknown> {
  return {
    architectures: [architecture],
    model_type: modelType,
    vocab_size: spec.vocabSize,
    hidden_size: spec.hidden,
    intermediate_size: spec.intermediate,
    num_hidden_layers: spec.layers,
    num_attention_heads: spec.heads,
    num_key_value_heads: spec.kvHeads,
    head_dim: spec.headDim,
    hidden_act: spec.activation === 'gelu_tanh' ? 'gelu_pytorch_tanh' : 'silu',
    rms_norm_eps: spec.rmsEps,
    rope_theta: spec.rope.theta,
    ...ropeScalingConfig(spec),
    max_position_embeddings: spec.maxPositions,
    tie_word_embeddings: spec.tiedEmbeddings,
    bos_token_id: spec.bosId,
    eos_token_id: spec.eosIds.length === 1 ? spec.eosIds[0] : [...spec.eosIds],
    ...attentionLayersConfig(spec),
  };
}

/**
 * `rope_scaling` for a spec's RoPE: linear, Llama 3's, or LongRoPE with its short and long factors
 * (the short ones under both names, and the context stopping at the original, where the spec has
 * no long ones) and its attention factor stated; YaRN in Transformers 5's `rope_parameters` (with
 * Llama 4's query temperature inside it, as Ministral3Config reads it).
 */
function ropeScalingConfig(spec: ModelSpec): Record<string, unknown> {
  const scaling = spec.rope.scaling;
  // Gemma 4's per-layer-type `rope_parameters` are its family's to write.
  if (scaling === undefined || scaling.type === 'proportional') return {};
  if (scaling.type === 'linear') return { rope_scaling: { rope_type: 'linear', factor: scaling.factor } };
  if (scaling.type === 'longrope')
    return {
      rope_scaling: {
        rope_type: 'longrope',
        short_factor: [...scaling.factors],
        long_factor: [...(scaling.long?.factors ?? scaling.factors)],
        attention_factor: scaling.attentionFactor,
      },
      original_max_position_embeddings: scaling.long?.originalMaxPositions ?? spec.maxPositions,
    };
  if (scaling.type === 'yarn') {
    const qt = spec.queryTemperature;
    return {
      rope_parameters: {
        rope_type: 'yarn',
        rope_theta: spec.rope.theta,
        factor: scaling.factor,
        original_max_position_embeddings: scaling.originalMaxPositions,
        beta_fast: scaling.betaFast,
        beta_slow: scaling.betaSlow,
        truncate: scaling.truncate,
        ...(scaling.mscale === undefined ? {} : { mscale: scaling.mscale }),
        ...(scaling.mscaleAllDim === undefined ? {} : { mscale_all_dim: scaling.mscaleAllDim }),
        attention_factor: scaling.attentionFactor,
        ...(qt ? { llama_4_scaling_beta: qt.beta } : {}),
      },
    };
  }
  return {
    rope_scaling: {
      rope_type: 'llama3',
      factor: scaling.factor,
      low_freq_factor: scaling.lowFreqFactor,
      high_freq_factor: scaling.highFreqFactor,
      original_max_position_embeddings: scaling.originalMaxPositions,
    },
  };
}

/** The per-layer attention keys: sliding layers, their RoPE base, RoPE-less layers, the softmax scale. */
function attentionLayersConfig(spec: ModelSpec): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (spec.slidingWindow !== undefined) out.sliding_window = spec.slidingWindow;
  if (spec.slidingLayers)
    out.layer_types = spec.slidingLayers.map((s) => (s ? 'sliding_attention' : 'full_attention'));
  if (spec.localRope) out.rope_local_base_freq = spec.localRope.theta;
  if (spec.attentionScale !== undefined) out.query_pre_attn_scalar = spec.attentionScale ** -2;
  if (spec.noRopeLayers) out.no_rope_layers = spec.noRopeLayers.map((none) => (none ? 0 : 1));
  return out;
}

/**
 * Mixture layer `layer`'s experts as stacks [E, R, C] over their per-expert names (`renames`, as
 * the family's blocks name them), under `${prefix}.${under}.experts`: Transformers 5's
 * `gate_up_proj` [E, 2I, H] (each expert's gate rows, then its up rows: `Qwen2MoeExperts`) and
 * `down_proj` [E, H, I] (`under` '': directly under the layer, as Gemma 4's), written where `fused` says (`'checkpoint'`: as the published files hold
 * them; `'never'`: a family published per expert; `'checkpoint and gguf'`: llama.cpp's converter
 * keeps them fused too, as `ffn_gate_up_exps`: Gemma 4's); and the stacks llama.cpp's GGUFs hold
 * apart, `gate_proj` and `up_proj` [E, I, H] (weft's names for `ffn_gate_exps` and `ffn_up_exps`:
 * see `moeLayerNames`; read only where the GGUF keeps them fused) and the same `down_proj`
 * (`ffn_down_exps`). None for a dense layer.
 */
export function expertStacks(
  spec: ModelSpec,
  layer: number,
  under: string,
  fused: 'checkpoint' | 'never' | 'checkpoint and gguf',
  renames: Renames<MoeSuffixes> = {},
): FusedProjection[] {
  const m = spec.moe;
  if (!m || !isMoeLayer(spec, layer)) return [];
  const prefix = `model.layers.${layer}`;
  const n = moeBlock(layer, m.experts, spec.activation ?? 'silu', prefix, renames).names;
  const E = m.experts;
  const I = m.intermediate;
  const H = spec.hidden;
  const at = under ? `${prefix}.${under}.experts` : `${prefix}.experts`; // Gemma 4: under the layer
  const apart = fused === 'checkpoint and gguf' ? 'never' : 'gguf'; // gate_proj and up_proj stacks
  const stack = (names: readonly string[], rows: number) =>
    names.map((name, e) => ({ name, row0: e * rows, rows }));
  return [
    {
      name: `${at}.gate_up_proj`,
      shape: [E, 2 * I, H],
      parts: n.gate.flatMap((gate, e) => [
        { name: gate, row0: 2 * e * I, rows: I },
        { name: n.up[e]!, row0: (2 * e + 1) * I, rows: I },
      ]),
      ...(fused === 'checkpoint and gguf' ? {} : { written: fused }),
    },
    { name: `${at}.gate_proj`, shape: [E, I, H], parts: stack(n.gate, I), written: apart },
    { name: `${at}.up_proj`, shape: [E, I, H], parts: stack(n.up, I), written: apart },
    {
      name: `${at}.down_proj`,
      shape: [E, H, I],
      parts: stack(n.down, H),
      ...(fused === 'never' ? { written: 'gguf' as const } : {}),
    },
  ];
}
