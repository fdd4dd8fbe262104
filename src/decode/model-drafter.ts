import type { ModelRunner, SamplerSpec } from '../model/runner.js';
import type { Drafter, DraftProposal } from './drafter.js';

/**
 * Drafts with a model: a small separate model sharing the target's tokenizer, or the target's own
 * weights at low precision (self-speculation). It keeps its own KV cache in step with the context:
 * each proposal first trims the cache to the longest prefix still valid (the accepted path) and
 * runs what is new, then samples a chain of `budget` tokens with the target's sampler, so with
 * Gumbel noise shared by position its choices match the target's wherever their distributions do.
 */
export class ModelDrafter implements Drafter {
  /** Tokens whose K/V rows are in the draft cache, in order. */
  private cached: number[] = [];

  constructor(
    readonly name: string,
    private readonly runner: ModelRunner,
    /** Tokens per draft prefill pass. */
    private readonly chunk = 64,
  ) {}

  async propose(context: readonly number[], budget: number, sampler: SamplerSpec): Promise<DraftProposal> {
    const room = this.runner.capacity - context.length;
    const n = Math.min(budget, room);
    if (n < 1) return { tokens: [], parents: [] };
    // Roll back to the longest valid prefix; at least the last context token must run.
    let keep = 0;
    while (keep < this.cached.length && keep < context.length - 1 && this.cached[keep] === context[keep])
      keep++;
    this.runner.trim(keep);
    this.cached.length = keep;
    let next = -1;
    for (let at = keep; at < context.length; at += this.chunk) {
      const part = context.slice(at, at + this.chunk);
      next = (await this.runner.forward({ tokens: part }, sampler, 'last'))[0]!;
      this.runner.commit(part.map((_, i) => i));
      this.cached.push(...part);
    }
    const chain = [next];
    while (chain.length < n) {
      const out = await this.runner.forward({ tokens: [next] }, sampler, 'last');
      this.runner.commit([0]);
      this.cached.push(next);
      next = out[0]!;
      chain.push(next);
    }
    return { tokens: chain, parents: chain.map((_, i) => i - 1) };
  }

  dispose(): void {
    this.runner.dispose();
  }
}
