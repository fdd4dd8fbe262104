// Speculation over int8 and int4 KV caches (rotated keys): every drafter's text equals plain
// decoding with the same cache, greedy and seeded. Each token's K/V are rounded per head on their
// own (kv_quant.wgsl), so a tree's rows and a decode step's write the same words, and a committed
// path's rows move with their scales. (Gemma 4's assistant over an int8 cache: assistant.gpu.test.ts.)
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { fixtureFiles, headFixtureFiles, qwen35FixtureFiles } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';

async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

const RUNS: GenerateOptions[] = [
  { maxTokens: 14, treeBudget: 8 },
  { maxTokens: 10, treeBudget: 6, temperature: 1, seed: 3 },
];
const PROMPT = Array.from({ length: 40 }, (_, i) => [5, 17, 99, 3, 250, 17, 99, 3][i % 8]! + (i % 5));

/** Each run's text with `drafter` equals plain decoding's; returns the mean tokens per pass. */
async function lossless(engine: Engine, drafter: 'draft' | 'ngram', label: string): Promise<number> {
  let perPass = 0;
  for (const o of RUNS) {
    const plain = await ids(engine, PROMPT, { ...o, drafter: 'none' });
    expect(await ids(engine, PROMPT, { ...o, drafter }), `${label} ${JSON.stringify(o)}`).toEqual(plain);
    perPass += engine.lastStats!.tokens_per_pass / RUNS.length;
  }
  console.log(`[kv-int-spec] ${label}: ${perPass.toFixed(2)} tokens per pass`);
  return perPass;
}

describe.each(['int8', 'int4'] as const)('speculation over an %s KV cache', (kvCache) => {
  it('self-draft (device step), n-grams, a draft model and a draft head equal plain decoding', async () => {
    const ctx = await gpu();
    const { files } = fixtureFiles('llama', 'f32', 5);
    const model = () => memoryModelFiles('llama', files);
    const base = { model: model(), quant: 'f32', contextLength: 128, kvCache, gpu: ctx } as const;
    const self = await createEngine({ ...base, draft: { self: 'int4' } });
    // The int4 self-draft is accepted on this fixture (about 2 tokens per pass over f32 caches).
    expect(await lossless(self, 'draft', `${kvCache} self-int4`)).toBeGreaterThan(1.2);
    await lossless(self, 'ngram', `${kvCache} n-gram`);
    // The stats: the cache's bytes, and what attention reads for the next token at the end (every
    // layer's K and V rows so far: a scale word and headDim / 4 or / 8 words per head).
    const spec = specFromConfig(JSON.parse(new TextDecoder().decode(files.get('config.json')!)));
    const s = self.lastStats!;
    const perSlot = spec.layers * 2 * spec.kvHeads * 4 * (1 + spec.headDim / (kvCache === 'int8' ? 4 : 8));
    expect(s.kv_bytes).toBe(128 * perSlot);
    expect(s.attention_bytes_per_token).toBe((PROMPT.length + s.completion_tokens - 1) * perSlot);
    await self.unload();
    const drafted = await createEngine({ ...base, model: model(), draft: { model: model(), quant: 'int8' } });
    expect(await lossless(drafted, 'draft', `${kvCache} int8 draft model`)).toBeGreaterThan(1.2);
    await drafted.unload();
    const head = await createEngine({
      ...base,
      model: model(),
      draft: { head: memoryModelFiles('head', headFixtureFiles('llama', 3)) },
    });
    // A random head: equality only.
    await lossless(head, 'draft', `${kvCache} draft head`);
    await head.unload();
  });
});

describe('Qwen3.5 MTP over an int4 KV cache', () => {
  it("its MTP layer's drafts give plain decoding's text", async () => {
    const { files } = qwen35FixtureFiles(5);
    const engine = await createEngine({
      model: memoryModelFiles('qwen35', files),
      quant: 'f32',
      contextLength: 128,
      kvCache: 'int4',
      draft: 'mtp',
      gpu: await gpu(),
    });
    await lossless(engine, 'draft', 'int4 qwen3.5 mtp');
    await engine.unload();
  });
});
