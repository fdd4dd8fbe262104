// What a block's reference forward is handed (model/reference.ts builds it once per forward), and how
// a block reads its tensors from a checkpoint.

import type { KvFormat } from '../../kernels/kv/kv.js';
import type { ModelSpec } from '../spec/spec.js';
import type { RecurrentStates } from './recurrent-state.js';

/** Reads a checked tensor by checkpoint name and expected shape (see `readWeights`). */
export type TakeTensor = (name: string, shape: readonly number[]) => Float32Array;

/**
 * One reference forward of T rows, as the blocks see it: the residual stream each block reads and
 * adds its output into, where the rows stand, what each attends to, and the reference's KV cache.
 */
export interface RefPass {
  readonly spec: ModelSpec;
  readonly T: number;
  /** [T, H] the residual stream, updated in place. */
  readonly x: Float32Array;
  /** [T] the rows' token ids. */
  readonly tokens: readonly number[];
  /**
   * [T, layers, width] the rows' per-layer inputs (Gemma 4's PLE), set by the `ple` block that
   * opens the pass; undefined without per-layer embeddings.
   */
  perLayerInputs: Float32Array | undefined;
  /** RoPE position of each row. */
  readonly positions: readonly number[];
  /** Cache slot each row's K/V rows are written at. */
  readonly cacheSlots: readonly number[];
  /** Each row's parent row in the pass (-1: a root, after the committed prefix). */
  readonly parents: readonly number[];
  /** The cache slots each row attends to, in slot order (prefix, ancestors, itself). */
  readonly attended: readonly (readonly number[])[];
  /** Layer `layer`'s RoPE inverse frequencies [rotaryDim / 2]; undefined where the layer has no RoPE. */
  invFreq(layer: number): Float32Array | undefined;
  /** How the cache stores keys and values (f16: rounded to halves on the way in). */
  readonly kvFormat: KvFormat;
  /** With an integer format: keys rounded per head in the rotated basis (see kernels/kv/kv-quant.ts). */
  readonly kvRotate: boolean;
  /** Per layer, keys (after RoPE) and values: [capacity, kvHeads, headDim] (the layer's; empty for a KV-shared layer). */
  readonly cache: { readonly keys: readonly Float32Array[]; readonly values: readonly Float32Array[] };
  /** The recurrent blocks' states (deltanet/, shortconv/). */
  readonly recurrent: RecurrentStates;
  /** A `*_proj` linear's input as it multiplies (W8A8's rounding, calibration's statistics). */
  input(a: Float32Array, width: number, linears: readonly string[]): Float32Array;
}
