// A draft head over Gemma 4 (per-layer inputs, sliding and full layers, KV-shared layers, soft-capped
// logits) on the CPU reference: speculative decoding with the head gives plain decoding's ids,
// greedy and seeded. A random head drafts what the target seldom picks, so the head is trained on
// the tiny target itself (test/helpers/gemma4-head.ts): its drafts are accepted, the tokens per
// pass printed beside a random head's.
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { fixtureFiles, headFixtureFiles } from '../fixtures/write.js';
import { HEAD_SEED, trainedHeadFiles } from '../helpers/gemma4-head.js';

const PROMPTS = [
  [5, 17, 99, 3, 250, 11, 42],
  [7, 70, 7, 8, 9, 71, 7, 77, 8],
  [300, 12, 45, 12, 45, 12],
];

/** The ids `engine` generates after `prompt` with `o`. */
async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

/**
 * The engine on the tiny Gemma 4 with `head` drafting: for greedy decoding and sampling at T = 1,
 * each prompt's ids with the head equal plain decoding's; returns the tokens per decode pass of
 * each, over every prompt.
 */
async function speculate(head: Map<string, Uint8Array>): Promise<number[]> {
  const { files } = fixtureFiles('gemma4', 'f32', HEAD_SEED);
  const engine = await createEngine({
    model: memoryModelFiles('gemma4', files),
    device: 'cpu',
    quant: 'f32',
    contextLength: 128,
    draft: { head: memoryModelFiles('head', head) },
  });
  const perPass: number[] = [];
  for (const o of [{ maxTokens: 24 }, { maxTokens: 16, temperature: 1, seed: 3 }] as GenerateOptions[]) {
    let passes = 0;
    let tokens = 0;
    for (const prompt of PROMPTS) {
      const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
      expect(plain.length, `${prompt}`).toBeGreaterThan(4);
      expect(await ids(engine, prompt, { ...o, treeBudget: 8 }), JSON.stringify(o)).toEqual(plain);
      tokens += plain.length;
      passes += plain.length / engine.lastStats!.tokens_per_pass;
    }
    perPass.push(tokens / passes);
  }
  await engine.unload();
  return perPass;
}

describe('a trained draft head over Gemma 4 on the CPU reference', () => {
  it('greedy and seeded: the head’s speculation gives plain decoding’s ids, and its drafts are accepted', {
    timeout: 300_000,
  }, async () => {
    const [greedy, sampled] = await speculate(await trainedHeadFiles());
    const [randomGreedy, randomSampled] = await speculate(headFixtureFiles('gemma4', HEAD_SEED, 1));
    const f = (x: number | undefined) => x!.toFixed(2);
    console.log(
      `[gemma4 head] tokens per pass: trained ${f(greedy)} greedy, ${f(sampled)} at T = 1; random ${f(randomGreedy)}, ${f(randomSampled)}`,
    );
    // Drafts all rejected would give 1 token per pass; the random head's come near that.
    expect(greedy).toBeGreaterThan(2);
    expect(sampled).toBeGreaterThan(2);
    expect(greedy).toBeGreaterThan(randomGreedy! + 1);
  });
});
