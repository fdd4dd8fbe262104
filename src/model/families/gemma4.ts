// Gemma 4's language model (`Gemma4TextConfig`; `gemma4` wraps it with vision and audio towers,
// which weft leaves out): Gemma 3's sandwich norms, GeGLU and sliding layers, plus per-layer
// embeddings (the `ple` and `layerend` blocks), full layers with a wider head and proportional
// RoPE, a weightless V norm, KV sharing across the last layers, double-wide MLPs on those, a
// learned scalar per layer, attention scale 1 and final-logit soft-capping. Norms use their weight
// as it is (not 1 + w).
import type { Block } from '../blocks/blocks.js';
import { layerEndBlock } from '../blocks/layerend/block.js';
import { pleBlock } from '../blocks/ple/block.js';
import { type Fields, refusePrequantized } from '../spec/fields.js';
import type { ModelSpec, MoeSpec, RopeSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, expertStacks, wrapped } from './decoder.js';
import type { Family } from './family.js';
import { GEMMA4_ROUTING, gemma4Gguf } from './gemma4-gguf.js';

/** Gemma4TextConfig's `rope_parameters` defaults, per layer type. */
const SLIDING_THETA = 10_000;
const FULL_THETA = 1_000_000;
const FULL_ROTARY_FACTOR = 0.25;

/**
 * Gemma 4's language model (`Gemma4TextConfig`, Transformers' defaults where a key is absent):
 * `layer_types` (every 6th full by default; the last layer is always full), sliding layers of
 * `head_dim` with RoPE θ 10⁴ over the head, full layers of `global_head_dim` (and, with
 * `attention_k_eq_v`, `num_global_key_value_heads` KV heads and V = K) with proportional RoPE
 * (`partial_rotary_factor` of the pairs turn), `num_kv_shared_layers`, `use_double_wide_mlp`,
 * per-layer inputs of `hidden_size_per_layer_input` (0: none), `final_logit_softcapping`.
 * With `enable_moe_block` (the 26B-A4B) every layer's MLP is a mixture of `num_experts` experts
 * (`top_k_experts`, `moe_intermediate_size`) beside the dense MLP (see {@link gemma4Moe}). Refused:
 * bidirectional attention, attention biases, other activations or RoPE types.
 */
function gemma4Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  const act = f.string('hidden_activation') ?? f.string('hidden_act') ?? 'gelu_pytorch_tanh';
  if (act !== 'gelu_pytorch_tanh' && act !== 'gelu_tanh')
    f.refuse(
      f.has('hidden_activation') ? 'hidden_activation' : 'hidden_act',
      'unsupported activation (gelu_pytorch_tanh)',
    );
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'gemma4 attention has no biases');
  if (f.has('use_bidirectional_attention') && f.obj.use_bidirectional_attention !== null)
    f.refuse('use_bidirectional_attention', 'bidirectional attention is not a causal language model');
  const hidden = f.count('hidden_size', 2304);
  const heads = f.count('num_attention_heads', 8);
  const kvHeads = f.count('num_key_value_heads', 4);
  const layers = f.count('num_hidden_layers', 30);
  const headDim = f.count('head_dim', 256);
  const fullHeadDim = f.count('global_head_dim', 512);
  const kEqV = f.boolean('attention_k_eq_v', false);
  const fullKvHeads =
    kEqV && f.has('num_global_key_value_heads') ? f.count('num_global_key_value_heads') : kvHeads;
  for (const [key, n] of [
    ['num_key_value_heads', kvHeads],
    ['num_global_key_value_heads', fullKvHeads],
  ] as const)
    if (heads % n !== 0) f.refuse(key, `must divide num_attention_heads (${heads})`);
  for (const [key, d] of [
    ['head_dim', headDim],
    ['global_head_dim', fullHeadDim],
  ] as const)
    if (d % 2 !== 0) f.refuse(key, 'must be even for RoPE');
  const sliding = readLayerTypes(f, layers);
  const shared = whole(f, 'num_kv_shared_layers', 0);
  if (shared >= layers)
    f.refuse('num_kv_shared_layers', `must leave a layer of each type before it (${layers} layers)`);
  const before = sliding.slice(0, layers - shared);
  if (sliding.slice(layers - shared).some((s) => !before.includes(s)))
    f.refuse('num_kv_shared_layers', 'a shared layer needs an earlier layer of its type (sliding or full)');
  const perLayerWidth = whole(f, 'hidden_size_per_layer_input', 256);
  const vocabSize = f.count('vocab_size', 262_144);
  const rp = f.object('rope_parameters');
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_word_embeddings') ? f : outer;
  const softcap = f.obj.final_logit_softcapping;
  return {
    family: 'gemma4',
    vocabSize,
    hidden,
    intermediate: f.count('intermediate_size', 9216),
    layers,
    heads,
    kvHeads,
    headDim,
    rmsEps: f.positive('rms_norm_eps', 1e-6),
    rope: fullRope(rp?.object('full_attention'), fullHeadDim, headDim),
    localRope: slidingRope(rp?.object('sliding_attention')),
    maxPositions: f.count('max_position_embeddings', 131_072),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', true),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0] ?? 2,
    eosIds: f.has('eos_token_id') ? f.ids('eos_token_id') : [1],
    slidingWindow: f.count('sliding_window', 512),
    slidingLayers: sliding,
    embedScale: true,
    sandwichNorms: true,
    activation: 'gelu_tanh',
    attentionScale: 1,
    fullAttention: { headDim: fullHeadDim, kvHeads: fullKvHeads, valueIsKey: kEqV },
    ...(shared > 0 ? { kvSharedLayers: shared } : {}),
    valueNorm: true,
    ...(f.boolean('use_double_wide_mlp', false) && shared > 0 ? { wideSharedMlp: true } : {}),
    ...(perLayerWidth > 0
      ? {
          perLayerInput: {
            width: perLayerWidth,
            vocab: f.count('vocab_size_per_layer_input', vocabSize),
          },
        }
      : {}),
    layerScalar: true,
    ...(f.boolean('enable_moe_block', false) ? { moe: gemma4Moe(f, layers) } : {}),
    ...(softcap === null || softcap === undefined
      ? {}
      : { logitSoftcap: f.positive('final_logit_softcapping') }),
  };
}

