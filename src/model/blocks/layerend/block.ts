// The layer-end block's descriptor (Gemma 4): what closes a layer after its MLP, its per-layer
// input (PLE) and its learned scalar. Its tensors' shapes are here, the one place they are written.
import type { ModelSpec } from '../../spec/spec.js';
import { namer, type TensorShapes } from '../names.js';

/**
 * The end of a Gemma 4 layer: with per-layer inputs, x += rmsnorm(projection(gelu_tanh(gate · x)
 * · p_l)) (p_l the layer's slice of the `ple` block's inputs); with a layer scalar, then x ·= s.
 * Stateless.
 */
export interface LayerEndBlock {
  readonly kind: 'layerend';
  readonly layer: number;
  readonly names: LayerEndNames;
}

/** The checkpoint names of a layer-end block's tensors. */
export interface LayerEndNames {
  /** [width, H] */
  readonly gate: string;
  /** [H, width] */
  readonly projection: string;
  /** [H] */
  readonly norm: string;
  /** [1] */
  readonly scalar: string;
}

const GEMMA4: LayerEndNames = {
  gate: 'per_layer_input_gate.weight',
  projection: 'per_layer_projection.weight',
  norm: 'post_per_layer_input_norm.weight',
  scalar: 'layer_scalar',
};

/** The layer-end block of layer `layer` under Transformers' Gemma 4 names. */
export function layerEndBlock(layer: number, prefix = `model.layers.${layer}`): LayerEndBlock {
  const name = namer(prefix, GEMMA4, {});
  return {
    kind: 'layerend',
    layer,
    names: { gate: name('gate'), projection: name('projection'), norm: name('norm'), scalar: name('scalar') },
  };
}

/** The block's tensors that the spec says exist, with their shapes. */
export function layerEndTensors(spec: ModelSpec, block: LayerEndBlock): TensorShapes {
  const n = block.names;
  const H = spec.hidden;
  const width = spec.perLayerInput?.width;
  return [
    ...(width
      ? ([
          [n.gate, [width, H]],
          [n.projection, [H, width]],
          [n.norm, [H]],
        ] as const)
      : []),
    ...(spec.layerScalar ? ([[n.scalar, [1]]] as const) : []),
  ];
}
