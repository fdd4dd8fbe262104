// LFM2-MoE (LFM2-8B-A1B; `Lfm2MoeConfig`, `Lfm2MoeForCausalLM`): LFM2's short convolutions and
// attention (lfm2.ts), its first `num_dense_layers` layers with LFM2's SwiGLU MLP of
// `intermediate_size` as it is, the others a mixture: sigmoid router scores, a selection bias
// (`expert_bias`) added for choosing only, the chosen scores renormalised (+1e-6) and scaled.
// Published per expert (`feed_forward.experts.{e}.w1/w3/w2.weight`); Transformers 5 may write them
// fused (`feed_forward.experts.gate_up_proj`, `down_proj`), read per expert here. llama.cpp's
// `lfm2moe` architecture.
import { meta, metaCountOrZero } from '../../formats/gguf/meta.js';
import type { Fields } from '../spec/fields.js';
import { layerKind, type ModelSpec, type MoeSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, expertStacks } from './decoder.js';
import type { Family, GgufEntries } from './family.js';
import {
  GATING_FUNC,
  ggufBaseSpec,
  ggufMoe,
  moeLayerNames,
  moeMetadata,
  refuseExport,
  u32,
} from './gguf-base.js';
import {
  LFM2_GLOBAL_NAMES,
  LFM2_LAYER_NAMES,
  LFM2_RENAMES,
  lfm2Fields,
  lfm2Layers,
  lfm2Metadata,
  lfm2Spec,
} from './lfm2.js';

/** The mixture block under LFM2-MoE's names (`Lfm2MoeSparseMoeBlock` as `feed_forward`). */
const MOE_RENAMES = {
  norm: 'ffn_norm.weight',
  router: 'feed_forward.gate.weight',
  bias: 'feed_forward.expert_bias',
  gate: 'feed_forward.experts.{e}.w1.weight',
  up: 'feed_forward.experts.{e}.w3.weight',
  down: 'feed_forward.experts.{e}.w2.weight',
} as const;

/**
 * An LFM2-MoE config: LFM2's (lfm2.ts `lfm2Spec`) with the dense MLP's width `intermediate_size`
 * as `Lfm2MoeMLP` takes it (no adjustment) and the mixture of `Lfm2MoeConfig`'s keys and defaults:
 * `num_experts` (32), `num_experts_per_tok` (4), `moe_intermediate_size` (1792), `num_dense_layers`
 * (2) dense layers first, `use_expert_bias` (true), `norm_topk_prob` (true; renormalised with
 * + 1e-6), `routed_scaling_factor` (1). A config whose every layer is dense has no mixture.
 */
function lfm2MoeSpec(f: Fields): ModelSpec {
  const base = lfm2Spec(f, 'lfm2_moe', (c) => c.count('intermediate_size', 7168));
  const experts = f.count('num_experts', 32);
  const topK = f.count('num_experts_per_tok', 4);
  if (topK > experts) f.refuse('num_experts_per_tok', `must be at most num_experts (${experts})`);
  const dense = f.number('num_dense_layers', 2);
  if (!Number.isSafeInteger(dense) || dense < 0)
    f.refuse('num_dense_layers', 'must be a non-negative integer');
  const layers = Array.from({ length: base.layers }, (_, i) => i >= dense);
  if (!layers.includes(true)) return base;
  const moe: MoeSpec = {
    experts,
    topK,
    intermediate: f.count('moe_intermediate_size', 1792),
    scoring: 'sigmoid',
    renormalize: f.boolean('norm_topk_prob', true),
    renormEps: 1e-6,
    selectionBias: f.boolean('use_expert_bias', true),
    routedScale: f.positive('routed_scaling_factor', 1),
    layers,
  };
  return { ...base, moe };
}

/** The dense layers before the first mixture; throws unless the mixtures are every later layer. */
function denseLayers(spec: ModelSpec): number {
  const layers = spec.moe?.layers ?? Array.from({ length: spec.layers }, () => false);
  const dense = layers.indexOf(true) < 0 ? spec.layers : layers.indexOf(true);
  if (layers.some((mixture, i) => mixture !== i >= dense))
    refuseExport(spec, 'moe.layers', layers, 'LFM2-MoE keeps its dense layers first (num_dense_layers)');
  return dense;
}

