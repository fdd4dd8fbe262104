// The short-convolution block on the GPU (blocks.ts, shortconv.ts): LFM2's gated short convolution,
// its weights as placed, its linears, its state (the window of the last kernel - 1 rows of B · x,
// twice: see ConvStatePair) and its encode. Per pass, three dispatches: in_proj to B | C | x (the
// input norm folded in), the gated convolution (kernels/shortconv), and out_proj added into the
// residual stream.

import { InvalidInputError } from '../../../errors.js';
import { createBuffer } from '../../../gpu/buffers.js';
import type { GpuContext } from '../../../gpu/device.js';
import type { GatherRows } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import type { ShortConvShape } from '../../../kernels/shortconv/reference.js';
import type { ShortConv } from '../../../kernels/shortconv/shortconv.js';
import type { ModelSpec } from '../../spec/spec.js';
import { normNames, shortConvInputs } from '../../tensors.js';
import type { ShortConvBlock } from '../blocks.js';
import { layerPrefix } from '../blocks.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
import type { BlockState, ConvStatePair, GpuPass, KernelBuilder, Linear, Placer } from '../gpu.js';

/** The short-convolution block's weights on the GPU. */
export interface ShortConvGpuWeights {
  readonly kind: 'conv';
  readonly inputNorm: GPUBuffer; // [H] operator_norm, as it multiplies
  readonly inProj: GpuMatrix; // [3H, H] one matmul whose output row is B | C | x
  readonly conv: GPUBuffer; // [H, K] the depthwise convolution (conv.weight [H, 1, K])
  readonly out: GpuMatrix; // [H, H]
}

/** The block's linears, bound to its matrices. */
export interface ShortConvKernels {
  readonly kind: 'conv';
  readonly inProj: Linear; // [T, H] (un-normed when it folds the norm in) → [T, 3H]
  readonly out: Linear; // [T, H] → [T, H], added into x when fused.add
}

/** The kernel shape of a spec's short-convolution layers. */
export function shortConvShape(spec: ModelSpec): ShortConvShape {
  const sc = spec.shortConv;
  if (!sc) throw new InvalidInputError(`the ${spec.family} spec has no short-convolution layers`);
  return { channels: spec.hidden, kernel: sc.kernel };
}

/** Places the block's tensors. */
export async function placeShortConv(placer: Placer, block: ShortConvBlock): Promise<ShortConvGpuWeights> {
  const { spec } = placer;
  const H = spec.hidden;
  const { kernel: K } = shortConvShape(spec);
  const p = `${layerPrefix(block.layer)}.conv`;
  return {
    kind: 'conv',
    inputNorm: await placer.norm(normNames(spec, block.layer).input, H),
    // The kernel reads B, C and x of one row: in_proj stays one matrix, as the checkpoint stores it.
    inProj: await placer.matrix(shortConvInputs(block.layer)[0], 3 * H, H),
    conv: await placer.tensor(`${p}.conv.weight`, [H, 1, K]),
    out: await placer.matrix(`${p}.out_proj.weight`, H, H),
  };
}

/** The block's matrices. */
export function shortConvMatrices(w: ShortConvGpuWeights): GpuMatrix[] {
  return [w.inProj, w.out];
}

/** The block's other buffers. */
export function shortConvVectors(w: ShortConvGpuWeights): GPUBuffer[] {
  return [w.inputNorm, w.conv];
}

/** The block's linears: in_proj takes the input norm where norms fold in. */
export function shortConvKernels(kb: KernelBuilder, w: ShortConvGpuWeights): ShortConvKernels {
  return {
    kind: 'conv',
    inProj: kb.linear(w.inProj, kb.norm(w.inputNorm)),
    out: kb.linear(w.out, { epilogue: 'add' }),
  };
}

/**
 * A layer's window, twice (zeros: a pass at position 0 starts from zeros anyway), and its in_proj
 * rows of `maxRows` rows.
 */
export function shortConvStateOf(
  ctx: GpuContext,
  spec: ModelSpec,
  layer: number,
  maxRows: number,
): ConvStatePair {
  const bytes = windowFloats(spec) * 4;
  const one = (i: number) => createBuffer(ctx, bytes, `model.layers.${layer}.conv_window.${i}`);
  return {
    windows: [one(0), one(1)],
    proj: createBuffer(ctx, maxRows * 3 * spec.hidden * 4, `model.layers.${layer}.conv_proj`),
  };
}

/** Floats of one copy of a layer's window [K - 1, H]. */
function windowFloats(spec: ModelSpec): number {
  const { channels, kernel } = shortConvShape(spec);
  return (kernel - 1) * channels;
}

/** Bytes of one layer's window (both copies; its in_proj rows apart). */
export function shortConvStateBytes(spec: ModelSpec): number {
  return 2 * 4 * windowFloats(spec);
}

/** What {@link encodeShortConvCommit} reads: the path's rows, their count, and the position of the first. */
export interface ShortConvCommitInputs {
  readonly rows: GPUBuffer; // [n] u32 the path's rows in the last pass
  readonly count: GPUBuffer; // [1] u32 n
  readonly base: GPUBuffer; // [1] u32 the committed length (0: the window starts from zeros)
  readonly n: number;
}

/**
 * Advances the layer's committed window along an accepted path of the last pass (a tree's, or a
 * chain's prefix): its rows gathered from the layer's in_proj rows into `a.proj`, then the
 * convolution run over them as a chain from the window of `version` into the other copy (its
 * output, into `a.mixed`, is not read). The caller steps the version.
 */
export function encodeShortConvCommit(
  pass: GPUComputePassEncoder,
  k: { shortConv: ShortConv; gather: GatherRows },
  a: { proj: GPUBuffer; mixed: GPUBuffer },
  w: ShortConvGpuWeights,
  state: ConvStatePair,
  version: number,
  c: ShortConvCommitInputs,
): void {
  k.gather.encode(pass, state.proj, c.rows, a.proj, c.n);
  const from = state.windows[version % 2]!;
  const to = state.windows[(version + 1) % 2]!;
  k.shortConv.encode(pass, a.proj, c.base, c.count, w.conv, a.mixed, from, to);
}

/**
 * Encodes the block over the pass's rows after the committed window: in_proj into the layer's rows,
 * the gated convolution from the window of version `p.version` (a chain writes the window after it
 * into the other copy; a tree's rows each run through their ancestors and write none), and
 * x += out_proj(y).
 */
export function encodeShortConv(
  p: GpuPass,
  w: ShortConvGpuWeights,
  k: ShortConvKernels,
  state: BlockState,
): void {
  if (!state || !('windows' in state))
    throw new Error('encodeShortConv: a short-convolution block has its window');
  const { a, T } = p;
  const op = p.k.shortConv;
  const { mixed, count } = a;
  if (!op || !mixed || !count)
    throw new Error('encodeShortConv: the runner has no short-convolution buffers');
  p.section('qkv');
  // Into the layer's own rows: a commit after a tree reads the accepted ones from there.
  k.inProj.encode(p.pass, k.inProj.fused.norm ? a.x : normedInput(p, w.inputNorm), state.proj, T);
  p.section('attention');
  const from = state.windows[p.version % 2]!;
  const to = state.windows[(p.version + 1) % 2]!;
  const tree = p.tree ? { vis: a.vis, rows: T } : undefined;
  op.encode(p.pass, state.proj, a.positions, count, w.conv, mixed, from, to, tree);
  p.section('o');
  // out_proj reads a width-H row: rotated as the hidden width is, where its weights were packed so.
  encodeResidual(p, k.out, rotatedInput(p, p.k.rot?.hidden, mixed));
}
