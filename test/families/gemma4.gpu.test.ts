import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough, w8a8Inputs } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { deriveSizes, kvSourceLayer, layerSpec } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { draftFixtureFiles, fixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// Gemma 4 on the GPU (tinyConfig('gemma4'): per-layer inputs, sliding heads of 16 and full heads of
// 32 with proportional RoPE, the last two layers reading layers 3's and 2's caches with double-wide
// MLPs, a 64-token window, soft-capped logits), against the reference: prompts cross the window and
// the shared layers run in every pass.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const long = Array.from({ length: 80 }, (_, i) => (i * 37 + 5) % 500);
// Past a sliding layer's ring (64 + 64 + 64 rows), so the rings are used.
const CAPACITY = 256;

async function open(quant: Quant = 'f32') {
  const { files } = fixtureFiles('gemma4', 'f32', 7);
  const opened = await openModel(memoryModelFiles('gemma4', files));
  const dev = await createGpuRunner(opened, { quant, capacity: CAPACITY, gpu: await gpu() });
  return { opened, dev };
}

async function reference(opened: Awaited<ReturnType<typeof openModel>>, quant: Quant = 'f32') {
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  return new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'gemma4', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

describe('Gemma 4 on the GPU', () => {
  it('greedy 24 tokens at f32 equal the reference past the window, across prefill chunks; shared layers hold no cache', async () => {
    const { opened, dev } = await open();
    const spec = opened.spec;
    const ref = await reference(opened);
    const want = await greedyIds(ref, long, 24);
    expect(await greedyIds(dev, long, 24, 24)).toEqual(want);
    expect(await greedyIds(dev, long, 24)).toEqual(want);
    // Only the layers with their own K and V hold a cache: sliding ones a ring of 64 + 64 + 64
    // rows, full ones the context, each at its own width (f32 K and V).
    const ring = 64 + 64 + 64;
    let bytes = 0;
    for (let l = 0; l < spec.layers; l++) {
      if (kvSourceLayer(spec, l) !== l) continue;
      const rows = spec.slidingLayers![l] ? ring : CAPACITY;
      bytes += 2 * rows * deriveSizes(layerSpec(spec, l)).kvWidth * 4;
    }
    expect(dev.kvBytes).toBe(bytes);
    console.log(`[gemma4] kv_bytes ${dev.kvBytes} at a context of ${CAPACITY} (4 of 6 layers hold a cache)`);
    dev.dispose();
  });

  it('a decode step: its dispatches counted; one write, one 4-byte readback', async () => {
    const { opened, dev } = await open();
    for (const part of [long.slice(0, 40), long.slice(40)]) {
      await dev.forward({ tokens: part }, GREEDY, 'last');
      dev.commit(part.map((_, i) => i));
    }
    const session = dev.decode(9, GREEDY, 3);
    await session.next();
    await session.next();
    const step = dev.lastForward;
    session.close();
    console.log(`[gemma4] decode step: ${step.dispatches} dispatches (${opened.spec.layers} layers)`);
    // Per token: embedding, the per-layer inputs (lookup, projection, combine), head, softcap,
    // sampler; per layer at most: q|k|v, QkvRope (or q-norm and RoPE), attention and its merge, o,
    // its norm-add; gate|up, down, its norm-add; gate, gate · input, projection, norm-add, scalar.
    expect(step.dispatches).toBeLessThanOrEqual(opened.spec.layers * 15 + 8);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    // A pass reads every matrix (f32 here), the tied head once, and one row of the embedding and
    // of the per-layer table per token: not the whole table (a lookup, as the embedding).
    const spec = opened.spec;
    const rowsOnly = new Set(['model.embed_tokens.weight', 'model.embed_tokens_per_layer.weight']);
    const matrices = [...weightShapes(spec)].filter(
      ([name, shape]) => shape.length === 2 && !rowsOnly.has(name),
    );
    const want =
      4 * matrices.reduce((n, [, [r, c]]) => n + r! * c!, 0) +
      4 * spec.vocabSize * spec.hidden + // the LM head (tied)
      4 * spec.hidden + // an embedding row
      4 * spec.layers * spec.perLayerInput!.width; // a per-layer table row
    expect(dev.weightBytesPerPass).toBe(want);
    dev.dispose();
  });

  const formats =
    gpuHost().kernels === 'gpu' ? (['f16', 'int8', 'int4', 'int2'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { opened, dev } = await open(quant);
      const ref = await reference(opened, quant);
      const [head, tail] = [long.slice(0, 40), long.slice(40)];
      for (const r of [ref, dev] as ModelRunner[]) {
        await r.forward({ tokens: head }, GREEDY, 'last');
        r.commit(head.map((_, i) => i));
      }
      const want = await ref.forward({ tokens: tail }, GREEDY, 'all');
      const got = await dev.forward({ tokens: tail }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      dev.dispose();
    },
  );

  // W8A8 as forward.gpu.test.ts holds the other families: a short prompt, the reference rounding
  // each `*_proj` input to int8 per token as the GPU does (the per-layer linears are weight-only
  // on both), and a control without the rounding; then greedy ids through the engine.
  it.skipIf(gpuHost().kernels !== 'gpu')(
    'w8a8: logits equal the reference with the same int8 weights and activation rounding',
    async () => {
      const { opened, dev } = await open('w8a8');
      const ref = await reference(opened, 'int8');
      const prompt = [5, 17, 99, 3, 250, 11];
      await dev.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.lastLogits();
      const plain = relErr(got, ref.logits({ tokens: prompt }));
      ref.trim(0);
      ref.linearInput = w8a8Inputs('none');
      const err = relErr(got, ref.logits({ tokens: prompt }));
      console.log(
        `[gemma4] w8a8: max logit error ${err.toExponential(2)} (f32 activations: ${plain.toExponential(2)})`,
      );
      expect(err).toBeLessThan(1e-4);
      expect(plain).toBeGreaterThan(1e-3);
      ref.trim(0);
      dev.trim(0);
      expect(await greedyIds(dev, long.slice(0, 8), 12)).toEqual(await greedyIds(ref, long.slice(0, 8), 12));
      dev.dispose();
    },
  );

  it('scores a draft tree past the window edge like the reference, commits a path and decodes on', async () => {
    const { opened, dev } = await open();
    const ref = await reference(opened);
    // 62 committed tokens: the tree's rows stand at positions 62..65, across the window.
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

  // In the serial forms only, as Gemma 3's (the device step's kernels in the GPU forms are
  // speculate.test.ts's on lavapipe).
  it.skipIf(gpuHost().kernels === 'gpu')(
    'a smaller Gemma 4 drafts for it on the device: plain decoding’s ids, greedy and seeded',
    async () => {
      const { files } = fixtureFiles('gemma4', 'f32', 7);
      const engine = await createEngine({
        model: memoryModelFiles('gemma4', files),
        quant: 'f32',
        contextLength: CAPACITY,
        // One layer (full, at the sliding head size), the MLP cut to 48 channels, its per-layer
        // table the target's first slice: a distinct model sharing the tokenizer.
        draft: { model: memoryModelFiles('gemma4-draft', draftFixtureFiles('gemma4', 7)), quant: 'int8' },
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
        console.log(
          `[gemma4] draft model ${JSON.stringify(o)}: ${perPass.toFixed(2)} tokens per decode pass`,
        );
        // Its drafts are accepted: 5.0 tokens per pass greedy, 7.5 at T = 1 (measured); drafts all
        // rejected would give exactly 1.
        expect(perPass).toBeGreaterThan(2.5);
      }
      await engine.unload();
    },
  );

  it('speculative decoding equals plain decoding, greedy and seeded, with n-grams and int4 self-drafts', async () => {
    const { files } = fixtureFiles('gemma4', 'f32', 7);
    const engine = await createEngine({
      model: memoryModelFiles('gemma4', files),
      quant: 'f32',
      contextLength: CAPACITY,
      draft: { self: 'int4' },
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
      for (const drafter of ['ngram', 'draft'] as const) {
        expect(await run({ ...o, drafter, treeBudget: 8 }), `${drafter} ${JSON.stringify(o)}`).toEqual(plain);
        console.log(
          `[gemma4] ${drafter} ${JSON.stringify(o)}: ${engine.lastStats!.tokens_per_pass.toFixed(2)} tokens per decode pass`,
        );
      }
    }
    await engine.unload();
  });
});