/** An LFM2-MoE spec's own keys (`Lfm2MoeConfig`'s): its layer types, the convolution, the mixture. */
function ownConfig(spec: ModelSpec): Record<string, unknown> {
  const m = spec.moe;
  return {
    layer_types: Array.from({ length: spec.layers }, (_, i) =>
      layerKind(spec, i) === 'shortconv' ? 'conv' : 'full_attention',
    ),
    conv_L_cache: spec.shortConv?.kernel ?? 3,
    conv_bias: spec.shortConv?.bias ?? false,
    norm_eps: spec.rmsEps,
    num_dense_layers: denseLayers(spec),
    ...(m
      ? {
          num_experts: m.experts,
          num_experts_per_tok: m.topK,
          moe_intermediate_size: m.intermediate,
          use_expert_bias: m.selectionBias,
          norm_topk_prob: m.renormalize,
          routed_scaling_factor: m.routedScale,
        }
      : {}),
  };
}

/**
 * The `lfm2moe.*` metadata in the converter's order (conversion/lfm2.py `LFM2MoeModel`): LFM2's
 * keys, then the experts', `leading_dense_block_count` and `expert_gating_func` sigmoid. llama.cpp's
 * lfm2moe graph (src/models/lfm2moe.cpp) always renormalises, always adds `exp_probs_b` (a tensor
 * it requires) and does not scale the weights: a spec without renormalisation, without a selection
 * bias, with a routed scale other than 1, or without a mixture is refused.
 */
function metadata(spec: ModelSpec): GgufEntries {
  const m = spec.moe;
  if (!m) return refuseExport(spec, 'num_experts', 0, 'llama.cpp’s lfm2moe loader wants experts');
  if (!m.renormalize)
    refuseExport(spec, 'norm_topk_prob', false, 'llama.cpp’s lfm2moe graph always renormalises the top-k');
  if (!m.selectionBias)
    refuseExport(spec, 'use_expert_bias', false, 'llama.cpp’s lfm2moe loader requires exp_probs_b');
  if (m.routedScale !== 1)
    refuseExport(spec, 'routed_scaling_factor', m.routedScale, 'llama.cpp’s lfm2moe graph does not scale');
  const dense = denseLayers(spec);
  return [
    ...lfm2Metadata(spec, 'lfm2moe'),
    ...moeMetadata(spec, 'lfm2moe'),
    ['lfm2moe.leading_dense_block_count', u32(dense)],
    ['lfm2moe.expert_gating_func', u32(GATING_FUNC.sigmoid)],
  ];
}

export const lfm2_moe: Family = {
  configTypes: { lfm2_moe: lfm2MoeSpec },
  config: (spec) => ({ ...baseConfig(spec, 'Lfm2MoeForCausalLM', 'lfm2_moe'), ...ownConfig(spec) }),
  blocks: (spec) => decoderBlocks(spec, { ...LFM2_RENAMES, moe: MOE_RENAMES }),
  finalNorm: 'model.embedding_norm.weight',
  // Published per expert: Transformers 5's fused stacks are read, never written.
  fused: (spec, layer) => expertStacks(spec, layer, 'feed_forward', 'never', MOE_RENAMES),
  gguf: {
    arch: 'lfm2moe',
    reads: true,
    async spec(g) {
      const heads = (h: number) => lfm2Layers(g, h, 'lfm2moe').kvHeads;
      const base = await ggufBaseSpec(g, {
        family: 'lfm2_moe',
        arch: 'lfm2moe',
        kvHeads: heads,
        ropeFreqs: false,
      });
      const dense = metaCountOrZero(g, 'lfm2moe.leading_dense_block_count');
      const layers = Array.from({ length: base.layers }, (_, i) => i >= dense);
      const scale = meta(g, 'lfm2moe.expert_weights_scale');
      const routing = {
        scoring: 'sigmoid',
        renormalize: true,
        renormEps: 1e-6,
        selectionBias: true,
        routedScale: typeof scale === 'number' && scale > 0 ? scale : 1,
      } as const;
      const fields = lfm2Fields(g, base, 'lfm2moe');
      if (!layers.includes(true)) return { ...base, ...fields };
      return { ...base, ...fields, moe: ggufMoe(g, 'lfm2moe', routing, layers) };
    },
    metadata,
    names: {
      global: LFM2_GLOBAL_NAMES,
      layer: [...LFM2_LAYER_NAMES, ...moeLayerNames('feed_forward')],
    },
    squeezed: ['.conv.conv.weight'],
    // conversion/lfm2.py, `LFM2MoeModel`: every value as it is, the experts stacked in order.
    storedForm: () => ({}),
  },
};
