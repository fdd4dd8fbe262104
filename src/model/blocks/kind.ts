// What a block kind is: one interface that the kind's folder implements (its tensors, its
// reference forward, its GPU placement, kernels, encode, state and commit, its footprint), listed
// in one table (index.ts). A new kind is a folder and a table row.
import type { KvFormat } from '../../kernels/kv/kv.js';
import type { WeightFormat } from '../../quant/formats.js';
import type { ModelSpec } from '../spec/spec.js';
import type { Block } from './blocks.js';
import type { GpuBlock, Placer } from './gpu.js';
import type { TensorShapes } from './names.js';
import type { RefPass, TakeTensor } from './pass.js';

/** A block's reference forward over a pass's rows, its weights read. */
export type RefBlock = (pass: RefPass) => void;

/** Everything the rest of weft asks of a block of one kind. */
export interface BlockKind<B extends Block> {
  /**
   * Its state holds only the end of the sequence (a recurrent state): the runner commits a
   * draft tree's path by running it again as a chain, and a trim can only drop everything.
   */
  readonly recurrent: boolean;
  /** Its tensors that the spec says exist, under the checkpoint's names, with their shapes. */
  tensors(spec: ModelSpec, block: B): TensorShapes;
  /** Reads its weights (checked by `take`) and returns its reference forward. */
  reference(take: TakeTensor, spec: ModelSpec, block: B): RefBlock;
  /** Places its weights on the GPU; the placed block binds its kernels and state later. */
  place(placer: Placer, block: B): Promise<GpuBlock>;
  /**
   * What a model's blocks of this kind take on the GPU with every matrix packed in `format`: their
   * weights, KV cache and recurrent state, the kind's scratch rows (once per model), and the
   * buffers among them bound whole, which the adapter's limits must hold.
   */
  footprint(spec: ModelSpec, blocks: readonly B[], format: WeightFormat, o: FootprintOptions): KindFootprint;
}

/** What a footprint depends on besides the spec and the weight format. */
export interface FootprintOptions {
  /** Tokens the KV cache holds. */
  readonly context: number;
  readonly kvFormat: KvFormat;
  /** Bytes a mixture's experts may take on the GPU (the rest stay in CPU memory). */
  readonly expertBudget?: number;
}

/** One GPU buffer the runner allocates and binds whole. */
export interface BoundBuffer {
  /** Its label, e.g. `model.layers.*.k_cache [2048, 8, 128] f32`. */
  readonly what: string;
  readonly bytes: number;
}

/** Bytes a model's blocks of one kind take on the GPU (see BlockKind.footprint). */
export interface KindFootprint {
  /** Packed matrices and f32 vectors (norms, biases, convolution weights). */
  readonly weights: number;
  /** K and V of its layers. */
  readonly kvCache: number;
  /** Recurrent states and the projection rows kept for a commit. */
  readonly state: number;
  /** Its scratch rows for one forward pass. */
  readonly activations: number;
  /** Its buffers bound whole. */
  readonly bound: readonly BoundBuffer[];
}
