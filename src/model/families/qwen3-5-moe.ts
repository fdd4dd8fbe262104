// Qwen3.5-MoE (Qwen3.5-35B-A3B; `Qwen3_5MoeTextConfig`, in the published `qwen3_5_moe`
// vision-language wrapper): the Qwen3.5 hybrid (qwen3-5.ts: Gated DeltaNet beside gated
// attention, zero-centred norms, partial rotary) with a mixture on every layer: a softmax router,
// the top-k renormalised, and a shared expert scaled by sigmoid(shared_expert_gate · h). Published
// files hold the routed experts fused (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj`
// [E, H, I]), read per expert here. llama.cpp's `qwen35moe` architecture.
import { metaCount } from '../../formats/gguf/meta.js';
import type { Fields } from '../spec/fields.js';
import type { ModelSpec, MoeSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, expertStacks, wrapped } from './decoder.js';
import type { Family, GgufEntries } from './family.js';
import {
  GLOBAL_NAMES,
  ggufBaseSpec,
  ggufMoe,
  moeLayerNames,
  moeMetadata,
  refuseExport,
} from './gguf-base.js';
import {
  QWEN35_LAYER_NAMES,
  qwen35Fields,
  qwen35Metadata,
  qwen35OwnConfig,
  qwen35Spec,
  qwen35StoredForm,
} from './qwen3-5.js';

/**
 * Qwen3.5-MoE's language model: Qwen3.5's (qwen3-5.ts `qwen35Spec`; its dense MLP width, which no
 * layer uses, taken as the experts') with `Qwen3_5MoeTextConfig`'s mixture on every layer:
 * `num_experts` (256), `num_experts_per_tok` (8), `moe_intermediate_size` (512),
 * `shared_expert_intermediate_size` (512); `Qwen3_5MoeTopKRouter` always renormalises.
 * `output_router_logits` and `router_aux_loss_coef` are training-only and ignored.
 */
function qwen35MoeSpec(f: Fields, outer: Fields): ModelSpec {
  const intermediate = f.count('moe_intermediate_size', 512);
  const base = qwen35Spec(f, outer, 'qwen3_5_moe', intermediate);
  const experts = f.count('num_experts', 256);
  const topK = f.count('num_experts_per_tok', 8);
  if (topK > experts) f.refuse('num_experts_per_tok', `must be at most num_experts (${experts})`);
  const moe: MoeSpec = {
    experts,
    topK,
    intermediate,
    scoring: 'softmax',
    renormalize: true,
    renormEps: 0,
    selectionBias: false,
    routedScale: 1,
    sharedIntermediate: f.count('shared_expert_intermediate_size', 512),
    layers: Array.from({ length: base.layers }, () => true),
  };
  return { ...base, intermediate, moe };
}

/** A Qwen3.5-MoE spec's own keys: Qwen3.5's and the mixture's. */
function ownConfig(spec: ModelSpec): Record<string, unknown> {
  const m = spec.moe;
  return {
    ...qwen35OwnConfig(spec),
    ...(m
      ? {
          num_experts: m.experts,
          num_experts_per_tok: m.topK,
          moe_intermediate_size: m.intermediate,
          shared_expert_intermediate_size: m.sharedIntermediate,
        }
      : {}),
  };
}

/**
 * The `qwen35moe.*` metadata in the converter's order (conversion/qwen.py, Qwen3.5's then the
 * experts'; no `feed_forward_length`: the config has no dense width). llama.cpp's qwen35moe graph
 * (src/models/qwen35moe.cpp) runs a renormalised softmax mixture and a gated shared expert on
 * every layer: any other spec is refused.
 */
function metadata(spec: ModelSpec): GgufEntries {
  const m = spec.moe;
  const every = m?.layers.every((x) => x) && m.renormalize && m.scoring === 'softmax';
  if (!m || !every || m.sharedIntermediate === undefined || m.selectionBias || m.routedScale !== 1)
    refuseExport(
      spec,
      'moe',
      m,
      'llama.cpp’s qwen35moe graph runs a renormalised softmax mixture with a shared expert on every layer',
    );
  const la = spec.deltaNet;
  if (la && la.valueDim !== la.keyDim)
    refuseExport(
      spec,
      'linear_value_head_dim',
      la.valueDim,
      `llama.cpp’s qwen35moe loader takes it as the key width (${la.keyDim})`,
    );
  return [
    ...qwen35Metadata(spec, 'qwen35moe').filter(([key]) => key !== 'qwen35moe.feed_forward_length'),
    ...moeMetadata(spec, 'qwen35moe'),
  ];
}

export const qwen3_5_moe: Family = {
  configTypes: {
    qwen3_5_moe: wrapped('qwen3_5_moe', qwen35MoeSpec, ['qwen3_5_moe_text']),
    qwen3_5_moe_text: qwen35MoeSpec,
  },
  config: (spec) => ({
    ...baseConfig(spec, 'Qwen3_5MoeForCausalLM', 'qwen3_5_moe_text'),
    ...ownConfig(spec),
  }),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  // Published fused: gate_up_proj and down_proj written as the published files hold them.
  fused: (spec, layer) => expertStacks(spec, layer, 'mlp', 'checkpoint'),
  gguf: {
    arch: 'qwen35moe',
    reads: true,
    async spec(g) {
      // No feed_forward_length in the converter's files: the dense width is the experts'.
      const expert = (file: typeof g) => metaCount(file, 'qwen35moe.expert_feed_forward_length');
      const base = await ggufBaseSpec(g, {
        family: 'qwen3_5_moe',
        arch: 'qwen35moe',
        ropeFreqs: false,
        intermediate: expert,
      });
      const fields = qwen35Fields(g, base, 'qwen35moe');
      const layers = Array.from({ length: fields.layers ?? base.layers }, () => true);
      const routing = {
        scoring: 'softmax',
        renormalize: true,
        renormEps: 0,
        selectionBias: false,
        routedScale: 1,
      } as const;
      return { ...base, ...fields, moe: ggufMoe(g, 'qwen35moe', routing, layers, true) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: [...QWEN35_LAYER_NAMES, ...moeLayerNames('mlp')] },
    squeezed: ['linear_attn.conv1d.weight'],
    // Qwen3.5's forms (norms 1 + w, A_log, tiled value heads); the experts as they are.
    storedForm: qwen35StoredForm,
  },
};
