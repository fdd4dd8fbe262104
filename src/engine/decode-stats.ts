// The statistics of one request's decoding, collected in one place: the engine's steps report to
// a tally, which makes the request's GenerationStats at the end.
import { addCounts, countsSince, type GpuCounts, zeroCounts } from '../gpu/counters.js';
import type { ExpertCacheCounts, ExpertTally, ModelRunner } from '../model/runner.js';
import type { DecodeCounts, GenerationProgress, GenerationStats } from './types.js';

const now = () => performance.now();

/** Device losses recovered from, and the time their recoveries took, ms. */
export interface DeviceLosses {
  count: number;
  ms: number;
}

/** What one request's decoding did, step by step (see {@link DecodeTally.stats}). */
export class DecodeTally {
  private readonly t0 = now();
  private tFirst = 0;
  private passes = 0;
  private decodePasses = 0;
  private emittedByDecode = 0;
  /** Time spent drafting and verifying in steps driven from the host. */
  draftMs = 0;
  verifyMs = 0;
  /** Time of speculative steps run whole on the device (drafting and verification are one submission). */
  deviceStepMs = 0;
  /** Forward passes of the drafter's model (a model drafter only). */
  draftPasses: number | undefined;
  /** The device's work in decode steps (undefined off the GPU). */
  private counts: GpuCounts | undefined;
  /** The mixture layers' reads over the decode steps (a model with mixtures on the GPU). */
  private expertReads: { experts: number; routings: number } | undefined;
  /** A paged mixture's cache over the decode steps. */
  private cache: ExpertCacheCounts | undefined;

  constructor(private runner: ModelRunner) {
    this.counts = runner.deviceCounts ? zeroCounts() : undefined;
  }

  /**
   * A prefill ended after `passes` target passes: the prompt's (the first token is known then), or
   * the one that rebuilt the request's KV cache on a new device, whose passes count too.
   */
  prefilled(passes: number): void {
    if (this.tFirst === 0) this.tFirst = now();
    this.passes += passes;
  }

  /** The request runs on from here on `runner`, the model placed again on a new device. */
  rebind(runner: ModelRunner): void {
    this.runner = runner;
  }

  /** Adds draft-model passes. */
  drafted(passes: number): void {
    this.draftPasses = (this.draftPasses ?? 0) + passes;
  }

  /**
   * One decode step ended with `emitted` tokens; `before` is the device's counters when it began
   * (undefined off the GPU).
   */
  step(emitted: number, before: GpuCounts | undefined): void {
    this.passes++;
    this.decodePasses++;
    this.emittedByDecode += emitted;
    const after = this.runner.deviceCounts?.();
    if (this.counts && before && after) this.counts = addCounts(this.counts, countsSince(after, before));
  }

  /** The mixture layers' tallies before and after decode steps (summed over the request's runs). */
  experts(before: ExpertTally, after: ExpertTally): void {
    const r = this.expertReads ?? { experts: 0, routings: 0 };
    this.expertReads = {
      experts: r.experts + after.experts - before.experts,
      routings: r.routings + after.routings - before.routings,
    };
  }

  /** A paged mixture's cache counts before and after the decode steps. */
  expertCache(before: ExpertCacheCounts, after: ExpertCacheCounts): void {
    const c = this.cache ?? { hits: 0, misses: 0, bytesLoaded: 0 };
    this.cache = {
      hits: c.hits + after.hits - before.hits,
      misses: c.misses + after.misses - before.misses,
      bytesLoaded: c.bytesLoaded + after.bytesLoaded - before.bytesLoaded,
    };
  }

  /** The counts so far, as the request's chunks carry them (the figures {@link stats} divides). */
  progress(): GenerationProgress {
    return { targetPasses: this.passes, decodePasses: this.decodePasses, decodeTokens: this.emittedByDecode };
  }

  /**
   * The request's stats: its prompt, what it reused and generated, what its decoding asked, and
   * the device losses the engine recovered from since the last stats.
   */
  stats(
    prompt: { tokens: number; reused: number },
    generated: number,
    drafterWeightBytes: number | undefined,
    losses: DeviceLosses,
  ): GenerationStats {
    const tEnd = now();
    const { runner } = this;
    return {
      prompt_tokens: prompt.tokens,
      cached_prompt_tokens: prompt.reused,
      completion_tokens: generated,
      prefill_tok_s: (prompt.tokens - prompt.reused) / Math.max(1e-9, (this.tFirst - this.t0) / 1000),
      decode_tok_s: Math.max(0, generated - 1) / Math.max(1e-9, (tEnd - this.tFirst) / 1000),
      time_to_first_token_ms: this.tFirst - this.t0,
      target_passes: this.passes,
      // Each plain decode pass emits one token; speculative passes emit accepted + 1.
      tokens_per_pass: this.decodePasses > 0 ? this.emittedByDecode / this.decodePasses : 0,
      draft_ms: this.draftMs,
      verify_ms: this.verifyMs,
      device_step_ms: this.deviceStepMs,
      ...(this.counts
        ? deviceFigures(this.counts, this.decodePasses, this.emittedByDecode, runner.weightBytesPerPass)
        : {}),
      draft_passes: this.draftPasses,
      ...(this.draftPasses === undefined || drafterWeightBytes === undefined
        ? {}
        : { draft_weight_bytes_per_pass: drafterWeightBytes }),
      ...(runner.kvBytes === undefined ? {} : { kv_bytes: runner.kvBytes }),
      ...(runner.attentionBytes ? { attention_bytes_per_token: runner.attentionBytes(runner.kvLength) } : {}),
      ...this.expertFigures(),
      adapter: runner.device?.adapter,
      kernels: runner.device?.kernels,
      device_losses: losses.count,
      recovery_ms: losses.ms,
    };
  }

  /** experts_per_pass and expert_reads_per_token, where the decode steps routed. */
  private expertFigures(): Partial<GenerationStats> {
    const r = this.expertReads;
    if (!r || r.routings === 0 || this.decodePasses === 0 || this.emittedByDecode === 0) return {};
    const perPass = r.experts / r.routings;
    const c = this.cache;
    return {
      experts_per_pass: perPass,
      expert_reads_per_token: (perPass * this.decodePasses) / this.emittedByDecode,
      ...(c && c.hits + c.misses > 0
        ? {
            expert_cache_hit_rate: c.hits / (c.hits + c.misses),
            expert_bytes_loaded_per_token: c.bytesLoaded / this.emittedByDecode,
          }
        : {}),
    };
  }
}

/**
 * The per-token and per-pass figures of a request's decode steps from the device's totals over
 * them (see {@link GenerationStats}); 0 where no decode step ran, as `tokens_per_pass`.
 */
function deviceFigures(
  c: GpuCounts,
  passes: number,
  tokens: number,
  weightBytesPerPass: number | undefined,
): Partial<GenerationStats> {
  const per = (n: number, d: number) => (d > 0 ? n / d : 0);
  const totals: DecodeCounts = {
    passes,
    tokens,
    dispatches: c.dispatches,
    writes: c.writes,
    write_bytes: c.writeBytes,
    readbacks: c.readbacks,
    readback_bytes: c.readbackBytes,
    submits: c.submits,
  };
  return {
    dispatches_per_token: per(c.dispatches, tokens),
    writes_per_token: per(c.writes, tokens),
    readbacks_per_pass: per(c.readbacks, passes),
    readback_bytes_per_pass: per(c.readbackBytes, passes),
    weight_bytes_per_pass: weightBytesPerPass,
    decode_counts: totals,
  };
}
