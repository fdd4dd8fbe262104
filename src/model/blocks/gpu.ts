// What a block kind's GPU side is handed by the runner (model/gpu/), and what it hands back: a
// placer for its weights, a kernel context for its per-model kernels, its scratch and its state,
// and, per forward, the pass it encodes into with the runner's row buffers and common kernels. A
// placed block (GpuBlock) binds into a BoundBlock that encodes, commits and owns its state.
import type { GpuContext } from '../../gpu/device.js';
import type { BindGroupCache } from '../../kernels/bind.js';
import type { AddInPlace } from '../../kernels/elementwise/elementwise.js';
import type { Hadamard } from '../../kernels/hadamard/hadamard.js';
import type { KvLayerBuffers, KvShape } from '../../kernels/kv/kv.js';
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import type { MatmulOptions } from '../../kernels/matmul/variant.js';
import type { GpuExperts } from '../../kernels/moe/experts.js';
import type { RmsNorm, RmsNormAdd } from '../../kernels/norm/rmsnorm.js';
import type { WeightFormat } from '../../quant/formats.js';
import type { Quant, RotationChoice } from '../../quant/pack.js';
import type { ModelSpec } from '../spec/spec.js';

/** Largest number of tokens one forward pass takes (prefill chunk or draft tree). */
export const MAX_FORWARD_TOKENS = 64;

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
  /** The format a checkpoint matrix [rows, cols] is placed in (its stored one, or the quant's). */
  formatOf(name: string, rows: number, cols: number): WeightFormat;
  /**
   * A mixture's experts as stacks (see `allocateExperts`), slot e of every stack holding expert e;
   * or, where the runner's expert budget cannot hold them all, a GPU cache of fewer slots per
   * stack with every expert kept packed in CPU memory (`store`), loaded into a slot when chosen.
   * Throws InvalidInputError when a stack's pieces differ in format, or when the budget holds
   * fewer slots than a token's topK experts (naming the numbers).
   */
  experts(stacks: readonly ExpertStackSpec[]): Promise<PlacedExperts>;
  /** A vector [n], repeated `repeat` times (for a per-row in-place add). */
  vector(name: string, n: number, repeat?: number): Promise<GPUBuffer>;
  /** Vectors joined into one row of `n` (the q | k | v bias the fused kernel adds). */
  row(label: string, names: readonly string[], n: number): Promise<GPUBuffer>;
  /** A norm's weight [n] as it multiplies: 1 + w where the spec's norms are zero-centred. */
  norm(name: string, n: number): Promise<GPUBuffer>;
  /** A tensor of any shape, uploaded as its f32 values (a convolution's weight [C, 1, K]). */
  tensor(name: string, shape: readonly number[]): Promise<GPUBuffer>;
}

/** One expert stack to place: per expert, [gate, up] names (a gated stack) or [name]; each [rows, cols]. */
export interface ExpertStackSpec {
  readonly label: string;
  readonly names: readonly (readonly string[])[];
  readonly rows: number;
  readonly cols: number;
}

/** A mixture layer's expert stacks on the GPU (see Placer.experts). */
export interface PlacedExperts {
  /** Each stack: every expert, or the `store.slots` slots of the GPU cache. */
  readonly stacks: readonly GpuExperts[];
  /** Where the experts are paged: every expert in CPU memory. */
  readonly store?: ExpertStore;
}

/** Every expert of a mixture layer held packed in CPU memory, loaded into GPU slots when chosen. */
export interface ExpertStore {
  readonly experts: number;
  /** Slots of each GPU stack. */
  readonly slots: number;
  /** Bytes one expert takes over all its stacks (what loading it writes). */
  readonly expertBytes: number;
  /** Writes expert `expert`'s packed words into slot `slot` of every stack (queue writes). */
  load(expert: number, slot: number): void;
}

/**
 * y [M, N] = x [M, K] · Wᵀ for one resident weight matrix, whatever the arithmetic. `fused` says
 * what the linear does besides: `norm`, it takes the un-normed residual and applies the RMSNorm
 * itself; `add`, it adds its result into y (the residual) instead of storing it; `gated`, its
 * matrix is a gate/up pair and it writes silu(gate·x) * (up·x).
 */
export interface Linear {
  readonly fused: { readonly norm: boolean; readonly add: boolean; readonly gated: boolean };
  /** `prefill`: the rows are a prompt chunk (see {@link GpuPass.prefill}). */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number, prefill?: boolean): void;
  destroy(): void;
}

