import { describe, expect, it } from 'vitest';
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
import { GEMMA4_MOE } from '../fixtures/gemma4-config.js';
import { configFixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// Gemma 4's mixture (the 26B-A4B's kind of layer) on the GPU, against the CPU reference: GEMMA4_MOE
// at the widths the GPU takes (below: 4 layers, each a dense GeGLU MLP of 36 beside 5 experts of 16
// choosing 2, the router through
// its scaled weightless norm, per-expert scales, each branch normed, the sum normed again; K = V on
// the full layers), through prefill chunks, a draft tree, an expert budget and n-gram
// speculation, with the decode step's dispatches and the weight bytes a pass reads counted.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
// Token ids under the fixture's vocabulary of 83.
const prompt = [5, 17, 60, 3, 25, 11, 42, 8, 30, 77];
const CAPACITY = 128;
// The matmuls read K in blocks of 16: hidden 48 (not 40; q widths 4 × 12 and 4 × 24) and experts
// 16 wide (not 12); the dense MLP keeps its 36, padded as an MLP's is. The GPU's sliding window is
// 64 at least (windows are gemma4.gpu.test.ts's).
const CONFIG: Record<string, unknown> = {
  ...GEMMA4_MOE,
  hidden_size: 48,
  moe_intermediate_size: 16,
  sliding_window: 64,
};

function files(config: Record<string, unknown> = CONFIG) {
  return configFixtureFiles(config, 7).files;
}

async function open(quant: Quant = 'f32', expertBudget?: number) {
  const opened = await openModel(memoryModelFiles('gemma4-moe', files()));
  const dev = await createGpuRunner(opened, {
    quant,
    capacity: CAPACITY,
    gpu: await gpu(),
    ...(expertBudget === undefined ? {} : { expertBudget }),
  });
  return { opened, dev };
}

async function reference(opened: Awaited<ReturnType<typeof openModel>>, quant: Quant = 'f32') {
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  return new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'gemma4-moe', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

/** A decode step's dispatches, writes and readback bytes, after the prompt. */
async function decodeStep(dev: Awaited<ReturnType<typeof createGpuRunner>>) {
  await dev.forward({ tokens: prompt }, GREEDY, 'last');
  dev.commit(prompt.map((_, i) => i));
  const session = dev.decode(9, GREEDY, 3);
  await session.next();
  await session.next();
  const step = dev.lastForward;
  session.close();
  return step;
}

describe('Gemma 4 mixture on the GPU', () => {
  it('greedy 24 tokens at f32 equal the reference, across prefill chunks; the tokens choose different experts', async () => {
    const { opened, dev } = await open();
    const spec = opened.spec;
    expect(spec.moe).toMatchObject({ besideDense: true, scaledRouterNorm: true, perExpertScale: true });
    const ref = await reference(opened);
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    const t = (await dev.expertTally())!;
    expect(t.rows).toBe(prompt.length * t.routings);
    expect(t.routings).toBe(spec.layers);
    console.log(
      `[gemma4-moe] a 10-row pass reads ${(t.experts / t.routings).toFixed(2)} experts per mixture layer (topK ${spec.moe!.topK})`,
    );
    expect(t.experts / t.routings).toBeGreaterThan(spec.moe!.topK);
    dev.trim(0);
    const want = await greedyIds(ref, prompt, 24);
    expect(await greedyIds(dev, prompt, 24, 4)).toEqual(want);
    expect(await greedyIds(dev, prompt, 24)).toEqual(want);
    dev.dispose();
  });

  it('a decode step: 6 dispatches per layer more than the same model without the mixture (route, gate|up, down, combine, a norm, a norm-add), one write, one 4-byte readback; weight_bytes_per_pass counts the chosen experts', async () => {
    const { opened, dev } = await open();
    const spec = opened.spec;
    const m = spec.moe!;
    const step = await decodeStep(dev);
    // The same model without the mixture: its dense MLP alone (gate|up, down, norm-add).
    const plain = { ...CONFIG, enable_moe_block: false };
    const denseOpened = await openModel(memoryModelFiles('gemma4', files(plain)));
    const denseDev = await createGpuRunner(denseOpened, {
      quant: 'f32',
      capacity: CAPACITY,
      gpu: await gpu(),
    });
    const dense = await decodeStep(denseDev);
    denseDev.dispose();
    console.log(
      `[gemma4-moe] decode step: ${step.dispatches} dispatches over ${spec.layers} mixture layers (without the mixture: ${dense.dispatches}); ${(step.dispatches - dense.dispatches) / spec.layers} more per layer`,
    );
    expect(step.dispatches).toBe(dense.dispatches + 6 * spec.layers);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    // A token reads topK of each layer's experts (f32: 4 bytes a weight) and every dense matrix.
    const expert = 3 * packedBytes('f32', m.intermediate, spec.hidden);
    expect(dev.weightBytesPerPass).toBe(denseDev.weightBytesPerPass + spec.layers * m.topK * expert);
    console.log(
      `[gemma4-moe] weight_bytes_per_pass ${dev.weightBytesPerPass} (${spec.layers} mixtures × ${m.topK} of ${m.experts} experts of ${expert} bytes, beside the dense model's ${denseDev.weightBytesPerPass})`,
    );
    dev.dispose();
  });

  // f16 (the shader-f16 variant) and int4 in the GPU forms (lavapipe), int4 alone in the serial
  // forms (f32 is the test above and below).
  const formats = gpuHost().kernels === 'gpu' ? (['f16', 'int4'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { opened, dev } = await open(quant);
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

  it('f32: a draft tree scores like the reference (each row through its ancestors), commits a path, decodes on', async () => {
    const { opened, dev } = await open();
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

  it('under an expert budget of 3 experts per layer (paged, host-driven), greedy ids equal the reference', async () => {
    const opened = await openModel(memoryModelFiles('gemma4-moe', files()));
    const m = opened.spec.moe!;
    const expert = 3 * packedBytes('f32', m.intermediate, opened.spec.hidden);
    const { dev } = await open('f32', 3 * expert * opened.spec.layers);
    expect(dev.hostDriven).toBe(true);
    const ref = await reference(opened);
    expect(await greedyIds(dev, prompt, 12)).toEqual(await greedyIds(ref, prompt, 12));
    expect(dev.expertCache()!.misses).toBeGreaterThan(0);
    dev.dispose();
  });

  it('n-gram speculation equals plain decoding, greedy and seeded', async () => {
    const engine = await createEngine({
      model: memoryModelFiles('gemma4-moe', files()),
      quant: 'f32',
      contextLength: CAPACITY,
      gpu: await gpu(),
    });
    const p = [5, 17, 60, 3, 25, 17, 60, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    for (const o of [{ maxTokens: 16 }, { maxTokens: 12, temperature: 1, seed: 3 }]) {
      const plain = await run({ ...o, drafter: 'none' });
      expect(await run({ ...o, drafter: 'ngram', treeBudget: 8 }), JSON.stringify(o)).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[gemma4-moe] ngram ${JSON.stringify(o)}: ${s.tokens_per_pass.toFixed(2)} tokens per decode pass, ${s.experts_per_pass?.toFixed(2)} experts per mixture layer a pass`,
      );
    }
    await engine.unload();
  });
});
