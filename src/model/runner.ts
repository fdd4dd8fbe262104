import { InvalidInputError } from '../errors.js';
import type { GpuCounts } from '../gpu/counters.js';
import type { Children } from '../kernels/sample/topk.js';
import type { ModelSpec } from './spec/spec.js';

/**
 * How the next token is chosen at a scored position. Greedy when `temperature` is 0. Sampling is
 * Gumbel-max with noise keyed by (seed, absolute position, token id), so the same seed gives the
 * same text whatever runs it (GPU, CPU reference, speculative or not).
 */
export interface SamplerSpec {
  readonly temperature: number;
  /** Nucleus mass in (0, 1]; 1 disables it. */
  readonly topP: number;
  /** Keep the k most likely tokens; 0 disables it. */
  readonly topK: number;
  readonly seed: number;
}

/**
 * A sampler as tree ranking takes it: greedy trees may weigh children by the draft's distribution
 * sharpened (`sharpen`, see RankCall in kernels/sample/topk.ts; default 1).
 */
export interface RankSpec extends SamplerSpec {
  readonly sharpen?: number;
}

/** The greedy sampler. */
export const GREEDY: SamplerSpec = { temperature: 0, topP: 1, topK: 0, seed: 0 };

/**
 * Input of one forward pass: new tokens appended after the `kvLength` tokens already cached.
 * `parents[i]` is the index (among the new tokens) of token i's parent, or -1 for a child of the
 * last cached token; omitted means a chain (prefill and decode). Trees are in depth-first order.
 */
export interface ForwardInput {
  readonly tokens: readonly number[];
  readonly parents?: readonly number[];
  /**
   * Constrained decoding: one token bitmask per scored row ([R, ceil(vocab / 32)] u32, see
   * kernels/sample/mask.ts), applied to the logits before sampling: a row picks only allowed tokens.
   * R is 1 for rows 'last', the number of new tokens for 'all'. Omitted: no constraint.
   */
  readonly masks?: Uint32Array;
  /**
   * The tokens are a chunk of a prompt (the prefix cache's prefill): the runner may take its prefill
   * GEMM, whose sums differ from the decode forms' in their last bits. Decode steps and tree
   * verification leave it unset, so speculation stays lossless. Omitted: false.
   */
  readonly prefill?: boolean;
}

/**
 * A plain decoding loop that stays on the device: each step runs the token the step before it
 * sampled, without that token passing through the CPU, and the runner may encode and submit a step
 * before the caller has read the previous one's id. The ids still come back one by one, in order,
 * so the caller streams them and checks its stop conditions; a step computed past a stop is
 * dropped by {@link DecodeSession.close} (its K/V row was never committed).
 */
export interface DecodeSession {
  /**
   * The token sampled after the last one this session returned (the first call: after the
   * session's `first` token), with the K/V row of that last token committed: after n calls the
   * runner's kvLength is its length at the start plus n. At most `steps` calls.
   */
  next(): Promise<number>;
  /**
   * Ends the session, dropping any step run ahead (its row stays uncommitted, so kvLength is the
   * start plus the calls to `next` that returned). The runner is usable again; closing twice is a
   * no-op.
   */
  close(): void;
}

/** Running totals of a paged mixture's GPU caches of experts. */
export interface ExpertCacheCounts {
  /** Chosen experts found in the cache. */
  readonly hits: number;
  /** Chosen experts loaded from CPU memory. */
  readonly misses: number;
  /** Bytes loaded. */
  readonly bytesLoaded: number;
}

/**
 * Running totals of a model's mixture layers: each layer's pass reads every expert its rows chose
 * once (a verification pass of T rows reads the union of their choices, up to T · topK).
 */
export interface ExpertTally {
  /** Experts read, summed over the layers' passes. */
  readonly experts: number;
  /** Rows routed, summed over the layers' passes. */
  readonly rows: number;
  /** Layer passes routed (mixture layers × passes). */
  readonly routings: number;
}

/**
 * What the engine drives: a model with its KV cache on some device. `forward` scores new tokens
 * and returns, for each requested row, the token the sampler picks at the position after it.
 * Logits stay where they are computed; only the chosen ids come back, unless a caller that needs
 * probabilities (the rejection rule, tree drafting) reads them with `lastLogits`.
 */
