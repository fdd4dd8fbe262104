import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { queryTemperatureAt } from '../../src/kernels/rope/rope.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { ropeAttentionFactor } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { ministral3FixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// Ministral 3 on the GPU, from a tiny checkpoint with the published layout (the `mistral3` wrapper,
// the language model under `language_model.*`, BF16): YaRN with an attention factor of 1.07 and
// Llama 4's query temperature stepping every 32 positions (see tinyConfig('ministral3')), so a
// 12-token prompt and 32 generated ones cross a step, and an 80-token prompt crosses two.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const prompt = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77, 5, 17];
const CAPACITY = 128;

async function open(quant: Quant = 'f32') {
  const { files } = ministral3FixtureFiles(5);
  const opened = await openModel(memoryModelFiles('ministral3', files));
  const dev = await createGpuRunner(opened, { quant, capacity: CAPACITY, gpu: await gpu() });
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
  return { opened, dev, ref };
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'ministral3', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

describe('Ministral 3 on the GPU', () => {
  it('greedy 32 tokens at f32 equal the reference (YaRN, attention factor, a temperature step at 32)', async () => {
    const { opened, dev, ref } = await open();
    const qt = opened.spec.queryTemperature;
    expect(qt).toEqual({ beta: 0.1, floorScale: 32 });
    expect(queryTemperatureAt(qt!, 43)).toBeGreaterThan(1.06);
    expect(ropeAttentionFactor(opened.spec.rope)).toBeGreaterThan(1.06);
    expect(await greedyIds(dev, prompt, 32, 5)).toEqual(await greedyIds(ref, prompt, 32));
    dev.dispose();
  });

  it('an 80-token prompt (two temperature steps) in chunks: logits and 24 greedy tokens equal the reference', async () => {
    const { opened, dev, ref } = await open();
    const long = Array.from({ length: 80 }, (_, i) => (i * 211 + 13) % opened.spec.vocabSize);
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: long.slice(0, 48) }, GREEDY, 'last');
      r.commit(long.slice(0, 48).map((_, i) => i));
      await r.forward({ tokens: long.slice(48) }, GREEDY, 'last');
    }
    expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
    ref.trim(0);
    dev.trim(0);
    expect(await greedyIds(dev, long, 24, 32)).toEqual(await greedyIds(ref, long, 24));
    dev.dispose();
  });

  const formats =
    gpuHost().kernels === 'gpu' ? (['f16', 'int8', 'int4', 'int2'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { dev, ref } = await open(quant);
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      dev.dispose();
    },
  );

  it('scores a draft tree past a temperature step like the reference; speculation gives plain decoding’s ids', async () => {
    const { opened, dev, ref } = await open();
    // 30 committed rows: the tree's nodes stand at positions 30 .. 32, across the step.
    const committed = Array.from({ length: 30 }, (_, i) => (i * 53 + 7) % opened.spec.vocabSize);
    const tree = { tokens: [40, 41, 42, 43, 44], parents: [-1, 0, 1, 0, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: committed }, GREEDY, 'last');
      r.commit(committed.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
    expect(Array.from(got)).toEqual(Array.from(want));
    dev.dispose();
    const { files } = ministral3FixtureFiles(5);
    const engine = await createEngine({
      model: memoryModelFiles('ministral3', files),
      quant: 'f32',
      contextLength: CAPACITY,
      draft: { self: 'int4' },
      gpu: await gpu(),
    });
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
      return out;
    };
    // The int4 self-draft's drafts are accepted: 1.42 tokens per decode pass measured, greedy and
    // seeded (all rejected would give exactly 1). The n-grams: equality only (1.04; the text does
    // not repeat the prompt).
    const perPass = (label: string) => {
      const got = engine.lastStats!.tokens_per_pass;
      console.log(`[ministral3] int4 self-draft, ${label}: ${got.toFixed(2)} tokens per decode pass`);
      expect(got, label).toBeGreaterThan(1.2);
    };
    const plain = await run({ maxTokens: 28, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const)
      expect(await run({ maxTokens: 28, drafter, treeBudget: 8 }), drafter).toEqual(plain);
    perPass('greedy');
    // Seeded sampling too: the shared noise keyed by position gives the same ids with drafts.
    const seeded = { maxTokens: 28, temperature: 0.9, seed: 7 };
    const plainSeeded = await run({ ...seeded, drafter: 'none' });
    expect(await run({ ...seeded, drafter: 'draft', treeBudget: 8 })).toEqual(plainSeeded);
    perPass('T = 0.9');
    await engine.unload();
  });
});
