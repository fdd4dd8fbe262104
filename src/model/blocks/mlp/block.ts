// The MLP block's descriptor: which layer, its activation, and its tensors' checkpoint names (a
// family names them; the output norm exists with `spec.sandwichNorms`). Its shapes are here too.
import { layerSpec, type ModelSpec } from '../../spec/spec.js';
import { namer, type Renames, type TensorShapes } from '../names.js';

/** The gated MLP of one decoder layer: its norm, gate | up, the activation, down and the residual add. */
export interface MlpBlock {
  readonly kind: 'mlp';
  readonly layer: number;
  /** silu(gate) · up (Llama, Qwen), or gelu_tanh(gate) · up (Gemma's GeGLU). */
  readonly activation: 'silu' | 'gelu_tanh';
  readonly names: MlpNames;
}

/** The checkpoint names of an MLP block's tensors. */
export interface MlpNames {
  /** [H] the block's input norm. */
  readonly norm: string;
  /** [I, H] each */
  readonly gate: string;
  readonly up: string;
  /** [H, I] */
  readonly down: string;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: string;
}

/** Hugging Face's Llama naming, suffixes under the layer's prefix. */
const LLAMA: MlpNames = {
  norm: 'post_attention_layernorm.weight',
  gate: 'mlp.gate_proj.weight',
  up: 'mlp.up_proj.weight',
  down: 'mlp.down_proj.weight',
  outNorm: 'post_feedforward_layernorm.weight',
};

/** An MLP block of layer `layer` with `activation`, its tensors under `prefix` (Llama's names unless renamed). */
export function mlpBlock(
  layer: number,
  activation: MlpBlock['activation'],
  prefix = `model.layers.${layer}`,
  renames: Renames<MlpNames> = {},
): MlpBlock {
  const name = namer(prefix, LLAMA, renames);
  return {
    kind: 'mlp',
    layer,
    activation,
    names: {
      norm: name('norm'),
      gate: name('gate'),
      up: name('up'),
      down: name('down'),
      outNorm: name('outNorm'),
    },
  };
}

/** The block's tensors that the spec says exist, with their shapes, in checkpoint order. */
export function mlpTensors(spec: ModelSpec, block: MlpBlock): TensorShapes {
  const n = block.names;
  const H = spec.hidden;
  const I = layerSpec(spec, block.layer).intermediate; // the layer's (Gemma 4's wide shared layers)
  return [
    [n.norm, [H]],
    [n.gate, [I, H]],
    [n.up, [I, H]],
    [n.down, [H, I]],
    ...(spec.sandwichNorms ? ([[n.outNorm, [H]]] as const) : []),
  ];
}