export interface ModelRunner {
  readonly spec: ModelSpec;
  /** Largest number of cached tokens. */
  readonly capacity: number;
  /** Tokens whose K/V rows are committed in the cache (positions 0..kvLength-1). */
  readonly kvLength: number;
  /** On a GPU: its adapter (`describeAdapter`) and the forms its kernels take (`GpuContext.kernels`). */
  readonly device?: { readonly adapter: string; readonly kernels: 'gpu' | 'serial' };
  /**
   * Runs the new tokens at positions kvLength + depth, writes their K/V rows after the committed
   * ones (uncommitted until {@link commit}), and returns the sampled next token for `rows`
   * ('last': only the last new token; 'all': every new token, in order).
   */
  forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array>;
  /**
   * Opens a GPU-resident decode loop from `first`, the token after the committed rows (not yet in
   * the cache), for at most `steps` steps, each a chain forward of one token with `sampler`.
   * Equivalent to calling `forward({ tokens: [t] }, sampler, 'last')` then `commit([0])` with each
   * returned token, but without a CPU round trip between steps. Until the session closes, forward,
   * commit and trim throw. Optional: runners without it (the CPU reference) are driven one forward
   * at a time.
   */
  decode?(first: number, sampler: SamplerSpec, steps: number): DecodeSession;
  /**
   * Its forwards need the host between layers (a mixture paging experts into a GPU cache): the
   * engine drives every step from the host and never opens a decode session.
   */
  readonly hostDriven?: boolean;
  /**
   * Logits [R, vocab] of the R rows the last forward scored, read back to the CPU. Plain and
   * Gumbel decoding never need them; the classic rejection rule (which needs the target's and the
   * draft's probabilities) and best-first tree drafting (which needs the draft's top-k) do. Optional
   * so that control-flow stand-ins need not implement it; both real runners do. With `rows`
   * (indices into the scored rows), only those rows come back, [rows.length, vocab] in that order.
   */
  lastLogits?(rows?: readonly number[]): Promise<Float32Array>;
  /**
   * The `k` best children of `rows` (indices into the last forward's scored rows) under `sampler`,
   * ranked as `rankChildren` (decode/probs.ts) ranks a row, at `positions` (the absolute position
   * of each row's children, the noise key): [rows.length, k] tokens (-1 past a row's allowed
   * tokens) and log weights. What best-first tree drafting needs from a draft forward, without
   * reading its logits back: the GPU runner ranks on the device and reads back 8 bytes per child.
   * Optional: without it, drafters rank the rows `lastLogits` returns.
   */
  lastChildren?(
    rows: readonly number[],
    positions: readonly number[],
    sampler: RankSpec,
    k: number,
  ): Promise<Children>;
  /**
   * Keeps the new tokens at `path` (indices into the last forward's tokens, root to leaf) as the
   * next committed rows, and drops the rest. A chain forward commits all rows with `path` = 0..T-1.
   */
  commit(path: readonly number[]): void;
  /**
   * The features of committed positions [from, to): the residual stream after the last block,
   * before the final norm, [to - from, hidden] as f32. What a draft head reads (see
   * model/head.ts). Optional: the GPU runner keeps them only when created with `features: true`.
   */
  features?(from: number, to: number): Promise<Float32Array>;
  /**
   * true: the committed rows carry a recurrent state (linear-attention or short-convolution layers)
   * that holds only the end of the sequence, so {@link ModelRunner.trim} can drop all rows but not
   * some.
   */
  readonly recurrent?: boolean;
  /** Drops committed rows from `length` on (for reuse of a shared prompt prefix). */
  trim(length: number): void;
  /**
   * Whether `trim(length)` keeps the rows before `length` usable (a recurrent state, or a
   * sliding-window ring that has moved on, cannot go back everywhere; 0 always can). Absent: it
   * always can, but for a {@link ModelRunner.recurrent} runner's rule.
   */
  canTrim?(length: number): boolean;
  /**
   * Running totals of the work asked of the GPU this runner runs on (dispatches, writes, readbacks,
   * submissions), shared with any other runner on the same device (a draft model): the engine takes
   * deltas around each step. Absent off the GPU.
   */
  deviceCounts?(): GpuCounts;
  /**
   * What the mixture-of-experts layers have read since the runner was made (one readback); undefined
   * for a model without mixtures. Absent off the GPU.
   */
  expertTally?(): Promise<ExpertTally | undefined>;
  /**
   * A mixture paged under an expert budget: its GPU caches' hits, misses and bytes loaded so far,
   * summed over the layers; undefined when every expert is on the GPU. Absent off the GPU.
   */
  expertCache?(): ExpertCacheCounts | undefined;
  /** Bytes of weights one forward pass reads for one token, as packed. Absent off the GPU. */
  readonly weightBytesPerPass?: number;
  /**
   * Bytes the KV cache holds on the device, every attention layer's keys and values (a sliding
   * layer's: its ring). Absent off the GPU.
   */
  readonly kvBytes?: number;
  /**
   * Bytes of cached keys and values attention reads for one new token after `keys` positions (every
   * attention layer, a sliding one its window; see attentionReadBytes). Absent off the GPU.
   */
  attentionBytes?(keys: number): number;
  dispose(): void;
}

/** Throws unless [from, to) is a range of committed positions (for {@link ModelRunner.features}). */
export function checkFeatureRange(from: number, to: number, committed: number): void {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to < from || to > committed)
    throw new InvalidInputError(
      `features: [${from}, ${to}) is not a range of the ${committed} committed positions`,
    );
}