/** Makes a block's linears over its matrices (the model's arithmetic: weight-only or W8A8). */
export interface KernelBuilder {
  /** A linear with the fusions it can take (W8A8 takes none: its activations are quantized first). */
  linear(m: GpuMatrix, fuse?: Omit<MatmulOptions, 'maxM'>): Linear;
  /**
   * A weight-only linear whatever the model's arithmetic, as the LM head is: for matrices that are
   * not `*_proj` linears (Gemma 4's per-layer projections), whose inputs W8A8 does not round.
   */
  weightOnly(m: GpuMatrix, fuse?: Omit<MatmulOptions, 'maxM'>): Linear;
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
  /**
   * The rotation of a linear's input of `width` (undefined: not rotated), its kernel of the padded
   * width: the attention output of a layer's qWidth (input of o_proj), a layer's MLP width
   * (silu(gate) * up, input of down_proj). Every width a model's layers have is made once.
   */
  of(width: number): Hadamard | undefined;
  out: GPUBuffer; // [T, max(H, every layer's qWidth and Ip)] the rotated copy
  /** Destroys every rotation kernel and the buffer. */
  destroy(): void;
}

/** The kernels every kind's blocks share (their uniforms never differ between blocks). */
export interface CommonKernels {
  norm: RmsNorm; // n = H, every T-row norm
  add: AddInPlace; // T * H
  normAdd: RmsNormAdd | undefined; // x += rmsnorm(y) · w: Gemma's norms of a block's output
  rot: Rotations | undefined; // the input rotations the `*_proj` weights were packed for
}

/** The runner's row buffers every kind reads and writes, each for MAX_FORWARD_TOKENS rows. */
export interface RowBuffers {
  positions: GPUBuffer; // [T] u32 RoPE positions
  slots: GPUBuffer; // [T] u32 cache slots
  vis: GPUBuffer; // [T, 2] u32 each row's visible slots among the 64 up to its own (visWords)
  x: GPUBuffer; // [T, H] residual stream
  h: GPUBuffer; // [T, H] normed
  tmp: GPUBuffer; // [T, H]
  count: GPUBuffer | undefined; // [1] u32 T, staged with the pass's inputs (models with recurrent blocks)
  ids: GPUBuffer; // [T] u32 the rows' token ids (a table lookup's: Gemma 4's per-layer inputs)
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
  readonly a: RowBuffers;
  readonly k: CommonKernels;
  /** The version of the committed recurrent state the pass starts from (see StatePair). */
  readonly version: number;
  /** The rows are a draft tree (depth first, `a.vis` their visibility), not a chain. */
  readonly tree: boolean;
  /**
   * The rows are a prompt chunk (ForwardInput.prefill): the linears may take their prefill GEMM.
   * Decode steps and draft trees never do, so their rows keep the batch-invariant forms' bits.
   */
  readonly prefill: boolean;
  /** Starts a profiled section (a no-op unless profiling). */
  section(name: ProfileSection): void;
}

/**
 * What a block kind's GPU side is given, once per model, to make its kernels, scratch and state:
 * the device, the model, how its weights were placed, and the runner's common kernels and row
 * buffers.
 */
export interface KindContext {
  readonly ctx: GpuContext;
  readonly binds: BindGroupCache;
  readonly spec: ModelSpec;
  readonly quant: Quant;
  readonly rotate: RotationChoice;
  /** The KV cache's shape (an attention layer's, before a sliding layer's ring). */
  readonly kv: KvShape;
  /** The MLP width as the weights were packed (padded for a rotation). */
  readonly Ip: number;
  /**
   * The input norm folds into the matmuls after it, unless a rotation of its output sits in
   * between (R·norm(x) is the linears' input then).
   */
  readonly normFused: boolean;
  /** Attention never sees slots below this one but a row's own (a draft head's: 1). */
  readonly firstSlot: number | undefined;
  readonly builder: KernelBuilder;
  readonly common: CommonKernels;
  /** Registers what to destroy when the runner's kernels go (a kind's per-model kernels). */
  onDestroy(destroy: () => void): void;
}

/**
 * Something a kind makes once per model (its per-model kernels and scratch), on the first block
 * that asks, keyed by the model's {@link KindContext}.
 */
export class PerModel<T> {
  private readonly made = new WeakMap<KindContext, Promise<T>>();

  constructor(private readonly make: (c: KindContext) => Promise<T>) {}

  /** The model's one instance, made on first call. */
  of(c: KindContext): Promise<T> {
    let made = this.made.get(c);
    if (made === undefined) {
      made = this.make(c);
      this.made.set(c, made);
    }
    return made;
  }
}

