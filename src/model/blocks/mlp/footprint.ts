// What a model's MLP blocks take on the GPU (BlockKind.footprint): gate, up and down as packed,
// the input norm, and the gate | up | product scratch rows.
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import { layerSpec, type ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { MlpBlock } from './block.js';

/** The bytes of a model's MLP blocks (see BlockKind.footprint). */
export function mlpFootprint(
  spec: ModelSpec,
  blocks: readonly MlpBlock[],
  format: WeightFormat,
  _o: FootprintOptions,
): KindFootprint {
  const H = spec.hidden;
  const widths = blocks.map((b) => layerSpec(spec, b.layer).intermediate); // each layer's I
  const weights = widths.reduce(
    (n, I) => n + 2 * packedBytes(format, I, H) + packedBytes(format, H, I) + 4 * H,
    0,
  );
  return {
    weights,
    kvCache: 0,
    state: 0,
    activations: blocks.length > 0 ? 4 * MAX_FORWARD_TOKENS * 3 * Math.max(...widths) : 0,
    bound: [],
  };
}
