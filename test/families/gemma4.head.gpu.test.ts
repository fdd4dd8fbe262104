// A trained draft head over Gemma 4 on the GPU (test/helpers/gemma4-head.ts: fitted to the tiny
// target's own features): the head runs beside the target on the device, reading its features
// (per-layer inputs, KV-shared layers, soft-capped logits and all); speculation gives plain
// decoding's ids, greedy and seeded, its drafts accepted, the tokens per pass printed.
import { expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { fixtureFiles } from '../fixtures/write.js';
import { HEAD_SEED, trainedHeadFiles } from '../helpers/gemma4-head.js';
import { gpu } from '../helpers/gpu.js';

/** The ids `engine` generates after `prompt` with `o`. */
async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

it('a trained head drafts for Gemma 4 on the GPU: plain decoding’s ids, greedy and seeded, its drafts accepted', async () => {
  const { files } = fixtureFiles('gemma4', 'f32', HEAD_SEED);
  const engine = await createEngine({
    model: memoryModelFiles('gemma4', files),
    quant: 'f32',
    contextLength: 256,
    draft: { head: memoryModelFiles('head', await trainedHeadFiles()) },
    gpu: await gpu(),
  });
  // Past the 64-token window.
  const prompt = Array.from({ length: 70 }, (_, i) => (i * 37 + 5) % 500);
  for (const o of [
    { maxTokens: 24, treeBudget: 8 },
    { maxTokens: 16, treeBudget: 8, temperature: 1, seed: 3 },
  ] as GenerateOptions[]) {
    const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
    expect(await ids(engine, prompt, { ...o, drafter: 'draft' }), JSON.stringify(o)).toEqual(plain);
    const perPass = engine.lastStats!.tokens_per_pass;
    console.log(`[gemma4 head on the GPU] ${JSON.stringify(o)}: ${perPass.toFixed(2)} tokens per pass`);
    // Drafts all rejected would give exactly 1.
    expect(perPass).toBeGreaterThan(2);
  }
  await engine.unload();
});
