// The Gated DeltaNet block on the GPU (blocks.ts, linear.ts): its weights as placed, its linears,
// its state (the convolution window and the recurrent state, twice: see LinearStatePair) and its
// encode. Per pass, four dispatches: the fused projection q | k | v | z | b | a (the input norm
// folded in), the convolution, the delta rule with the gated norm (kernels/deltanet), and out_proj
// added into the residual stream.

import { InvalidInputError } from '../../../errors.js';
import { createBuffer } from '../../../gpu/buffers.js';
import type { GpuContext } from '../../../gpu/device.js';
import type { DeltaNet } from '../../../kernels/deltanet/deltanet.js';
import { type DeltaNetShape, deltaNetSizes } from '../../../kernels/deltanet/reference.js';
import type { GatherRows } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { linearSizes, type ModelSpec } from '../../spec/spec.js';
import { linearAttentionInputs } from '../../tensors.js';
import type { LinearAttentionBlock } from '../blocks.js';
import { layerPrefix } from '../blocks.js';
import { encodeResidual, normedInput } from '../encode.js';
import type { BlockState, GpuPass, KernelBuilder, Linear, LinearStatePair, Placer } from '../gpu.js';

/** The linear-attention block's weights on the GPU. */
export interface LinearGpuWeights {
  readonly kind: 'linear';
  readonly inputNorm: GPUBuffer; // [H], as it multiplies
  // in_proj_qkv, _z, _b and _a stacked by rows: one matmul whose output row is q | k | v | z | b | a.
  readonly proj: GpuMatrix; // [C + valueWidth + 2·Hv, H]
  readonly conv: GPUBuffer; // [C, K] the depthwise convolution (conv1d.weight [C, 1, K])
  readonly aLog: GPUBuffer; // [Hv]
  readonly dtBias: GPUBuffer; // [Hv]
  readonly norm: GPUBuffer; // [valueDim] the gated norm's weight
  readonly out: GpuMatrix; // [H, valueWidth]
}

/** The block's linears, bound to its matrices. */
export interface LinearKernels {
  readonly kind: 'linear';
  readonly proj: Linear; // [T, H] (un-normed when it folds the norm in) → [T, P]
  readonly out: Linear; // [T, valueWidth] → [T, H], added into x when fused.add
}

/** The kernel shape of a spec's linear-attention layers. */
export function deltaNetShape(spec: ModelSpec): DeltaNetShape {
  const la = spec.linearAttention;
  if (!la) throw new InvalidInputError(`the ${spec.family} spec has no linear-attention layers`);
  return { ...la, eps: spec.rmsEps };
}

/** Places the block's tensors. */
export async function placeLinear(placer: Placer, block: LinearAttentionBlock): Promise<LinearGpuWeights> {
  const { spec } = placer;
  const H = spec.hidden;
  const la = deltaNetShape(spec);
  const { valueWidth, convChannels: C } = linearSizes(spec);
  const p = `${layerPrefix(block.layer)}.linear_attn`;
  const [qkv, z, b, a] = linearAttentionInputs(block.layer);
  const proj = await placer.stacked(`${p}.in_proj.weight`, [
    [qkv, C, H],
    [z, valueWidth, H],
    [b, la.valueHeads, H],
    [a, la.valueHeads, H],
  ]);
  // The delta rule reads one row of all four: they must be one matrix.
  if (!('parts' in proj)) {
    for (const m of proj) m.destroy();
    throw new InvalidInputError(
      `${p}: in_proj_qkv, _z, _b and _a cannot be stacked into one matrix in this format (their rows do not end on its blocks)`,
    );
  }
  return {
    kind: 'linear',
    inputNorm: await placer.norm(`${layerPrefix(block.layer)}.input_layernorm.weight`, H),
    proj,
    conv: await placer.tensor(`${p}.conv1d.weight`, [C, 1, la.convKernel]),
    aLog: await placer.vector(`${p}.A_log`, la.valueHeads),
    dtBias: await placer.vector(`${p}.dt_bias`, la.valueHeads),
    norm: await placer.vector(`${p}.norm.weight`, la.valueDim),
    out: await placer.matrix(`${p}.out_proj.weight`, H, valueWidth),
  };
}

/** The block's matrices. */
export function linearMatrices(w: LinearGpuWeights): GpuMatrix[] {
  return [w.proj, w.out];
}

/** The block's other buffers. */
export function linearVectors(w: LinearGpuWeights): GPUBuffer[] {
  return [w.inputNorm, w.conv, w.aLog, w.dtBias, w.norm];
}

/** The block's linears: the fused projection takes the input norm where norms fold in. */
export function linearKernels(kb: KernelBuilder, w: LinearGpuWeights): LinearKernels {
  return {
    kind: 'linear',
    proj: kb.linear(w.proj, kb.norm(w.inputNorm)),
    out: kb.linear(w.out, { epilogue: 'add' }),
  };
}

