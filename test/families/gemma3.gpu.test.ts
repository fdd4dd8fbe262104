import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { draftFixtureFiles, fixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// Gemma 3 (sliding-window layers beside a global one, sandwich norms, GeGLU, scaled embedding) and
// SmolLM3 (a layer without RoPE) on the GPU, from tiny checkpoints with the published layouts (see
// tinyConfig). The Gemma prompt is longer than its 64-token window.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const long = Array.from({ length: 80 }, (_, i) => (i * 37 + 5) % 500);
const CAPACITY = 160;

async function open(family: ModelFamily, quant: Quant = 'f32') {
  const { files } = fixtureFiles(family, 'f32', 7);
  const opened = await openModel(memoryModelFiles(family, files));
  const dev = await createGpuRunner(opened, { quant, capacity: CAPACITY, gpu: await gpu() });
  return { opened, dev };
}

async function reference(opened: Awaited<ReturnType<typeof openModel>>, quant: Quant = 'f32') {
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  return new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'gemma3', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

describe('Gemma 3 on the GPU', () => {
  it('greedy 32 tokens at f32 equal the reference past the window, across prefill chunks', async () => {
    const { opened, dev } = await open('gemma3');
    expect(opened.spec.slidingWindow).toBe(64);
    const ref = await reference(opened);
    const want = await greedyIds(ref, long, 32);
    expect(await greedyIds(dev, long, 32, 24)).toEqual(want);
    expect(await greedyIds(dev, long, 32)).toEqual(want);
    // A short prompt, inside the window, too.
    expect(await greedyIds(dev, long.slice(0, 9), 16)).toEqual(await greedyIds(ref, long.slice(0, 9), 16));
    dev.dispose();
  });

  it('a decode step: the two norms of block outputs add one dispatch each; one write, one 4-byte readback', async () => {
    const { opened, dev } = await open('gemma3');
    for (const part of [long.slice(0, 40), long.slice(40)]) {
      await dev.forward({ tokens: part }, GREEDY, 'last');
      dev.commit(part.map((_, i) => i));
    }
    const session = dev.decode(9, GREEDY, 3);
    await session.next();
    await session.next();
    const step = dev.lastForward;
    session.close();
    // Per layer: q|k|v, QkvRope, attention (+ its merge on the GPU forms past one chunk: not here,
    // 83 slots), o, its norm-add; gate|up, down, its norm-add. Per token: embedding, LM head, sampler.
    const perLayer = 8;
    const perToken = step.dispatches - opened.spec.layers * perLayer;
    console.log(`[gemma3] decode step: ${step.dispatches} dispatches (${opened.spec.layers} layers)`);
    expect(perToken).toBeGreaterThan(0);
    expect(perToken).toBeLessThanOrEqual(4);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    dev.dispose();
  });

  const formats =
    gpuHost().kernels === 'gpu' ? (['f16', 'int8', 'int4', 'int2'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { opened, dev } = await open('gemma3', quant);
      const ref = await reference(opened, quant);
      // 40 tokens committed, then 40 more scored: rows on both sides of the window's edge.
      const [head, tail] = [long.slice(0, 40), long.slice(40)];
      for (const r of [ref, dev] as ModelRunner[]) {
        await r.forward({ tokens: head }, GREEDY, 'last');
        r.commit(head.map((_, i) => i));
      }
      const want = await ref.forward({ tokens: tail }, GREEDY, 'all');
      const got = await dev.forward({ tokens: tail }, GREEDY, 'all');
      const logits = await ref.lastLogits();
      expect(relErr(await dev.lastLogits(), logits)).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      for (const r of [ref, dev]) r.trim(0);
      expect(await greedyIds(dev, long, 12, 32)).toEqual(await greedyIds(ref, long, 12));
      dev.dispose();
    },
  );

  it('scores a draft tree past the window edge like the reference, commits a path and decodes on', async () => {
    const { opened, dev } = await open('gemma3');
    const ref = await reference(opened);
    // 62 committed tokens: the tree's rows stand at positions 62..65, across the 64-token window.
    const p = long.slice(0, 62);
    const tree = { tokens: [40, 41, 42, 43, 44, 45], parents: [-1, 0, 1, 2, 0, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: p }, GREEDY, 'last');
      r.commit(p.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), ref.logits(tree))).toBeLessThan(1e-4);
    expect(Array.from(got)).toEqual(Array.from(want));
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0, 1, 2, 3]);
    const next = [...p, 40, 41, 42, 43];
    expect(await greedyIds(dev, next, 8)).toEqual(await greedyIds(ref, next, 8));
    dev.dispose();
  });

  // In the serial forms only: the device step's kernels in the GPU forms are speculate.test.ts's on
  // lavapipe, and this test's cold compile there (an int8 draft's variants) costs two minutes of CI.
  it.skipIf(gpuHost().kernels === 'gpu')(
    'a smaller Gemma 3 drafts for it on the device (one submission per step): plain decoding’s ids',
    async () => {
      const { files } = fixtureFiles('gemma3', 'f32', 7);
      const engine = await createEngine({
        model: memoryModelFiles('gemma3', files),
        quant: 'f32',
        contextLength: CAPACITY,
        // One sliding layer, the MLP cut to 48 channels: a distinct model sharing the tokenizer.
        draft: { model: memoryModelFiles('gemma3-draft', draftFixtureFiles('gemma3', 7)), quant: 'int8' },
        gpu: await gpu(),
      });
      const p = [...long.slice(0, 60), 5, 17, 99, 3, 250, 17, 99, 3];
      const run = async (o: GenerateOptions) => {
        const out: number[] = [];
        for await (const c of engine.generate(p, o)) out.push(...c.ids);
        return out;
      };
      for (const o of [{ maxTokens: 16 }, { maxTokens: 12, temperature: 1, seed: 3 }]) {
        const plain = await run({ ...o, drafter: 'none' });
        expect(await run({ ...o, drafter: 'draft', treeBudget: 8 })).toEqual(plain);
        const perPass = engine.lastStats!.tokens_per_pass;
        console.log(`[gemma3] draft model: ${perPass.toFixed(2)} tokens per pass`);
        // The smaller Gemma's drafts are accepted: 5.0 tokens per pass greedy, 7.5 at T = 1
        // (measured); drafts all rejected would give exactly 1.
        expect(perPass).toBeGreaterThan(2.5);
      }
      await engine.unload();
    },
  );

  it('speculative decoding equals plain decoding, greedy and seeded, with n-grams and int4 self-drafts', async () => {
    const { files } = fixtureFiles('gemma3', 'f32', 7);
    const engine = await createEngine({
      model: memoryModelFiles('gemma3', files),
      quant: 'f32',
      contextLength: CAPACITY,
      draft: { self: 'int4' },
      gpu: await gpu(),
    });
    // A repetitive prompt past the window, so n-grams find drafts.
    const p = [...long.slice(0, 60), 5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    // Both drafters get drafts accepted here (the fixture's text falls into a loop the n-grams
    // follow), measured in tokens per decode pass: n-grams 3.0 greedy and 2.6 at T = 1, the int4
    // self-draft 5.0 and 7.0. Drafts all rejected would give exactly 1.
    const min = { ngram: 1.8, draft: 2.5 };
    const plain = await run({ maxTokens: 16, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const) {
      expect(await run({ maxTokens: 16, drafter, treeBudget: 8 }), drafter).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[gemma3] ${drafter}: ${(plain.length / Math.max(1, s.target_passes)).toFixed(2)} tokens per target pass, ${s.tokens_per_pass.toFixed(2)} per decode pass`,
      );
      expect(s.tokens_per_pass, drafter).toBeGreaterThan(min[drafter]);
    }
    const seeded = { maxTokens: 12, temperature: 1, seed: 3 };
    const sampled = await run({ ...seeded, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const) {
      expect(await run({ ...seeded, drafter, treeBudget: 6 }), drafter).toEqual(sampled);
      const perPass = engine.lastStats!.tokens_per_pass;
      console.log(`[gemma3] ${drafter}, T = 1: ${perPass.toFixed(2)} tokens per decode pass`);
      expect(perPass, `${drafter}, T = 1`).toBeGreaterThan(min[drafter] - 0.3);
    }
    await engine.unload();
  });
});

describe('Gemma 3 sliding layers keep a ring of their window on the GPU', () => {
  // A context of 400: the sliding layers' rings are 64 (window) + 64 (one pass) + 64 (rollback) =
  // 192 rows, the global layer's 400; 80 + 240 tokens wrap the rings.
  const RING = 64 + 64 + 64;
  const CONTEXT = 400;

  it('greedy 240 tokens past the ring wrap equal the reference; kv_bytes counts the rings; trims keep the window or refuse', async () => {
    const { files } = fixtureFiles('gemma3', 'f32', 7);
    const opened = await openModel(memoryModelFiles('gemma3', files));
    const dev = await createGpuRunner(opened, { quant: 'f32', capacity: CONTEXT, gpu: await gpu() });
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: CONTEXT,
    });
    const spec = opened.spec;
    const row = 2 * spec.kvHeads * spec.headDim * 4; // K and V of one slot, f32
    const sliding = spec.slidingLayers!.filter(Boolean).length;
    expect(dev.kvBytes).toBe(sliding * RING * row + (spec.layers - sliding) * CONTEXT * row);
    console.log(
      `[gemma3] KV at a context of ${CONTEXT}: ${dev.kvBytes} bytes (${sliding} sliding layers × ${RING} rows, ${spec.layers - sliding} global × ${CONTEXT}); without rings ${spec.layers * CONTEXT * row}`,
    );
    const want = await greedyIds(ref, long, 240);
    expect(await greedyIds(dev, long, 240)).toEqual(want);
    // The cache holds the prompt and 239 ids (319 rows). Back 29: within the ring's rollback, the
    // rows before stay, and decoding on from there equals the reference's; back past it, refused.
    expect(dev.kvLength).toBe(319);
    expect(dev.canTrim(290)).toBe(true);
    expect(dev.canTrim(200)).toBe(false);
    expect(() => dev.trim(200)).toThrow(/ring of their window/);
    const decodeOn = async (r: ModelRunner, first: number, n: number) => {
      const out: number[] = [];
      let t = first;
      for (let i = 0; i < n; i++) {
        t = (await r.forward({ tokens: [t] }, GREEDY, 'last'))[0]!;
        r.commit([0]);
        out.push(t);
      }
      return out;
    };
    for (const r of [ref, dev] as ModelRunner[]) r.trim(290);
    expect(await decodeOn(dev, 7, 40)).toEqual(await decodeOn(ref, 7, 40));
    // A request sharing only an early part of the cache starts again from 0 (the engine's choice).
    const early = [...long.slice(0, 50), 9, 10];
    expect(await greedyIds(dev, early, 12)).toEqual(await greedyIds(ref, early, 12));
    dev.dispose();
  });

  it('speculation across the ring wrap gives plain decoding’s ids (tree commits compact within the ring)', async () => {
    const { files } = fixtureFiles('gemma3', 'f32', 7);
    const engine = await createEngine({
      model: memoryModelFiles('gemma3', files),
      quant: 'f32',
      contextLength: CONTEXT,
      gpu: await gpu(),
    });
    const p = [...long, 5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    const plain = await run({ maxTokens: 200, drafter: 'none' });
    expect(await run({ maxTokens: 200, drafter: 'ngram', treeBudget: 8 })).toEqual(plain);
    expect(engine.lastStats!.kv_bytes).toBeLessThan(3 * CONTEXT * 2 * 32 * 4);
    // The n-grams follow the fixture's looping text, so the tree commits are real: 4.7 tokens per
    // decode pass measured (drafts all rejected would give exactly 1).
    const perPass = engine.lastStats!.tokens_per_pass;
    console.log(`[gemma3] n-grams across the ring wrap: ${perPass.toFixed(2)} tokens per decode pass`);
    expect(perPass).toBeGreaterThan(2.5);
    await engine.unload();
  });
});

describe('SmolLM3 on the GPU', () => {
  it('greedy 32 tokens at f32 equal the reference (its last layer without RoPE)', async () => {
    const { opened, dev } = await open('smollm3');
    expect(opened.spec.noRopeLayers).toEqual([false, true]);
    const ref = await reference(opened);
    const prompt = long.slice(0, 12);
    const want = await greedyIds(ref, prompt, 32);
    expect(await greedyIds(dev, prompt, 32, 5)).toEqual(want);
    dev.dispose();
  });
});
