import type { ModelRunner, SamplerSpec } from './runner.js';

/** What {@link CachedPrefix.sync} did. */
export interface PrefixSync {
  /** The runner's sampled token after the context (from its last scored row). */
  readonly next: number;
  /** Leading tokens of the context whose cached rows were kept. */
  readonly reused: number;
  /** Prefill forwards run (one per chunk). */
  readonly passes: number;
}

/**
 * The tokens whose K/V rows a runner's cache holds, in order, and the one way to bring that cache
 * to a new context: keep the rows of the longest prefix the context shares with them, trim the
 * rest, and prefill what remains in chunks, committing each (a recurrent runner keeps all or
 * nothing: its state cannot go back part way). The engine (a prompt after the last
 * request) and a model drafter (the context after the last verification) both use it; whatever
 * else they commit (decode steps, accepted paths) they record with {@link CachedPrefix.push}.
 */
export class CachedPrefix {
  /** Tokens whose K/V rows are committed in the runner's cache (positions 0..length-1). */
  private readonly ids: number[] = [];

  constructor(private readonly runner: ModelRunner) {}

  /** The cached tokens, in order. */
  get tokens(): readonly number[] {
    return this.ids;
  }

  /** Records tokens the caller committed to the runner itself, after the cached ones. */
  push(ids: readonly number[]): void {
    this.ids.push(...ids);
  }

  /**
   * Trims the cache to the longest prefix it shares with `context`, short of the context's last
   * token, and returns the tokens still to run (at least that last one); the caller runs them,
   * commits them and records them with {@link CachedPrefix.push}. What {@link CachedPrefix.sync}
   * does first, for a caller that encodes the run itself (a speculative step on the device).
   */
  trimTo(context: readonly number[]): readonly number[] {
    let keep = 0;
    while (keep < this.ids.length && keep < context.length - 1 && this.ids[keep] === context[keep]) keep++;
    // A recurrent state holds only the end of the sequence: keep all the cached rows, or none; a
    // sliding layer's ring, the rows since a little before its last end.
    if (this.runner.recurrent && keep < this.ids.length) keep = 0;
    if (this.runner.canTrim && !this.runner.canTrim(keep)) keep = 0;
    this.runner.trim(keep);
    this.ids.length = keep;
    return context.slice(keep);
  }

  /**
   * Brings the cache to `context` (all of it committed) and returns the runner's sampled token
   * after it. At least the context's last token runs, even when it is cached, so the runner's last
   * scored row (its logits, for `lastLogits`) is that token's. `beforeChunk` runs before each
   * prefill forward (the engine checks for an abort there); a throw leaves the chunks done so far
   * cached. `mask` (a token bitmask, see ForwardInput.masks) constrains the returned token.
   */
  async sync(
    context: readonly number[],
    sampler: SamplerSpec,
    chunk: number,
    beforeChunk?: () => void,
    mask?: Uint32Array,
  ): Promise<PrefixSync> {
    const keep = context.length - this.trimTo(context).length;
    let next = -1;
    let passes = 0;
    for (let at = keep; at < context.length; at += chunk) {
      beforeChunk?.();
      const part = context.slice(at, at + chunk);
      const last = at + chunk >= context.length;
      const input = { tokens: part, prefill: true, ...(last && mask ? { masks: mask } : {}) };
      next = (await this.runner.forward(input, sampler, 'last'))[0]!;
      this.runner.commit(part.map((_, i) => i));
      this.ids.push(...part);
      passes++;
    }
    return { next, reused: keep, passes };
  }
}
