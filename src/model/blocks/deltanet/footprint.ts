// What a model's DeltaNet blocks take on the GPU (BlockKind.footprint): the fused projection and
// out_proj as packed, the input norm, convolution, decay and gated-norm vectors, and each layer's
// state (two copies, the projection rows kept for a commit, and its share of the gathered rows and
// the mixer's output).
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import { deltaNetWidths, type ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { DeltaNetBlock } from './block.js';
import { deltaNetStateBytes, projWidth } from './gpu.js';

/** The bytes of a model's DeltaNet blocks (see BlockKind.footprint). */
export function deltaNetFootprint(
  spec: ModelSpec,
  blocks: readonly DeltaNetBlock[],
  format: WeightFormat,
  _o: FootprintOptions,
): KindFootprint {
  if (blocks.length === 0) return { weights: 0, kvCache: 0, state: 0, activations: 0, bound: [] };
  const dn = spec.deltaNet!;
  const { convChannels: C, valueWidth } = deltaNetWidths(spec);
  const P = projWidth(spec);
  const H = spec.hidden;
  const rows = 4 * MAX_FORWARD_TOKENS;
  const matrices = packedBytes(format, P, H) + packedBytes(format, H, valueWidth);
  const vectors = 4 * (H + C * dn.convKernel + 2 * dn.valueHeads + dn.valueDim);
  // Two state copies and the kept projection rows; the gathered rows and the mixer's output.
  const state = deltaNetStateBytes(spec) + rows * P + rows * (P + valueWidth);
  return {
    weights: blocks.length * (matrices + vectors),
    kvCache: 0,
    state: blocks.length * state,
    activations: 0,
    bound: [],
  };
}
