// What a model's short-convolution blocks take on the GPU (BlockKind.footprint): in_proj and
// out_proj as packed, the input norm and the convolution's weights, and each layer's state (two
// windows, the in_proj rows kept for a commit, and its share of the gathered rows and the mixer's
// output).

import { InvalidInputError } from '../../../errors.js';
import type { ShortConvShape } from '../../../kernels/shortconv/reference.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import type { ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { ShortConvBlock } from './block.js';

/** The kernel shape of a spec's short-convolution layers. */
export function shortConvShape(spec: ModelSpec): ShortConvShape {
  const sc = spec.shortConv;
  if (!sc) throw new InvalidInputError(`the ${spec.family} spec has no short-convolution layers`);
  return { channels: spec.hidden, kernel: sc.kernel };
}

/** Floats of one copy of a layer's window [K - 1, H]. */
export function windowFloats(spec: ModelSpec): number {
  const { channels, kernel } = shortConvShape(spec);
  return (kernel - 1) * channels;
}

/** Bytes of one layer's window (both copies; its in_proj rows apart). */
export function shortConvStateBytes(spec: ModelSpec): number {
  return 2 * 4 * windowFloats(spec);
}

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
