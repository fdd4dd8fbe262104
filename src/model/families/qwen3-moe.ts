// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B; `Qwen3MoeConfig`, `Qwen3MoeForCausalLM`): Qwen3's
// attention (QK-norm, explicit head_dim) with a mixture of experts in place of the MLP on most
// layers: a softmax router, the top-k experts, renormalised by `norm_topk_prob`. Published files
// hold the experts one by one (`mlp.experts.{e}.*_proj.weight`); Transformers 5 may write them
// fused (`mlp.experts.gate_up_proj`, `down_proj`), read per expert here. llama.cpp's `qwen3moe`
// architecture runs a renormalised softmax mixture on every layer.
import type { Fields } from '../spec/fields.js';
import type { ModelSpec, MoeSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, decoderSpec, expertStacks } from './decoder.js';
import type { Family, GgufEntries } from './family.js';
import {
  DECODER_LAYER_NAMES,
  decoderMetadata,
  GLOBAL_NAMES,
  ggufBaseSpec,
  ggufMoe,
  moeLayerNames,
  moeMetadata,
  refuseExport,
} from './gguf-base.js';

/**
 * The mixture of a Qwen3-MoE config (`Qwen3MoeConfig`'s keys and defaults): `num_experts` (128; 0
 * leaves every layer dense), `num_experts_per_tok` (8), `moe_intermediate_size` (768),
 * `norm_topk_prob` (false), and the mixture layers as `Qwen3MoeDecoderLayer` picks them: layer i
 * is a mixture unless it is in `mlp_only_layers`, when `num_experts` > 0 and (i + 1) is a multiple of
 * `decoder_sparse_step` (1); the others keep the dense MLP of `intermediate_size`.
 * `output_router_logits` and `router_aux_loss_coef` are training-only and ignored. Undefined when no
 * layer is a mixture.
 */
function readMoe(f: Fields, layers: number): Partial<ModelSpec> {
  const experts = f.number('num_experts', 128);
  if (!Number.isSafeInteger(experts) || experts < 0)
    f.refuse('num_experts', 'must be a non-negative integer');
  const topK = f.count('num_experts_per_tok', 8);
  if (experts > 0 && topK > experts)
    f.refuse('num_experts_per_tok', `must be at most num_experts (${experts})`);
  const step = f.count('decoder_sparse_step', 1);
  const only = f.obj.mlp_only_layers ?? [];
  if (!Array.isArray(only) || !only.every((i) => Number.isSafeInteger(i) && i >= 0 && i < layers))
    f.refuse('mlp_only_layers', `must list layer indices below num_hidden_layers (${layers})`);
  const mixture = Array.from(
    { length: layers },
    (_, i) => !only.includes(i) && experts > 0 && (i + 1) % step === 0,
  );
  if (!mixture.includes(true)) return {};
  const moe: MoeSpec = {
    experts,
    topK,
    intermediate: f.count('moe_intermediate_size', 768),
    scoring: 'softmax',
    renormalize: f.boolean('norm_topk_prob', false),
    renormEps: 0,
    selectionBias: false,
    routedScale: 1,
    layers: mixture,
  };
  return { moe };
}

/** A Qwen3-MoE spec's own keys: the mixture and its layers (the dense ones as `mlp_only_layers`). */
function ownConfig(spec: ModelSpec): Record<string, unknown> {
  const m = spec.moe;
  if (!m) return { num_experts: 0 };
  return {
    num_experts: m.experts,
    num_experts_per_tok: m.topK,
    moe_intermediate_size: m.intermediate,
    norm_topk_prob: m.renormalize,
    decoder_sparse_step: 1,
    mlp_only_layers: m.layers.flatMap((mixture, i) => (mixture ? [] : [i])),
  };
}

/**
 * The `qwen3moe.*` metadata in the converter's order (conversion/base.py, then conversion/qwen.py
 * `Qwen3MoeModel`): Qwen3's keys, then the experts'. llama.cpp's qwen3moe graph
 * (src/models/qwen3moe.cpp) runs a mixture on every layer and always renormalises the top-k
 * (`build_moe_ffn`'s norm_w is true): a spec with dense layers, without renormalisation, or without
 * a mixture is refused, and Llama 3 or LongRoPE scaling (the loader reads no rope_freqs.weight).
 */
function metadata(spec: ModelSpec): GgufEntries {
  const m = spec.moe;
  if (!m) return refuseExport(spec, 'num_experts', 0, 'llama.cpp’s qwen3moe loader wants experts');
  if (m.layers.includes(false))
    refuseExport(
      spec,
      'mlp_only_layers',
      ownConfig(spec).mlp_only_layers,
      'llama.cpp’s qwen3moe graph runs a mixture on every layer',
    );
  if (!m.renormalize)
    refuseExport(spec, 'norm_topk_prob', false, 'llama.cpp’s qwen3moe graph always renormalises the top-k');
  const s = spec.rope.scaling;
  if (s && s.type !== 'linear' && s.type !== 'yarn')
    refuseExport(spec, 'rope_scaling', s, 'llama.cpp’s qwen3moe loader reads no rope_freqs.weight');
  return [...decoderMetadata(spec, 'qwen3moe'), ...moeMetadata(spec, 'qwen3moe')];
}

export const qwen3_moe: Family = {
  configTypes: {
    qwen3_moe: (f) =>
      decoderSpec(f, {
        family: 'qwen3_moe',
        qkNorm: true,
        defaults: { kvHeads: 4 },
        extra: readMoe,
      }),
  },
  config: (spec) => ({ ...baseConfig(spec, 'Qwen3MoeForCausalLM', 'qwen3_moe'), ...ownConfig(spec) }),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  // Published per expert: Transformers 5's fused stacks are read, never written.
  fused: (spec, layer) => expertStacks(spec, layer, 'mlp', 'never'),
  gguf: {
    arch: 'qwen3moe',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, {
        family: 'qwen3_moe',
        arch: 'qwen3moe',
        ropeFreqs: false,
        yarn: true,
        qkNorm: true,
      });
      const routing = {
        scoring: 'softmax',
        renormalize: true,
        renormEps: 0,
        selectionBias: false,
        routedScale: 1,
      } as const;
      const layers = Array.from({ length: base.layers }, () => true);
      return { ...base, moe: ggufMoe(g, 'qwen3moe', routing, layers) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: [...DECODER_LAYER_NAMES, ...moeLayerNames('mlp')] },
    squeezed: [],
    // conversion/qwen.py, `Qwen3MoeModel`: every value as it is, the experts stacked in order.
    storedForm: () => ({}),
  },
};
