// The per-layer-inputs block's descriptor (Gemma 4's PLE): the model's first block, which computes
// every layer's input slice for the pass's rows. Its tensors are global (not under a layer), their
// shapes here, the one place they are written.
import type { ModelSpec, PerLayerInputSpec } from '../../spec/spec.js';
import type { TensorShapes } from '../names.js';

/**
 * Gemma 4's per-layer inputs, computed once per pass before the first layer: for each row, its
 * token's row of a table [vocab, layers · width] times √width, plus RMSNorm(per_layer_model_projection
 * · x / √hidden) per layer slice (x the scaled embedding), the two times 1/√2. Layer l's
 * `layerend` block reads slice l. Stateless.
 */
export interface PleBlock {
  readonly kind: 'ple';
  /** 0: it runs first, with the first layer. */
  readonly layer: number;
  readonly names: PleNames;
}

/** The checkpoint names of the per-layer-inputs block's tensors. */
export interface PleNames {
  /** [vocab, layers · width] */
  readonly table: string;
  /** [layers · width, H] */
  readonly projection: string;
  /** [width] */
  readonly norm: string;
}

/** The per-layer-inputs block under Transformers' Gemma 4 names. */
export function pleBlock(): PleBlock {
  return {
    kind: 'ple',
    layer: 0,
    names: {
      table: 'model.embed_tokens_per_layer.weight',
      projection: 'model.per_layer_model_projection.weight',
      norm: 'model.per_layer_projection_norm.weight',
    },
  };
}

/** The spec's per-layer inputs; throws for a spec without them. */
export function perLayerOf(spec: ModelSpec): PerLayerInputSpec {
  const p = spec.perLayerInput;
  if (!p) throw new Error(`ple: the ${spec.family} spec has no per-layer inputs`);
  return p;
}

/** The block's tensors with their shapes. */
export function pleTensors(spec: ModelSpec, block: PleBlock): TensorShapes {
  const { width, vocab } = perLayerOf(spec);
  const n = block.names;
  return [
    [n.table, [vocab, spec.layers * width]],
    [n.projection, [spec.layers * width, spec.hidden]],
    [n.norm, [width]],
  ];
}
