import { describe, expect, it } from 'vitest';
import { rejectionVerify, sampleWeights } from '../../src/decode/rejection.js';
import { brokenResidualVerify } from '../helpers/broken-rejection.js';
import { rng } from '../helpers/random.js';

// A tiny "model" over V = 4 tokens: the target's and the draft's distributions of the next token
// given the previous one (-1 at the start). They differ on purpose.
const V = 4;
const P: Record<number, number[]> = {
  [-1]: [0.5, 0.3, 0.15, 0.05],
  0: [0.1, 0.6, 0.2, 0.1],
  1: [0.25, 0.25, 0.25, 0.25],
  2: [0.7, 0.1, 0.1, 0.1],
  3: [0.05, 0.05, 0.1, 0.8],
};
const Q: Record<number, number[]> = {
  [-1]: [0.25, 0.25, 0.25, 0.25],
  0: [0.4, 0.2, 0.2, 0.2],
  1: [0.1, 0.6, 0.2, 0.1],
  2: [0.4, 0.4, 0.1, 0.1],
  3: [0.2, 0.2, 0.2, 0.4],
};

type Verify = typeof rejectionVerify;

/** The next two tokens from an empty prefix by speculative sampling with chains of 2 drafts. */
function nextTwo(verify: Verify, rand: () => number): [number, number] {
  const out: number[] = [];
  while (out.length < 2) {
    const prev = out.at(-1) ?? -1;
    const d1 = sampleWeights(Q[prev]!, rand());
    const d2 = sampleWeights(Q[d1]!, rand());
    const step = verify([d1, d2], [Q[prev]!, Q[d1]!], [P[prev]!, P[d1]!, P[d2]!], rand);
    out.push(...step.emitted);
  }
  return [out[0]!, out[1]!];
}

/** Pearson chi-square of counts over the 16 two-token outcomes against p(t1) p(t2 | t1). */
function chiSquare(verify: Verify, n: number, seed: number): number {
  const rand = rng(seed);
  const counts = new Array<number>(V * V).fill(0);
  for (let i = 0; i < n; i++) {
    const [a, b] = nextTwo(verify, rand);
    counts[a * V + b]!++;
  }
  let chi = 0;
  for (let a = 0; a < V; a++)
    for (let b = 0; b < V; b++) {
      const expected = n * P[-1]![a]! * P[a]![b]!;
      chi += (counts[a * V + b]! - expected) ** 2 / expected;
    }
  return chi;
}

// Chi-square critical value for 15 degrees of freedom at p = 0.001.
const CRITICAL_15_DOF = 37.697;

describe('classic speculative sampling (rejection rule)', () => {
  it('the next two tokens follow the target distribution exactly (20,000 samples, p > 0.001)', () => {
    expect(chiSquare(rejectionVerify, 20_000, 1)).toBeLessThan(CRITICAL_15_DOF);
  });

  it('has the power to see a wrong residual step', () => {
    // Resampling from p instead of max(0, p - q) after a rejection over-weights what q liked.
    const broken: Verify = brokenResidualVerify;
    expect(chiSquare(broken, 20_000, 1)).toBeGreaterThan(CRITICAL_15_DOF);
  });

  it('accepts every draft when the draft is the target', () => {
    const rand = rng(3);
    for (let i = 0; i < 100; i++) {
      const d1 = sampleWeights(P[-1]!, rand());
      const d2 = sampleWeights(P[d1]!, rand());
      expect(rejectionVerify([d1, d2], [P[-1]!, P[d1]!], [P[-1]!, P[d1]!, P[d2]!], rand).accepted).toBe(2);
    }
  });
});
