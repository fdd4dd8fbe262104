import { gumbelKey, philox4x32, uniformFromBits } from '../kernels/sample/gumbel.js';

/**
 * The classic speculative-sampling rule for a chain of drafts (Leviathan et al., arXiv 2211.17192;
 * Chen et al., 2302.01318), kept beside the Gumbel coupling as the reference to compare against.
 *
 * Acceptance rule: draft token x_i (drawn from q_i) is accepted with probability
 * min(1, p_i(x_i) / q_i(x_i)); at the first rejection the token is drawn from the residual
 * norm(max(0, p_i − q_i)) and the pass ends; when every draft is accepted a bonus token is drawn
 * from p_k. The emitted tokens are then distributed exactly as sampling from p token by token.
 */
export interface RejectionStep {
  /** Accepted drafts (a prefix of the chain). */
  accepted: number;
  /** Accepted drafts, then the residual or bonus token. */
  emitted: number[];
}

/** Draws an index from unnormalised non-negative weights with one uniform `u` in [0, 1). */
export function sampleWeights(w: ArrayLike<number>, u: number): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  let at = u * total;
  for (let i = 0; i < w.length; i++) {
    at -= w[i]!;
    if (at < 0) return i;
  }
  // Rounding left a sliver past the end: the last index with weight.
  for (let i = w.length - 1; i >= 0; i--) if (w[i]! > 0) return i;
  return w.length - 1;
}

/**
 * Uniforms of the rule: `rand(i, draw)` for chain step i (the bonus is step k), 'accept' for the
 * acceptance test and 'resample' for the residual or bonus draw. A stateful generator may ignore
 * the arguments; the engine keys them by position (see {@link rejectionUniform}).
 */
export type RejectionRand = (step: number, draw: 'accept' | 'resample') => number;

/**
 * Verifies a chain of drafts. `q[i]` is the draft's distribution that drew `drafts[i]`; `p[i]` the
 * target's at the same position (k + 1 of them: the last one serves the bonus token); `rand`
 * yields uniforms in [0, 1).
 */
export function rejectionVerify(
  drafts: readonly number[],
  q: readonly ArrayLike<number>[],
  p: readonly ArrayLike<number>[],
  rand: RejectionRand,
): RejectionStep {
  const emitted: number[] = [];
  for (let i = 0; i < drafts.length; i++) {
    const x = drafts[i]!;
    const pi = p[i]!;
    const qi = q[i]!;
    if (rand(i, 'accept') * qi[x]! < pi[x]!) {
      emitted.push(x);
      continue;
    }
    const residual = Array.from({ length: pi.length }, (_, v) => Math.max(0, pi[v]! - qi[v]!));
    emitted.push(sampleWeights(residual, rand(i, 'resample')));
    return { accepted: i, emitted };
  }
  emitted.push(sampleWeights(p[drafts.length]!, rand(drafts.length, 'resample')));
  return { accepted: drafts.length, emitted };
}

/**
 * The rule's uniform for the token at absolute `position`: word 0 ('accept') or 1 ('resample') of
 * Philox with counter (0, 1, 0, 0) and the Gumbel key of (seed, position). The Gumbel noise uses
 * counters (token, 0, 0, 0), so these are independent of the noise that drew the draft token at
 * the same position; and each position's uniforms decide at most one emitted token, so the
 * output is an exact sample and is reproducible from the seed.
 */
export function rejectionUniform(seed: number, position: number, draw: 'accept' | 'resample'): number {
  const words = philox4x32([0, 1, 0, 0], gumbelKey(seed, position));
  return uniformFromBits(draw === 'accept' ? words[0] : words[1]);
}
