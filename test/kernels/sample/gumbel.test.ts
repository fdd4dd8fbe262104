import { describe, expect, it } from 'vitest';
import { allowedTokens, argmax, gumbel, sampleRef } from '../../../src/kernels/sample/gumbel.js';

/** Pearson chi-square of observed counts against expected probabilities. */
function chiSquare(counts: number[], probs: number[], n: number): number {
  return counts.reduce((s, c, i) => s + (c - n * probs[i]!) ** 2 / (n * probs[i]!), 0);
}

function softmax(l: number[], t = 1): number[] {
  const m = Math.max(...l);
  const e = l.map((x) => Math.exp((x - m) / t));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

// 99.9% quantile of chi-square with 7 degrees of freedom.
const CHI2_7_999 = 24.32;

describe('Gumbel-max sampling (TS reference)', () => {
  const logits = [1.2, -0.5, 0.3, 2.0, 0.0, -1.5, 0.9, 1.7];
  const N = 20_000;

  it('at T=1 over V=8 matches softmax by chi-square (20k draws, one per position)', () => {
    const counts = new Array<number>(8).fill(0);
    for (let pos = 0; pos < N; pos++) counts[sampleRef(logits, 1234, pos, { temperature: 1 })]!++;
    expect(chiSquare(counts, softmax(logits), N)).toBeLessThan(CHI2_7_999);
  });

  it('has power: the same draws reject a wrong distribution (temperature 1.5)', () => {
    const counts = new Array<number>(8).fill(0);
    for (let pos = 0; pos < N; pos++) counts[sampleRef(logits, 99, pos, { temperature: 1 })]!++;
    expect(chiSquare(counts, softmax(logits, 1.5), N)).toBeGreaterThan(CHI2_7_999);
  });

  it('top-k and top-p sample the truncated, renormalised distribution', () => {
    // top-k = 3 keeps tokens 3, 7, 0; top-p = 0.5 keeps 3 (p≈.34) and 7 (p≈.25): the mass above 0 is .59.
    for (const opts of [
      { temperature: 1, topK: 3 },
      { temperature: 1, topP: 0.5 },
    ]) {
      const ok = allowedTokens(logits, opts);
      const kept = logits.map((l, i) => (ok[i] ? l : Number.NEGATIVE_INFINITY));
      const p = softmax(kept);
      const counts = new Array<number>(8).fill(0);
      for (let pos = 0; pos < N; pos++) counts[sampleRef(logits, 5, pos, opts)]!++;
      const idx = [...p.keys()].filter((i) => p[i]! > 0);
      for (let i = 0; i < 8; i++) if (!ok[i]) expect(counts[i]).toBe(0);
      const chi = chiSquare(
        idx.map((i) => counts[i]!),
        idx.map((i) => p[i]!),
        N,
      );
      expect(chi).toBeLessThan(16.27); // 99.9% quantile for ≤ 3 degrees of freedom
    }
    expect(allowedTokens(logits, { temperature: 1, topK: 3 }).filter(Boolean)).toHaveLength(3);
    expect(allowedTokens(logits, { temperature: 1, topP: 0.5 }).filter(Boolean)).toHaveLength(2);
  });

  it('keeps tied logits together and breaks argmax ties to the lower id', () => {
    expect(argmax([1, 3, 3, 2])).toBe(1);
    expect(allowedTokens([1, 3, 3, 2], { temperature: 1, topK: 1 })).toEqual([false, true, true, false]);
    expect(allowedTokens([0, Math.log(0.5), Math.log(0.2)], { temperature: 1, minP: 0.3 })).toEqual([
      true,
      true,
      false,
    ]);
    expect(sampleRef([1, 3, 3, 2], 0, 0, { temperature: 0 })).toBe(1);
  });

  it('is a pure function of (seed, position, token)', () => {
    expect(gumbel(1, 2, 3)).toBe(gumbel(1, 2, 3));
    expect(gumbel(1, 2, 3)).not.toBe(gumbel(2, 2, 3));
  });
});
