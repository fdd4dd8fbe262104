import { describe, expect, it } from 'vitest';
import { rankChildren, samplingProbs } from '../../src/decode/probs.js';
import { allowedTokens, gumbelKey, gumbelScore, sampleRef } from '../../src/kernels/sample/gumbel.js';
import { GREEDY_TREE_SHARPEN } from '../../src/kernels/sample/topk.js';
import type { SamplerSpec } from '../../src/model/runner.js';
import { rng } from '../fixtures/write.js';

const sampler = (o: Partial<SamplerSpec>): SamplerSpec => ({
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: 7,
  ...o,
});

function randomLogits(seed: number, V: number): Float32Array {
  const rand = rng(seed);
  return Float32Array.from({ length: V }, () => (rand() - 0.5) * 6);
}

describe('samplingProbs', () => {
  it('is softmax(ℓ / T) over the allowed tokens, zero elsewhere, summing to 1', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const logits = randomLogits(seed, 37);
      const s = sampler({
        temperature: 0.5 + (seed % 3) * 0.5,
        topK: seed % 4 === 0 ? 5 : 0,
        topP: seed % 5 === 0 ? 0.8 : 1,
      });
      const p = samplingProbs(logits, s);
      const ok = allowedTokens(logits, s);
      expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
      let z = 0;
      for (let v = 0; v < 37; v++) if (ok[v]) z += Math.exp(logits[v]! / s.temperature);
      for (let v = 0; v < 37; v++)
        expect(p[v]).toBeCloseTo(ok[v] ? Math.exp(logits[v]! / s.temperature) / z : 0, 12);
    }
  });

  it('is one-hot at the argmax when greedy', () => {
    expect(Array.from(samplingProbs([0.5, 2, 2, -1], sampler({ temperature: 0 })))).toEqual([0, 1, 0, 0]);
  });
});

describe('rankChildren (tree drafting under shared noise)', () => {
  it('child 0 is the Gumbel-argmax sampleRef picks; the rest follow by perturbed score', () => {
    for (let seed = 1; seed <= 50; seed++) {
      const logits = randomLogits(seed, 64);
      const s = sampler({ seed, topK: seed % 2 ? 0 : 10 });
      const position = 100 + seed;
      const kids = rankChildren(logits, position, s, 4);
      expect(kids).toHaveLength(4);
      expect(kids[0]!.token).toBe(sampleRef(logits, s.seed, position, s));
      const key = gumbelKey(s.seed, position);
      const scores = kids.map((c) => gumbelScore(logits[c.token]!, 1, key, c.token));
      for (let i = 1; i < 4; i++) {
        expect(scores[i]!).toBeLessThanOrEqual(scores[i - 1]!);
        expect(kids[i]!.logWeight).toBeLessThanOrEqual(kids[i - 1]!.logWeight);
      }
      for (const c of kids) expect(c.logWeight).toBeLessThanOrEqual(0);
    }
  });

  it('weights are a distribution over the allowed tokens; filtered tokens are never children', () => {
    const logits = randomLogits(3, 16);
    const all = rankChildren(logits, 5, sampler({}), 16);
    expect(all.reduce((a, c) => a + Math.exp(c.logWeight), 0)).toBeCloseTo(1, 9);
    const topK = rankChildren(logits, 5, sampler({ topK: 3 }), 16);
    const ok = allowedTokens(logits, { temperature: 1, topK: 3 });
    expect(topK).toHaveLength(3);
    for (const c of topK) expect(ok[c.token]).toBe(true);
  });

  it('greedy: the k largest logits, ties to the lower id', () => {
    const kids = rankChildren([1, 3, 2, 3, -1], 0, sampler({ temperature: 0 }), 3);
    expect(kids.map((c) => c.token)).toEqual([1, 3, 2]);
  });

  it('greedy: weights are log-softmax(c · ℓ), c = sharpen (default 1); the children do not depend on c', () => {
    const logits = randomLogits(9, 32);
    const m = Math.max(...logits);
    const order = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
    expect(GREEDY_TREE_SHARPEN).toBeGreaterThan(1);
    // Default (every drafter but a head): the draft's own distribution, c = 1.
    for (const [c, rank] of [
      [1, sampler({ temperature: 0 })],
      [GREEDY_TREE_SHARPEN, { ...sampler({ temperature: 0 }), sharpen: GREEDY_TREE_SHARPEN }],
    ] as const) {
      const kids = rankChildren(logits, 0, rank, 32);
      const z = logits.reduce((a, l) => a + Math.exp(c * (l - m)), 0);
      expect(kids.map((k) => k.token)).toEqual(order);
      for (const k of kids)
        expect(k.logWeight).toBeCloseTo(Math.min(0, c * (logits[k.token]! - m) - Math.log(z)), 9);
      expect(kids.reduce((a, k) => a + Math.exp(k.logWeight), 0)).toBeCloseTo(1, 9);
    }
    // Sampling weighs at c = 1 whatever is asked.
    const t1 = sampler({ temperature: 1 });
    expect(rankChildren(logits, 3, { ...t1, sharpen: 4 }, 8)).toEqual(rankChildren(logits, 3, t1, 8));
    expect(() => rankChildren(logits, 0, { ...sampler({ temperature: 0 }), sharpen: 0 }, 4)).toThrow(
      'tree ranking: sharpen must be a finite number > 0, got 0',
    );
  });
});