/**
 * Gemma 4's mixture (`Gemma4TextRouter`, `Gemma4TextExperts`) on every layer, beside the dense MLP:
 * the router reads the residual stream RMS-normed without a weight, times `router.scale` and
 * 1/√hidden; a softmax over the experts, the top k renormalised, each times its
 * `per_expert_scale`; GeGLU experts on `pre_feedforward_layernorm_2` of the stream; the dense and
 * expert outputs each normed (`post_feedforward_layernorm_1` and `_2`), summed and normed again.
 */
function gemma4Moe(f: Fields, layers: number): MoeSpec {
  return {
    experts: f.count('num_experts'),
    topK: f.count('top_k_experts'),
    intermediate: f.count('moe_intermediate_size'),
    ...GEMMA4_ROUTING,
    layers: Array(layers).fill(true),
  };
}

/** The mixture block's names in Gemma 4's checkpoints, per expert (the published files fuse them: see `fused`). */
const MOE_NAMES = {
  norm: 'pre_feedforward_layernorm_2.weight',
  router: 'router.proj.weight',
  gate: 'experts.{e}.gate_proj.weight',
  up: 'experts.{e}.up_proj.weight',
  down: 'experts.{e}.down_proj.weight',
} as const;

/** A non-negative integer key (0 allowed), `fallback` when absent. */
function whole(f: Fields, key: string, fallback: number): number {
  const v = f.number(key, fallback);
  if (!Number.isSafeInteger(v) || v < 0) f.refuse(key, 'must be a non-negative integer');
  return v;
}

/** Gemma 4's `layer_types` (true: sliding), every 6th full by default; the last is always full. */
function readLayerTypes(f: Fields, layers: number): boolean[] {
  const types = f.obj.layer_types;
  if (types === undefined || types === null)
    return Array.from({ length: layers }, (_, i) => i < layers - 1 && (i + 1) % 6 !== 0);
  if (!Array.isArray(types) || types.length !== layers)
    f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
  const out = types.map((t) => {
    if (t === 'sliding_attention') return true;
    if (t === 'full_attention') return false;
    return f.refuse(
      'layer_types',
      `unknown layer type ${JSON.stringify(t)} (sliding_attention or full_attention)`,
    );
  });
  out[layers - 1] = false; // Gemma4TextConfig forces the last layer to full attention
  return out;
}

/** The sliding layers' RoPE: the default one over the whole head. */
function slidingRope(p: Fields | undefined): RopeSpec {
  if (p) {
    const type = p.string('rope_type') ?? 'default';
    if (type !== 'default') p.refuse('rope_type', 'unsupported RoPE for sliding layers (default)');
  }
  return { theta: p?.positive('rope_theta', SLIDING_THETA) ?? SLIDING_THETA, layout: 'half' };
}

/**
 * The full layers' RoPE: proportional (`_compute_proportional_rope_parameters`): of the head's
 * headDim / 2 pairs, int(partial_rotary_factor · headDim // 2) turn, divided by `factor`; or the
 * default one over the whole head.
 */
