// What a block's GPU side is handed by the runner: a placer for its weights (gpu-weights.ts), a
// kernel builder for its linears (gpu-kernels.ts), and, per forward, the pass it encodes into with
// the runner's activation buffers and shared kernels (gpu-runner.ts).

import type { SplitAttention } from '../../kernels/attention/attention-split.js';
import type { DeltaNet } from '../../kernels/deltanet/deltanet.js';
import type { DeltaNetState } from '../../kernels/deltanet/reference.js';
import type { AddInPlace, SigmoidGate, SiluMul } from '../../kernels/elementwise/elementwise.js';
import type { Hadamard } from '../../kernels/hadamard/hadamard.js';
import type { KvCompact, KvLayerBuffers, KvShape, KvWrite } from '../../kernels/kv/kv.js';
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import type { MatmulOptions } from '../../kernels/matmul/variant.js';
import type { RmsNorm, RmsNormAdd } from '../../kernels/norm/rmsnorm.js';
import type { QkvRope } from '../../kernels/rope/qkv-rope.js';
import type { Rope } from '../../kernels/rope/rope.js';
import type { ShortConv } from '../../kernels/shortconv/shortconv.js';
import type { Quant } from '../../quant/pack.js';
import type { ModelSpec } from '../spec/spec.js';

/**
 * Places a block's tensors on the GPU (each in its planned format, padding and rotation, filled a
 * slice of rows at a time), reporting each tensor's progress.
 */
export interface Placer {
  readonly spec: ModelSpec;
  readonly quant: Quant;
  /** One matrix [rows, cols] of the checkpoint. */
  matrix(name: string, rows: number, cols: number): Promise<GpuMatrix>;
  /**
   * Matrices stacked by rows into one (q | k | v: output rows piece 0 | piece 1 | …) where their
   * formats agree and each piece but the last ends on a block; else each alone.
   */
  stacked(label: string, pieces: readonly [string, number, number][]): Promise<GpuMatrix | GpuMatrix[]>;
  /**
   * A gate and an up matrix as one gated pair (silu(gate·x) · (up·x) in one matmul) where their
   * formats and blocks allow and the arithmetic has a gated form; else the two.
   */
  paired(
    label: string,
    gate: readonly [string, number, number],
    up: readonly [string, number, number],
  ): Promise<GpuMatrix | [GpuMatrix, GpuMatrix]>;
  /** A vector [n], repeated `repeat` times (for a per-row in-place add). */
  vector(name: string, n: number, repeat?: number): Promise<GPUBuffer>;
  /** Vectors joined into one row of `n` (the q | k | v bias the fused kernel adds). */
  row(label: string, names: readonly string[], n: number): Promise<GPUBuffer>;
  /** A norm's weight [n] as it multiplies: 1 + w where the spec's norms are zero-centred. */
  norm(name: string, n: number): Promise<GPUBuffer>;
  /** A tensor of any shape, uploaded as its f32 values (a convolution's weight [C, 1, K]). */
  tensor(name: string, shape: readonly number[]): Promise<GPUBuffer>;
}

/**
 * y [M, N] = x [M, K] · Wᵀ for one resident weight matrix, whatever the arithmetic. `fused` says
 * what the linear does besides: `norm`, it takes the un-normed residual and applies the RMSNorm
 * itself; `add`, it adds its result into y (the residual) instead of storing it; `gated`, its
 * matrix is a gate/up pair and it writes silu(gate·x) * (up·x).
 */
export interface Linear {
  readonly fused: { readonly norm: boolean; readonly add: boolean; readonly gated: boolean };
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number): void;
  destroy(): void;
}

/** Makes a block's linears over its matrices (the model's arithmetic: weight-only or W8A8). */
export interface KernelBuilder {
  /** A linear with the fusions it can take (W8A8 takes none: its activations are quantized first). */
  linear(m: GpuMatrix, fuse?: Omit<MatmulOptions, 'maxM'>): Linear;
  /** The fused-norm option of a linear reading norm(x) with this weight, where norms fold in. */
  norm(weight: GPUBuffer): Pick<MatmulOptions, 'norm'>;
}

/**
 * Online input rotations, one kernel per rotated width (undefined: that width is not rotated),
 * shared by every block: the `*_proj` weights are packed as W·Rᵀ, so their inputs must be R·x. Each
 * rotation writes `out`, which its linears read before the next rotation overwrites it.
 */
export interface Rotations {
  hidden: Hadamard | undefined; // n = H: the normed input of q/k/v and of gate/up
  heads: Hadamard | undefined; // n = qWidth: the attention output, input of o_proj
  mlp: Hadamard | undefined; // n = Ip: silu(gate) * up, input of down_proj
  out: GPUBuffer; // [T, max(H, qWidth, Ip)] the rotated copy
}

/**
 * The RoPE and attention kernels of one kind of attention layer: its RoPE (base, scaling, or none)
 * and its window. Layers of one kind share one set (Gemma 3: a sliding and a global set).
 */
export interface LayerAttentionKernels {
  /** The layers' KV cache shape (a sliding layer's: a ring; see layerKvShape). */
  kv: KvShape;
  rope: Rope;
  kvWrite: KvWrite; // the unfused path's K/V write
  compact: KvCompact; // a commit's compaction of the layers' rows
  qkvRope: QkvRope; // bias, QK-norm, RoPE and the KV write of a stacked q | k | v, one dispatch
  attention: SplitAttention;
}

