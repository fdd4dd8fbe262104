// The attention block's descriptor: which layer, and its tensors' checkpoint names (a family names
// them; which of them exist follows the spec's switches: qkvBias, qkNorm, sandwichNorms,
// outputGate). Its shapes are here too, the one place they are written.
import { deriveSizes, firstSharedLayer, layerSpec, type ModelSpec, valueIsKey } from '../../spec/spec.js';
import { namer, type Renames, type TensorShapes } from '../names.js';

/**
 * Self-attention of one decoder layer: its input norm, q | k | v (with the family's bias or
 * QK-norm), RoPE and the KV cache write, attention over the cache (causal, or a draft tree's
 * ancestors), o, and the residual add. Its state is the layer's KV cache.
 */
export interface AttentionBlock {
  readonly kind: 'attention';
  readonly layer: number;
  readonly names: AttentionNames;
}

/** The checkpoint names of an attention block's tensors. */
export interface AttentionNames {
  /** [H] the input norm. */
  readonly norm: string;
  /** [qWidth, H] (with an output gate [2 · qWidth, H]), [kvWidth, H], [kvWidth, H]. */
  readonly q: string;
  readonly k: string;
  readonly v: string;
  /** [qWidth], [kvWidth], [kvWidth] when `spec.qkvBias`. */
  readonly qBias: string;
  readonly kBias: string;
  readonly vBias: string;
  /** [headDim] each, when `spec.qkNorm`. */
  readonly qNorm: string;
  readonly kNorm: string;
  /** [H, qWidth] */
  readonly o: string;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: string;
}

/** Hugging Face's Llama naming under `prefix` (e.g. `model.layers.3`), with a family's renames. */
const LLAMA: AttentionNames = {
  norm: 'input_layernorm.weight',
  q: 'self_attn.q_proj.weight',
  k: 'self_attn.k_proj.weight',
  v: 'self_attn.v_proj.weight',
  qBias: 'self_attn.q_proj.bias',
  kBias: 'self_attn.k_proj.bias',
  vBias: 'self_attn.v_proj.bias',
  qNorm: 'self_attn.q_norm.weight',
  kNorm: 'self_attn.k_norm.weight',
  o: 'self_attn.o_proj.weight',
  outNorm: 'post_attention_layernorm.weight',
};

/** An attention block of layer `layer`, its tensors under `prefix` (Llama's names unless renamed). */
export function attentionBlock(
  layer: number,
  prefix = `model.layers.${layer}`,
  renames: Renames<AttentionNames> = {},
): AttentionBlock {
  const name = namer(prefix, LLAMA, renames);
  return {
    kind: 'attention',
    layer,
    names: {
      norm: name('norm'),
      q: name('q'),
      k: name('k'),
      v: name('v'),
      qBias: name('qBias'),
      kBias: name('kBias'),
      vBias: name('vBias'),
      qNorm: name('qNorm'),
      kNorm: name('kNorm'),
      o: name('o'),
      outNorm: name('outNorm'),
    },
  };
}

/**
 * What of K and V layer `layer` computes: both, K alone (Gemma 4's full layers with
 * `attention_k_eq_v`: V is K's projection), or neither (a KV-shared layer reads another's cache).
 */
export function kvProjections(spec: ModelSpec, layer: number): 'kv' | 'k' | 'none' {
  if (layer >= firstSharedLayer(spec)) return 'none';
  return valueIsKey(spec, layer) ? 'k' : 'kv';
}

/**
 * The block's tensors that the spec says exist, with their shapes (its layer's: see layerSpec), in
 * checkpoint order.
 */
export function attentionTensors(model: ModelSpec, block: AttentionBlock): TensorShapes {
  const spec = layerSpec(model, block.layer);
  const n = block.names;
  const H = spec.hidden;
  const { qWidth, kvWidth } = deriveSizes(spec);
  const kv = kvProjections(spec, block.layer);
  return [
    [n.norm, [H]],
    [n.q, [spec.outputGate ? 2 * qWidth : qWidth, H]],
    ...(kv === 'none' ? [] : ([[n.k, [kvWidth, H]]] as const)),
    ...(kv === 'kv' ? ([[n.v, [kvWidth, H]]] as const) : []),
    ...(spec.qkvBias
      ? ([
          [n.qBias, [qWidth]],
          [n.kBias, [kvWidth]],
          [n.vBias, [kvWidth]],
        ] as const)
      : []),
    ...(spec.qkNorm ? ([[n.qNorm, [spec.headDim]]] as const) : []),
    ...(spec.qkNorm && kv !== 'none' ? ([[n.kNorm, [spec.headDim]]] as const) : []),
    [n.o, [H, qWidth]],
    ...(spec.sandwichNorms ? ([[n.outNorm, [H]]] as const) : []),
  ];
}
