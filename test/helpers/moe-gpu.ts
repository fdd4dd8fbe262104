// The mixture-of-experts families on the GPU (test/families/*-moe.gpu.test.ts): each family's tiny
// fixture (a dense layer among mixture layers, 6 experts choosing 2, so different tokens choose
// different experts) against the CPU reference, in every weight format the driver's forms run,
// through prefill chunks, a draft tree and speculative decoding, with the decode step's dispatches
// and the weight bytes a pass reads counted.
import { expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { packedBytes } from '../../src/quant/formats.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { configFixtureFiles, tinyConfig } from '../fixtures/write.js';
import { relErr } from './compare.js';
import { gpu, gpuHost } from './gpu.js';

const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const prompt = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77];
const CAPACITY = 128;

type Family = 'qwen3_moe' | 'lfm2_moe' | 'qwen3_5_moe';

function files(family: Family) {
  return configFixtureFiles(tinyConfig(family), 7).files;
}

async function open(family: Family, quant: Quant = 'f32') {
  const opened = await openModel(memoryModelFiles(family, files(family)));
  const dev = await createGpuRunner(opened, { quant, capacity: CAPACITY, gpu: await gpu() });
  return { opened, dev };
}

async function reference(opened: Awaited<ReturnType<typeof openModel>>, quant: Quant = 'f32') {
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  return new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'moe', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

/** Registers the family's GPU tests; `dispatchesOf(layer)` is a layer's mixer dispatches in a decode step. */
export function moeGpuTests(
  family: Family,
  mixerDispatches: (kind: string, gpuForms: boolean) => number,
): void {
  it('greedy 24 tokens at f32 equal the reference, across prefill chunks; the tokens choose different experts', async () => {
    const { opened, dev } = await open(family);
    const spec = opened.spec;
    expect(spec.moe?.layers).toContain(true);
    const ref = await reference(opened);
    // The prompt's 10 rows choose more experts than one row's topK in each mixture layer.
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    const t = (await dev.expertTally())!;
    expect(t.rows).toBe(prompt.length * t.routings);
    console.log(
      `[${family}] a 10-row pass reads ${(t.experts / t.routings).toFixed(2)} experts per mixture layer (topK ${spec.moe!.topK})`,
    );
    expect(t.experts / t.routings).toBeGreaterThan(spec.moe!.topK);
    dev.trim(0);
    const want = await greedyIds(ref, prompt, 24);
    expect(await greedyIds(dev, prompt, 24, 4)).toEqual(want);
    expect(await greedyIds(dev, prompt, 24)).toEqual(want);
    dev.dispose();
  });

  it('a decode step is 4 dispatches per mixture (route, gate|up, down, combine; 2 more for a shared expert), one write, one 4-byte readback; weight_bytes_per_pass counts the chosen experts', async () => {
    const { opened, dev } = await open(family);
    const spec = opened.spec;
    const m = spec.moe!;
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    dev.commit(prompt.map((_, i) => i));
    const session = dev.decode(9, GREEDY, 3);
    await session.next();
    await session.next();
    const step = dev.lastForward;
    session.close();
    const mixtures = m.layers.filter(Boolean).length;
    const dense = spec.layers - mixtures;
    const gpuForms = dev.device.kernels === 'gpu';
    const kinds = spec.layerKinds ?? Array.from({ length: spec.layers }, () => 'attention');
    const mixers = kinds.reduce((n, k) => n + mixerDispatches(k, gpuForms), 0);
    const perMixture = 4 + (m.sharedIntermediate ? 2 : 0);
    const perToken = step.dispatches - mixers - dense * 2 - mixtures * perMixture;
    console.log(`[${family}] decode step: ${step.dispatches} dispatches (${mixtures} mixture layers)`);
    expect(perToken).toBeGreaterThan(0);
    expect(perToken).toBeLessThanOrEqual(4);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    // A token reads topK of the experts of each mixture layer (f32 here: 4 bytes a weight).
    const H = spec.hidden;
    const expert = 3 * packedBytes('f32', m.intermediate, H);
    const all = (dev.weightBytesPerPass ?? 0) + (m.experts - m.topK) * mixtures * expert;
    expect(dev.weightBytesPerPass).toBeLessThan(all);
    console.log(
      `[${family}] weight_bytes_per_pass ${dev.weightBytesPerPass} (every expert: ${all}; ${mixtures} mixtures × ${m.topK} of ${m.experts} experts of ${expert} bytes)`,
    );
    dev.dispose();
  });

  // f16 (the shader-f16 variant) and int4 in the GPU forms (lavapipe), int4 alone in the serial
  // forms: the expert matmul's every format in both forms is src/kernels/moe/experts.test.ts's.
  const formats = gpuHost().kernels === 'gpu' ? (['f16', 'int4'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { opened, dev } = await open(family, quant);
      const ref = await reference(opened, quant);
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      for (const r of [ref, dev]) r.trim(0);
      expect(await greedyIds(dev, prompt, 12, 4)).toEqual(await greedyIds(ref, prompt, 12));
      dev.dispose();
    },
  );

  it('scores a draft tree like the reference (each row through its ancestors), commits a path, decodes on', async () => {
    const { opened, dev } = await open(family);
    const ref = await reference(opened);
    const p = prompt.slice(0, 6);
    const tree = { tokens: [40, 41, 42, 43, 44, 45, 46], parents: [-1, 0, 1, 2, 0, 4, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: p }, GREEDY, 'last');
      r.commit(p.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), ref.logits(tree))).toBeLessThan(1e-4);
    expect(Array.from(got)).toEqual(Array.from(want));
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0, 4, 5]);
    const next = [...p, 40, 44, 45];
    expect(await greedyIds(dev, next, 8)).toEqual(await greedyIds(ref, next, 8));
    dev.dispose();
  });

  it('under an expert budget below the experts, a GPU cache of 3 experts per layer gives the same tokens (prefill in waves, a draft tree, n-gram speculation), with its hit rate and bytes loaded in the stats; a budget under topK is refused with the numbers', async () => {
    const opened = await openModel(memoryModelFiles(family, files(family)));
    const spec = opened.spec;
    const m = spec.moe!;
    const mixtures = m.layers.filter(Boolean).length;
    const expert = 3 * packedBytes('f32', m.intermediate, spec.hidden);
    const budget = 3 * expert * mixtures;
    const dev = await createGpuRunner(opened, {
      quant: 'f32',
      capacity: CAPACITY,
      gpu: await gpu(),
      expertBudget: budget,
    });
    expect(dev.hostDriven).toBe(true);
    const ref = await reference(opened);
    // The 10-row prefill chooses more than 3 experts per layer: it runs in waves.
    expect(await greedyIds(dev, prompt, 16)).toEqual(await greedyIds(ref, prompt, 16));
    const c = dev.expertCache()!;
    expect(c.misses).toBeGreaterThan(0);
    expect(c.bytesLoaded).toBe(c.misses * expert);
    // A draft tree through the cache scores as the reference does.
    for (const r of [ref, dev] as ModelRunner[]) r.trim(0);
    const p = prompt.slice(0, 6);
    const tree = { tokens: [40, 41, 42, 43, 44, 45, 46], parents: [-1, 0, 1, 2, 0, 4, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: p }, GREEDY, 'last');
      r.commit(p.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    expect(Array.from(await dev.forward(tree, GREEDY, 'all'))).toEqual(Array.from(want));
    expect(relErr(await dev.lastLogits(), ref.logits(tree))).toBeLessThan(1e-4);
    dev.dispose();
    const engine = await createEngine({
      model: memoryModelFiles(family, files(family)),
      quant: 'f32',
      contextLength: CAPACITY,
      expertBudget: budget,
      gpu: await gpu(),
    });
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate([5, 17, 99, 3, 250, 17, 99, 3], o)) out.push(...c.ids);
      return out;
    };
    const plain = await run({ maxTokens: 12, drafter: 'none' });
    const s = engine.lastStats!;
    console.log(
      `[${family}] expert cache of 3 of ${m.experts} per layer: hit rate ${s.expert_cache_hit_rate?.toFixed(2)}, ${s.expert_bytes_loaded_per_token?.toFixed(0)} bytes loaded per token (an expert: ${expert})`,
    );
    expect(s.expert_cache_hit_rate).toBeGreaterThan(0);
    expect(s.expert_cache_hit_rate).toBeLessThanOrEqual(1);
    expect(await run({ maxTokens: 12, drafter: 'ngram', treeBudget: 8 })).toEqual(plain);
    await engine.unload();
    await expect(
      createGpuRunner(opened, {
        quant: 'f32',
        capacity: CAPACITY,
        gpu: await gpu(),
        expertBudget: expert * mixtures,
      }),
    ).rejects.toThrow(
      new RegExp(
        `hold 1 experts per mixture layer .* a token runs 2: give at least ${2 * expert * mixtures} bytes`,
      ),
    );
  });

  it('speculative decoding equals plain decoding, greedy and seeded, with n-grams and int4 self-drafts', async () => {
    const engine = await createEngine({
      model: memoryModelFiles(family, files(family)),
      quant: 'f32',
      contextLength: CAPACITY,
      draft: { self: 'int4' },
      gpu: await gpu(),
    });
    const p = [5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    const plain = await run({ maxTokens: 16, drafter: 'none' });
    // A plain decode pass routes one row: topK experts per mixture layer, one pass per token.
    const topK = (await openModel(memoryModelFiles(family, files(family)))).spec.moe!.topK;
    expect(engine.lastStats!.experts_per_pass).toBe(topK);
    expect(engine.lastStats!.expert_reads_per_token).toBe(topK);
    for (const drafter of ['ngram', 'draft'] as const) {
      expect(await run({ maxTokens: 16, drafter, treeBudget: 8 }), drafter).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[${family}] ${drafter}: ${s.tokens_per_pass.toFixed(2)} tokens per decode pass; a verification pass reads ${s.experts_per_pass?.toFixed(2)} experts per mixture layer, ${s.expert_reads_per_token?.toFixed(2)} per token emitted (plain decoding: ${topK})`,
      );
      if (drafter === 'draft') {
        expect(s.tokens_per_pass).toBeGreaterThan(1.2);
        expect(s.experts_per_pass).toBeGreaterThan(topK);
      }
    }
    const seeded = { maxTokens: 12, temperature: 1, seed: 3 };
    const sampled = await run({ ...seeded, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const)
      expect(await run({ ...seeded, drafter, treeBudget: 6 }), drafter).toEqual(sampled);
    await engine.unload();
  });
}