/**
 * A layer's state, twice (zeros: a pass at position 0 starts from zeros anyway), and its
 * projection rows of `maxRows` rows.
 */
export function linearStateOf(
  ctx: GpuContext,
  spec: ModelSpec,
  layer: number,
  maxRows: number,
): LinearStatePair {
  const { conv, recurrent } = stateFloats(spec);
  const one = (i: number) => ({
    conv: createBuffer(ctx, conv * 4, `model.layers.${layer}.conv_state.${i}`),
    recurrent: createBuffer(ctx, recurrent * 4, `model.layers.${layer}.recurrent_state.${i}`),
  });
  return {
    pair: [one(0), one(1)],
    proj: createBuffer(ctx, maxRows * projWidth(spec) * 4, `model.layers.${layer}.linear_proj`),
  };
}

/** Floats of one copy of a layer's state: the conv window [K - 1, C] and S [Hv, dk, dv]. */
function stateFloats(spec: ModelSpec): { conv: number; recurrent: number } {
  const la = deltaNetShape(spec);
  return {
    conv: (la.convKernel - 1) * linearSizes(spec).convChannels,
    recurrent: la.valueHeads * la.keyDim * la.valueDim,
  };
}

/** Columns of a linear layer's projection row q | k | v | z | b | a (the kernel's row P). */
export function projWidth(spec: ModelSpec): number {
  return deltaNetSizes(deltaNetShape(spec)).row;
}

/** Bytes of one layer's state (both copies; its projection rows apart). */
export function linearStateBytes(spec: ModelSpec): number {
  const { conv, recurrent } = stateFloats(spec);
  return 2 * 4 * (conv + recurrent);
}

/** The delta rule's weights of a placed layer. */
function linearWeights(w: LinearGpuWeights) {
  return { convWeight: w.conv, aLog: w.aLog, dtBias: w.dtBias, normWeight: w.norm };
}

/** What {@link encodeLinearCommit} reads: the path's rows, their count, and the position of the first. */
export interface LinearCommitInputs {
  readonly rows: GPUBuffer; // [n] u32 the path's rows in the last pass
  readonly count: GPUBuffer; // [1] u32 n
  readonly base: GPUBuffer; // [1] u32 the committed length (0: the state starts from zeros)
  readonly n: number;
}

/**
 * Advances the layer's committed state along an accepted path of the last pass (a tree's, or a
 * chain's prefix): its rows gathered from the layer's projection rows into `a.proj`, then the
 * convolution and the delta rule run over them as a chain from the state of `version` into the
 * other copy. The caller steps the version.
 */
export function encodeLinearCommit(
  pass: GPUComputePassEncoder,
  k: { deltaNet: DeltaNet; gather: GatherRows },
  a: { proj: GPUBuffer; mixed: GPUBuffer },
  w: LinearGpuWeights,
  state: LinearStatePair,
  version: number,
  c: LinearCommitInputs,
): void {
  k.gather.encode(pass, state.proj, c.rows, a.proj, c.n);
  const from = state.pair[version % 2]!;
  const to = state.pair[(version + 1) % 2]!;
  k.deltaNet.encode(pass, a.proj, c.base, c.count, a.mixed, linearWeights(w), from, to);
}

/**
 * Encodes the block over the pass's rows after the committed state: the fused projection into the
 * layer's rows, the convolution and delta rule from the state of version `p.version` (a chain
 * writes the state after it into the other copy; a tree's rows each run through their ancestors
 * and write no state), and x += out_proj(y).
 */
export function encodeLinear(p: GpuPass, w: LinearGpuWeights, k: LinearKernels, state: BlockState): void {
  if (!state || !('pair' in state)) throw new Error('encodeLinear: a linear-attention block has its state');
  const { a, T } = p;
  const net = p.k.deltaNet;
  const { mixed, count } = a;
  if (!net || !mixed || !count) throw new Error('encodeLinear: the runner has no linear-attention buffers');
  p.section('qkv');
  // Into the layer's own rows: a commit after a tree reads the accepted ones from there.
  k.proj.encode(p.pass, k.proj.fused.norm ? a.x : normedInput(p, w.inputNorm), state.proj, T);
  p.section('attention');
  const from = state.pair[p.version % 2]!;
  const to = state.pair[(p.version + 1) % 2]!;
  const tree = p.tree ? { vis: a.vis, rows: T } : undefined;
  net.encode(p.pass, state.proj, a.positions, count, mixed, linearWeights(w), from, to, tree);
  p.section('o');
  encodeResidual(p, k.out, mixed);
}
