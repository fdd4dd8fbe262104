import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/files.js';
import type { ModelFamily } from '../../src/formats/spec.js';
import { TREE_RESULT_WORDS } from '../../src/kernels/tree/tree.js';
import { fixtureFiles } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';

async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

/** Every speculative step of the last request ran whole on the device: one readback of the result. */
function oneTripPerStep(engine: Engine): void {
  const d = engine.lastStats!.decode_counts!;
  expect(d.passes).toBeGreaterThan(0);
  expect(d.readbacks).toBe(d.passes);
  expect(d.readback_bytes).toBe(d.passes * TREE_RESULT_WORDS * 4);
}

describe.each(['llama', 'qwen2', 'qwen3'] as ModelFamily[])(
  'speculative decoding on WebGPU, %s',
  (family) => {
    it('greedy and seeded sampling equal plain decoding, with self-drafts and n-grams', async () => {
      const { files } = fixtureFiles(family, 'f32', 5);
      const engine = await createEngine({
        model: memoryModelFiles(family, files),
        quant: 'f32',
        contextLength: 128,
        draft: { self: 'int4' },
        gpu: await gpu(),
      });
      const prompt = [5, 17, 99, 3, 250, 17, 99, 3];
      const greedy = await ids(engine, prompt, { maxTokens: 16, drafter: 'none' });
      for (const budget of [8]) {
        expect(await ids(engine, prompt, { maxTokens: 16, drafter: 'draft', treeBudget: budget })).toEqual(
          greedy,
        );
        oneTripPerStep(engine);
        expect(await ids(engine, prompt, { maxTokens: 16, drafter: 'ngram', treeBudget: budget })).toEqual(
          greedy,
        );
      }
      for (let seed = 1; seed <= 2; seed++) {
        const o: GenerateOptions = { maxTokens: 12, temperature: 1, seed };
        const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
        expect(await ids(engine, prompt, { ...o, drafter: 'draft', treeBudget: 6 })).toEqual(plain);
        oneTripPerStep(engine);
      }
      // Best-first trees from the draft model (logits read back from the GPU) stay exact.
      let branched = 0;
      const got: number[] = [];
      for await (const c of engine.generate(prompt, { maxTokens: 16, drafter: 'draft', treeBudget: 16 })) {
        got.push(...c.ids);
        if (c.tree?.parents.some((p, i) => p !== i - 1)) branched++;
      }
      expect(got).toEqual(greedy);
      expect(branched).toBeGreaterThan(0);
      // The rejection rule needs the target's and the draft's probabilities from the GPU: the
      // same seed gives the same text, of the requested length.
      const r: GenerateOptions = {
        maxTokens: 10,
        temperature: 1,
        seed: 5,
        acceptance: 'rejection',
        treeBudget: 4,
      };
      const first = await ids(engine, prompt, { ...r, drafter: 'draft' });
      expect(first).toHaveLength(10);
      expect(await ids(engine, prompt, { ...r, drafter: 'draft' })).toEqual(first);
      expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1);
      await engine.unload();
    });
  },
);
