// How a draft head (model/draft/gpu-head.ts) is placed as a one-layer GPU runner: the stages it puts
// around its decoder layer and the runner buffers they use (their tree forward's waves: head-waves.ts).
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';

/**
 * How a draft head is placed as a one-layer runner: it borrows its target's embedding table, its
 * LM head holds the draft vocabulary's rows, its stages do the rest, and its attention never sees
 * the entry at slot 0 (no feature precedes position 0).
 */
export interface HeadPlacement {
  embed: GpuMatrix;
  lmRows: number;
  stages: HeadStages;
}

/**
 * What a draft head (model/draft/gpu-head.ts) puts around its decoder layer: its rows' input in place of
 * the embedding gather, and its LM head's draft-vocabulary rows mapped onto the full vocabulary.
 * A head's row reads another row's output (its parent's), so a tree forward whose rows read rows of
 * the same forward runs in waves (see head-waves.ts).
 */
export interface HeadStages {
  /** The rows' input x [T, H] from their ids, positions, slots and visibility. */
  encodeInput(pass: GPUComputePassEncoder, a: HeadStageBuffers, T: number): void;
  /** logits [R, V] of the scored rows from the LM head's output [R, Vd] in `small`. */
  encodeLogits(pass: GPUComputePassEncoder, logits: GPUBuffer, R: number): void;
  /** [MAX_FORWARD_TOKENS, Vd] the LM head's output. */
  readonly small: GPUBuffer;
  /** Bytes of the stages' own weights one pass reads for one row. */
  readonly weightBytes: number;
  /**
   * Positions below which the rows' inputs come from elsewhere (the target's committed length):
   * a row at position p reads row p - 1 there when p - 1 is below it, else its parent's output.
   */
  known(): number;
  destroy(): void;
}

/** The runner's buffers a {@link HeadStages} input reads and writes. */
export interface HeadStageBuffers {
  ids: GPUBuffer; // [T] u32
  positions: GPUBuffer; // [T] u32
  slots: GPUBuffer; // [T] u32
  vis: GPUBuffer; // [T, 2] u32
  x: GPUBuffer; // [T, H] written
  tmp: GPUBuffer; // [T, H] scratch
  hr: GPUBuffer; // [T, H] scratch
  /** [capacity, H] the runner's own features (its rows' outputs, see GpuRunnerOptions.features). */
  own: GPUBuffer;
}
