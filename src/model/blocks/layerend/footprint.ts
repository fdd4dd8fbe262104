// What a model's layer-end blocks take on the GPU (BlockKind.footprint): the per-layer gate and
// projection as packed, the norm and the scalar, and the gate's scratch rows.
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import type { ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { LayerEndBlock } from './block.js';

/** The bytes of a model's layer-end blocks (see BlockKind.footprint). */
export function layerEndFootprint(
  spec: ModelSpec,
  blocks: readonly LayerEndBlock[],
  format: WeightFormat,
  _o: FootprintOptions,
): KindFootprint {
  const H = spec.hidden;
  const width = spec.perLayerInput?.width ?? 0;
  const ple = width ? 2 * packedBytes(format, width, H) + 4 * H : 0;
  return {
    weights: blocks.length * (ple + (spec.layerScalar ? 4 : 0)),
    kvCache: 0,
    state: 0,
    activations: blocks.length > 0 ? 4 * MAX_FORWARD_TOKENS * 2 * width : 0, // the gate's rows, gated
    bound: [],
  };
}
