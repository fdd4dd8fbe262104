// What a request's chunks carry for a display (the demo's live figures and tree view), on the CPU
// reference: the engine's running counts, which end equal to lastStats; and each pass's tree with
// its tokens' text, the drafter's probabilities where it has them, and the bonus token.
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import { nodeProbs } from '../../src/engine/tree-view.js';
import type { GenerateOptions, GenerationChunk } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { fixtureFiles } from '../fixtures/write.js';

const PROMPT = [300, 12, 45, 12, 45, 12];

async function engine(): Promise<Engine> {
  const { files } = fixtureFiles('llama', 'f32', 11);
  return createEngine({
    model: memoryModelFiles('llama', files),
    device: 'cpu',
    quant: 'f32',
    contextLength: 128,
    // The target's own weights at int2 as a separate draft model: drafts it mostly gets right.
    draft: { model: memoryModelFiles('draft', files), quant: 'int2' },
  });
}

async function chunks(e: Engine, o: GenerateOptions): Promise<GenerationChunk[]> {
  const out: GenerationChunk[] = [];
  for await (const c of e.generate(PROMPT, o)) out.push(c);
  return out;
}

describe('the chunks of a request', () => {
  it('carry the engine’s counts: tokens per pass at most budget + 1, and lastStats’ figures at the end', {
    timeout: 30_000,
  }, async () => {
    const e = await engine();
    for (const o of [
      { maxTokens: 20, treeBudget: 4 },
      { maxTokens: 20, treeBudget: 8, temperature: 1, seed: 3 },
      { maxTokens: 12, drafter: 'ngram' },
      { maxTokens: 12, drafter: 'none' },
    ] satisfies GenerateOptions[]) {
      const cs = await chunks(e, o);
      const budget = o.drafter === 'none' ? 0 : (o.treeBudget ?? 8);
      for (const c of cs) {
        const p = c.progress!;
        expect(p.decodeTokens).toBeLessThanOrEqual(p.decodePasses * (budget + 1));
        expect(p.targetPasses).toBeGreaterThanOrEqual(p.decodePasses + 1);
      }
      const last = cs.at(-1)!.progress!;
      const s = e.lastStats!;
      expect(last.decodeTokens / last.decodePasses, JSON.stringify(o)).toBe(s.tokens_per_pass);
      expect(last.targetPasses).toBe(s.target_passes);
    }
  });

  it('carry each pass’s tree with its tokens’ text, the draft’s probabilities and the bonus token', {
    timeout: 30_000,
  }, async () => {
    const e = await engine();
    for (const o of [
      { maxTokens: 20, treeBudget: 8 },
      { maxTokens: 20, treeBudget: 8, temperature: 1, seed: 3 },
      { maxTokens: 16, treeBudget: 4, temperature: 1, seed: 3, acceptance: 'rejection' },
    ] satisfies GenerateOptions[]) {
      let trees = 0;
      for (const c of await chunks(e, o)) {
        const t = c.tree;
        if (!t || t.tokens.length === 0) continue;
        trees++;
        expect(t.texts).toHaveLength(t.tokens.length);
        for (const s of t.texts!) expect(typeof s).toBe('string');
        expect(t.probs).toHaveLength(t.tokens.length);
        for (const p of t.probs!) {
          expect(p).toBeGreaterThan(0);
          expect(p).toBeLessThanOrEqual(1);
        }
        // Children of one parent share its distribution: their probabilities sum to at most 1.
        const sums = new Map<number, number>();
        for (const [i, p] of t.parents.entries()) sums.set(p, (sums.get(p) ?? 0) + t.probs![i]!);
        for (const s of sums.values()) expect(s).toBeLessThanOrEqual(1 + 1e-5);
        // The bonus is the pass's last emitted token: the one after the accepted drafts.
        const bonus = c.ids[t.accepted.length];
        if (bonus !== undefined) expect(t.bonus?.token).toBe(bonus);
        expect(t.accepted.map((i) => t.tokens[i])).toEqual(c.ids.slice(0, t.accepted.length));
      }
      expect(trees, JSON.stringify(o)).toBeGreaterThan(0);
    }
    // n-gram drafts carry text but no probability.
    const ngram = (await chunks(e, { maxTokens: 16, drafter: 'ngram' })).filter((c) => c.tree?.tokens.length);
    expect(ngram.length).toBeGreaterThan(0);
    for (const c of ngram) {
      expect(c.tree!.texts).toHaveLength(c.tree!.tokens.length);
      expect(c.tree!.probs).toBeUndefined();
    }
  });

  it('nodeProbs: a node’s probability given its parent, from path scores or chain distributions', () => {
    const tree = {
      tokens: [5, 6, 7],
      parents: [-1, 0, 0],
      scores: [Math.log(0.5), Math.log(0.2), Math.log(0.1)],
    };
    const p = nodeProbs(tree)!;
    expect(p[0]).toBeCloseTo(0.5, 12);
    expect(p[1]).toBeCloseTo(0.4, 12);
    expect(p[2]).toBeCloseTo(0.2, 12);
    const chain = {
      tokens: [1, 0],
      parents: [-1, 0],
      probs: [new Float64Array([0.1, 0.9]), new Float64Array([0.3, 0.7])],
    };
    expect(nodeProbs(chain)).toEqual([0.9, 0.3]);
    expect(nodeProbs({ tokens: [1], parents: [-1] })).toBeUndefined();
  });
});