function fullRope(p: Fields | undefined, headDim: number, sliding: number): RopeSpec {
  const type = p?.string('rope_type') ?? 'proportional';
  const theta = p?.positive('rope_theta', FULL_THETA) ?? FULL_THETA;
  if (type === 'default') {
    // Transformers' default RoPE spans `head_dim`, not the full layers' wider head.
    if (headDim !== sliding)
      p?.refuse('rope_type', `default RoPE on full layers needs global_head_dim = head_dim (${sliding})`);
    return { theta, layout: 'half' };
  }
  if (type !== 'proportional')
    p?.refuse('rope_type', 'unsupported RoPE for full layers (proportional or default)');
  const factor = p?.positive('factor', 1) ?? 1;
  // 0.25 in the defaults Transformers writes when `rope_parameters` is absent; 1 when a stated
  // proportional RoPE leaves the factor out.
  const partial = p ? p.number('partial_rotary_factor', 1) : FULL_ROTARY_FACTOR;
  if (!(partial > 0 && partial <= 1)) p?.refuse('partial_rotary_factor', 'must be in (0, 1]');
  const rotatedPairs = Math.floor((partial * headDim) / 2); // Python's int(p · d // 2)
  return { theta, layout: 'half', scaling: { type: 'proportional', rotatedPairs, factor } };
}

/** Gemma 4's blocks: the per-layer inputs, then per layer attention, the MLP and the layer's end. */
function gemma4Blocks(spec: ModelSpec): Block[] {
  const layers = decoderBlocks(spec, { mlp: { norm: 'pre_feedforward_layernorm.weight' }, moe: MOE_NAMES });
  const out: Block[] = spec.perLayerInput ? [pleBlock()] : [];
  for (const block of layers) {
    out.push(block);
    if (block.kind === 'mlp' || block.kind === 'moe') out.push(layerEndBlock(block.layer));
  }
  return out;
}

/** A `Gemma4TextConfig` that reads back as `spec`. */
function gemma4Config(spec: ModelSpec): Record<string, unknown> {
  const full = spec.fullAttention;
  const scaling = spec.rope.scaling;
  const fullRopeConfig =
    scaling?.type === 'proportional'
      ? {
          rope_type: 'proportional',
          rope_theta: spec.rope.theta,
          partial_rotary_factor: (2 * scaling.rotatedPairs) / (full?.headDim ?? spec.headDim),
          ...(scaling.factor === 1 ? {} : { factor: scaling.factor }),
        }
      : { rope_type: 'default', rope_theta: spec.rope.theta };
  const {
    rope_theta: _,
    rope_local_base_freq: __,
    query_pre_attn_scalar: ___,
    ...base
  } = baseConfig(spec, 'Gemma4ForCausalLM', 'gemma4_text');
  return {
    ...base,
    hidden_activation: 'gelu_pytorch_tanh',
    global_head_dim: full?.headDim ?? spec.headDim,
    attention_k_eq_v: full?.valueIsKey ?? false,
    ...(full?.valueIsKey ? { num_global_key_value_heads: full.kvHeads } : {}),
    num_kv_shared_layers: spec.kvSharedLayers ?? 0,
    use_double_wide_mlp: spec.wideSharedMlp ?? false,
    hidden_size_per_layer_input: spec.perLayerInput?.width ?? 0,
    vocab_size_per_layer_input: spec.perLayerInput?.vocab ?? spec.vocabSize,
    final_logit_softcapping: spec.logitSoftcap ?? null,
    enable_moe_block: spec.moe !== undefined,
    ...(spec.moe
      ? {
          num_experts: spec.moe.experts,
          top_k_experts: spec.moe.topK,
          moe_intermediate_size: spec.moe.intermediate,
        }
      : {}),
    rope_parameters: {
      sliding_attention: { rope_type: 'default', rope_theta: spec.localRope?.theta ?? SLIDING_THETA },
      full_attention: fullRopeConfig,
    },
  };
}

export const gemma4: Family = {
  configTypes: { gemma4: wrapped('gemma4', gemma4Spec, ['gemma4_text']), gemma4_text: gemma4Spec },
  config: gemma4Config,
  blocks: gemma4Blocks,
  finalNorm: 'model.norm.weight',
  // The published experts: `experts.gate_up_proj` [E, 2I, H] and `experts.down_proj` [E, H, I],
  // which llama.cpp's converter keeps (`ffn_gate_up_exps`, `ffn_down_exps`).
  fused: (spec, layer) => expertStacks(spec, layer, '', 'checkpoint and gguf', MOE_NAMES),
  gguf: {
    ...gemma4Gguf,
    async spec(g) {
      const { gemma4GgufSpec } = await import('./gemma4-gguf-read.js');
      return gemma4GgufSpec(g);
    },
  },
};
