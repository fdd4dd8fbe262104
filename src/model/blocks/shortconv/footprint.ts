// What a model's short-convolution blocks take on the GPU (BlockKind.footprint): in_proj and
// out_proj as packed, the input norm and the convolution's weights, and each layer's state (two
// windows, the in_proj rows kept for a commit, and its share of the gathered rows and the mixer's
// output).
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import type { ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { ShortConvBlock } from './block.js';
import { shortConvStateBytes } from './gpu.js';

/** The bytes of a model's short-convolution blocks (see BlockKind.footprint). */
export function shortConvFootprint(
  spec: ModelSpec,
  blocks: readonly ShortConvBlock[],
  format: WeightFormat,
  _o: FootprintOptions,
): KindFootprint {
  if (blocks.length === 0) return { weights: 0, kvCache: 0, state: 0, activations: 0, bound: [] };
  const H = spec.hidden;
  const K = spec.shortConv!.kernel;
  const rows = 4 * MAX_FORWARD_TOKENS;
  const matrices = packedBytes(format, 3 * H, H) + packedBytes(format, H, H);
  const vectors = 4 * (H + H * K);
  const state = shortConvStateBytes(spec) + rows * 3 * H + rows * (3 * H + H);
  return {
    weights: blocks.length * (matrices + vectors),
    kvCache: 0,
    state: blocks.length * state,
    activations: 0,
    bound: [],
  };
}