/** What committing an accepted path asks of a block's state (see BoundBlock.commit). */
export interface CommitInputs {
  /** [n] u32 each path node's source slot (0xffffffff past a device-side path's end). */
  readonly slots: GPUBuffer;
  /** Path nodes (at most, for a device-side path). */
  readonly count: number;
  /** Rows committed before the path: its nodes move to rows committed, committed + 1, …. */
  readonly committed: number;
  /** Some node is not at its own row already: rows move (a KV cache compacts). */
  readonly moved: boolean;
  /**
   * The path staged for a recurrent state, which runs it again as a chain from the committed
   * state of `version` into the other copy; absent when the pass left the state after the path.
   */
  readonly rerun?: {
    readonly rows: GPUBuffer; // [n] u32 the path's rows in the last pass
    readonly count: GPUBuffer; // [1] u32 n
    readonly base: GPUBuffer; // [1] u32 the committed length (0: the state starts from zeros)
    readonly n: number;
    readonly version: number;
  };
}

/** A block's weights on the GPU, before its kernels are made. */
export interface GpuBlock {
  /** Its matrices, each once: what a pass reads of its weights, and what unloading destroys. */
  readonly matrices: readonly GpuMatrix[];
  /**
   * Its lookup tables (Gemma 4's per-layer embeddings): a pass reads one row per token of each, as
   * of the embedding; unloading destroys them too.
   */
  readonly tables?: readonly GpuMatrix[];
  /** Its other weight buffers (norms, biases, a convolution's weights). */
  readonly vectors: readonly GPUBuffer[];
  /** Its expert stacks (a mixture's, or their GPU caches), which unloading destroys too. */
  readonly experts?: readonly GpuExperts[];
  /** Bytes of its expert stacks one token reads (its chosen experts'). */
  readonly expertBytesPerToken?: number;
  /** Makes its kernels (compiling what they need), binds its linears and allocates its state. */
  bind(c: KindContext): Promise<BoundBlock>;
}

/** A placed block with its kernels and state: what the runner encodes. */
export interface BoundBlock {
  /** Encodes the block over the pass's rows, with its state. */
  encode(p: GpuPass): void;
  /** Encodes what committing an accepted path does to its state (nothing for a stateless block). */
  commit(pass: GPUComputePassEncoder, c: CommitInputs): void;
  /** Bytes of its KV cache (0 without one). */
  readonly kvBytes: number;
  /** A recurrent state's bytes (both copies), and its rows kept per tree node for a commit. */
  readonly recurrent: { readonly stateBytes: number; readonly bytesPerTreeNode: number } | undefined;
  /** Its KV cache is a sliding window's ring: a trim may go back only a little (RING_ROLLBACK). */
  readonly ring: boolean;
  /** The KV cache it holds (not one it shares): its layer, buffers and shape (a drafter reads it). */
  readonly kv?: { readonly layer: number; readonly buffers: KvLayerBuffers; readonly shape: KvShape };
  /**
   * A mixture's routing table (kernels/moe/table.ts), shared by the model's mixture blocks: its
   * words 1 to 3 tally, over every pass since the runner was made, the experts read, the rows
   * routed and the routings.
   */
  readonly routing?: GPUBuffer;
  /**
   * Set where the block needs the host between layers (a mixture whose experts are paged into a
   * GPU cache): it encodes itself into the pass, may call `flush` (which submits what is encoded so
   * far, then opens a new compute pass) to read something back, and resolves once encoded. Its
   * `encode` then throws: only host-driven forwards run it.
   */
  readonly host?: (p: GpuPass, flush: () => Promise<void>) => Promise<void>;
  /** A paged mixture's cache: its hits, misses and bytes loaded so far. */
  readonly paging?: () => { readonly hits: number; readonly misses: number; readonly bytesLoaded: number };
  /** Destroys its linears and its state. */
  destroy(): void;
}

/**
 * A recurrent state, twice: a pass reads the committed copy (`pair[version % 2]`) and writes the
 * other, so a pass never committed (a decode step run ahead, then dropped) leaves the committed
 * state as it was, and committing a chain is a version step.
 */
export interface StatePair<S> {
  readonly pair: readonly [S, S];
  /**
   * [MAX_FORWARD_TOKENS, P] the layer's projection rows of the last pass, kept until the next: a
   * commit after a tree runs the accepted path's rows from here as a chain.
   */
  readonly proj: GPUBuffer;
}
