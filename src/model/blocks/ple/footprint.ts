// What the per-layer-inputs block takes on the GPU (BlockKind.footprint): the table and the
// projection as packed, the norm, and its rows: the table's lookups, the projection, the inputs.
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import type { ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import { type PleBlock, perLayerOf } from './block.js';

/** The bytes of a model's per-layer-inputs block (see BlockKind.footprint). */
export function pleFootprint(
  spec: ModelSpec,
  blocks: readonly PleBlock[],
  format: WeightFormat,
  _o: FootprintOptions,
): KindFootprint {
  if (blocks.length === 0) return { weights: 0, kvCache: 0, state: 0, activations: 0, bound: [] };
  const { width, vocab } = perLayerOf(spec);
  const n = spec.layers * width;
  return {
    weights: packedBytes(format, vocab, n) + packedBytes(format, n, spec.hidden) + 4 * width,
    kvCache: 0,
    state: 0,
    activations: 4 * MAX_FORWARD_TOKENS * 3 * n, // the table's rows, the projection, the inputs
    bound: [],
  };
}
