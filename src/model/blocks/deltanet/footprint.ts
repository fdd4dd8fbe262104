// What a model's DeltaNet blocks take on the GPU (BlockKind.footprint): the fused projection and
// out_proj as packed, the input norm, convolution, decay and gated-norm vectors, and each layer's
// state (two copies, the projection rows kept for a commit, and its share of the gathered rows and
// the mixer's output).

import { InvalidInputError } from '../../../errors.js';
import { type DeltaNetShape, deltaNetSizes } from '../../../kernels/deltanet/reference.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import { deltaNetWidths, type ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { DeltaNetBlock } from './block.js';

/** The kernel shape of a spec's DeltaNet layers. */
export function deltaNetShape(spec: ModelSpec): DeltaNetShape {
  const dn = spec.deltaNet;
  if (!dn) throw new InvalidInputError(`the ${spec.family} spec has no DeltaNet layers`);
  return { ...dn, eps: spec.rmsEps };
}

/** Columns of a DeltaNet layer's projection row q | k | v | z | b | a (the kernel's row P). */
export function projWidth(spec: ModelSpec): number {
  return deltaNetSizes(deltaNetShape(spec)).row;
}

/** Floats of one copy of a layer's state: the conv window [K - 1, C] and S [Hv, dk, dv]. */
export function stateFloats(spec: ModelSpec): { conv: number; recurrent: number } {
  const dn = deltaNetShape(spec);
  return {
    conv: (dn.convKernel - 1) * deltaNetWidths(spec).convChannels,
    recurrent: dn.valueHeads * dn.keyDim * dn.valueDim,
  };
}

/** Bytes of one layer's state (both copies; its projection rows apart). */
export function deltaNetStateBytes(spec: ModelSpec): number {
  const { conv, recurrent } = stateFloats(spec);
  return 2 * 4 * (conv + recurrent);
}

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