/** The kernel instances every block shares (their uniforms never differ between blocks). */
export interface SharedKernels {
  norm: RmsNorm; // n = H, every T-row norm
  qNorm: RmsNorm | undefined; // n = headDim over T * heads rows
  kNorm: RmsNorm | undefined; // n = headDim over T * kvHeads rows
  /** Per layer, the RoPE and attention of its kind (undefined for a linear-attention layer). */
  attn: readonly (LayerAttentionKernels | undefined)[];
  add: AddInPlace; // T * H
  addQ: AddInPlace; // T * qWidth
  addKv: AddInPlace; // T * kvWidth
  silu: SiluMul; // act(gate) · up of an unpaired MLP (SiLU, or Gemma's GELU)
  normAdd: RmsNormAdd | undefined; // x += rmsnorm(y) · w: Gemma's norms of a block's output
  rot: Rotations | undefined; // the input rotations the `*_proj` weights were packed for
  gate: SigmoidGate | undefined; // attention · sigmoid(gate) of an output-gated model
  deltaNet: DeltaNet | undefined; // the linear-attention layers' conv and delta rule
  shortConv: ShortConv | undefined; // the short-convolution layers' gated convolution
}

/** The runner's activation buffers a block reads and writes, each for MAX_FORWARD_TOKENS rows. */
export interface BlockActivations {
  positions: GPUBuffer; // [T] u32 RoPE positions
  slots: GPUBuffer; // [T] u32 cache slots
  vis: GPUBuffer; // [T, 2] u32 each row's visible slots among the 64 up to its own (visWords)
  x: GPUBuffer; // [T, H] residual stream
  h: GPUBuffer; // [T, H] normed
  qkv: GPUBuffer; // [T, qWidth + 2·kvWidth] a stacked q | k | v matmul's output
  q: GPUBuffer; // [T, qWidth] (roped, when from qkv)
  k: GPUBuffer; // [T, kvWidth]
  v: GPUBuffer; // [T, kvWidth]
  qn: GPUBuffer; // [T, qWidth] q after QK-norm
  kn: GPUBuffer; // [T, kvWidth] k after QK-norm
  attn: GPUBuffer; // [T, qWidth]
  tmp: GPUBuffer; // [T, H]
  gate: GPUBuffer; // [T, Ip] (Ip: the MLP width as packed)
  up: GPUBuffer; // [T, Ip]
  act: GPUBuffer; // [T, Ip] silu(gate) * up
  // Only with recurrent (linear-attention, short-convolution) layers:
  proj: GPUBuffer | undefined; // [T, P | 3H] an accepted path's projection rows, gathered for a commit
  // [T, valueWidth | H] the mixer's output, input of out_proj: the delta rule's gated norm, or C · conv
  mixed: GPUBuffer | undefined;
  count: GPUBuffer | undefined; // [1] u32 T, staged with the pass's inputs
}

/** The sections a profiled forward is split into, in the order they run (see GpuRunner.profiler). */
export const PROFILE_SECTIONS = ['embed', 'qkv', 'attention', 'o', 'mlp', 'down', 'head', 'sample'] as const;
export type ProfileSection = (typeof PROFILE_SECTIONS)[number];

/** One forward pass of T rows as a block encodes into it. */
export interface GpuPass {
  /** The compute pass to record into (a new one after each {@link GpuPass.section} when profiling). */
  readonly pass: GPUComputePassEncoder;
  readonly spec: ModelSpec;
  /** Rows of the pass, and the cached rows before them. */
  readonly T: number;
  readonly base: number;
  /** Largest cache slot a row may hold (rows placed by a kernel); default base + T - 1. */
  readonly lastSlot: number | undefined;
  readonly a: BlockActivations;
  readonly k: SharedKernels;
  /** The version of the committed recurrent state the pass starts from (see LinearStatePair). */
  readonly version: number;
  /** The rows are a draft tree (depth first, `a.vis` their visibility), not a chain. */
  readonly tree: boolean;
  /** Starts a profiled section (a no-op unless profiling). */
  section(name: ProfileSection): void;
}

/**
 * A linear-attention layer's state, twice: a pass reads the committed one (`pair[version % 2]`)
 * and writes the other, so a pass never committed (a decode step run ahead, then dropped) leaves
 * the committed state as it was, and committing a chain is a version step.
 */
export interface LinearStatePair {
  readonly pair: readonly [DeltaNetState<GPUBuffer>, DeltaNetState<GPUBuffer>];
  /**
   * [MAX_FORWARD_TOKENS, P] the layer's projection rows of the last pass, kept until the next: a
   * commit after a tree runs the accepted path's rows from here as a chain.
   */
  readonly proj: GPUBuffer;
}

/**
 * A short-convolution layer's window [K - 1, H] (the last rows of B · x), twice, read and written
 * by version as {@link LinearStatePair}'s state is.
 */
export interface ConvStatePair {
  readonly windows: readonly [GPUBuffer, GPUBuffer];
  /** [MAX_FORWARD_TOKENS, 3H] the layer's in_proj rows of the last pass, which a commit runs again. */
  readonly proj: GPUBuffer;
}

/**
 * A block's state on the GPU: the KV cache of an attention block, the conv and recurrent state of
 * a linear-attention block, the window of a short-convolution block (none for an MLP).
 */
export type BlockState = KvLayerBuffers | LinearStatePair | ConvStatePair | undefined;

/** Whether a block's state is a KV cache. */
export function isKvCache(s: BlockState): s is KvLayerBuffers {
  return s !== undefined && 'k' in s;
}
