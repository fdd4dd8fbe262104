import { describe, expect, it } from 'vitest';
import { Engine } from '../../../src/engine/engine.js';
import type { TextCodec } from '../../../src/engine/types.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import type { ModelFamily } from '../../../src/model/families/index.js';
import { createGpuRunner, type GpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { roundedThrough, w8a8Inputs } from '../../../src/model/quantized.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';
import { formatOf } from '../../../src/quant/pack.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { relErr } from '../../helpers/compare.js';
import { gpu, gpuHost } from '../../helpers/gpu.js';
import { bundledModel } from '../../helpers/models.js';

const FAMILIES: ModelFamily[] = ['llama', 'qwen2', 'qwen3'];
// Ids only: the fixture tokenizer is irrelevant to these checks.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };

async function pair(family: ModelFamily) {
  const { files } = fixtureFiles(family, 'f32', 7);
  const opened = await openModel(memoryModelFiles(family, files));
  const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 128,
  });
  const dev = await createGpuRunner(opened, { quant: 'f32', capacity: 128, gpu: await gpu() });
  return { ref, dev, spec: opened.spec };
}

async function greedyIds(engine: Engine, prompt: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

/** From empty caches: 24 greedy tokens through the engine (prefill chunks of 4), as `ref` picks them. */
async function expectSameGreedyIds(ref: ModelRunner, dev: ModelRunner, prompt: number[]): Promise<void> {
  for (const r of [ref, dev]) r.trim(0);
  const want = await greedyIds(new Engine({ id: 'ref', runner: ref, codec: ids }), prompt, 24);
  expect(await greedyIds(new Engine({ id: 'gpu', runner: dev, codec: ids }), prompt, 24, 4)).toEqual(want);
}

describe.each(FAMILIES)('GPU forward pass, %s', (family) => {
  it('greedy 32 tokens equal the TS reference, across prefill chunk boundaries', async () => {
    const { ref, dev } = await pair(family);
    const prompt = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77];
    const want = await greedyIds(new Engine({ id: 'ref', runner: ref, codec: ids }), prompt, 32);
    const gpuEngine = new Engine({ id: 'gpu', runner: dev, codec: ids });
    expect(await greedyIds(gpuEngine, prompt, 32, 4)).toEqual(want);
    expect(await greedyIds(gpuEngine, prompt, 32)).toEqual(want);
    dev.dispose();
  });

  it('scores a draft tree like the reference, and commits a path', async () => {
    const { ref, dev, spec } = await pair(family);
    const prompt = [9, 8, 7, 6, 5];
    for (const r of [ref, dev]) {
      await r.forward({ tokens: prompt }, GREEDY, 'last');
      r.commit(prompt.map((_, i) => i));
    }
    // Depth-first tree: 0 → (1 → 2, 3), 4 → 5
    const tree = { tokens: [40, 41, 42, 43, 44, 45], parents: [-1, 0, 1, 1, -1, 4] };
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(Array.from(got)).toEqual(Array.from(want));
    const refLogits = ref.logits({ tokens: tree.tokens, parents: tree.parents });
    const devLogits = await (dev as GpuRunner).lastLogits();
    expect(relErr(devLogits, refLogits)).toBeLessThan(1e-4);
    expect(devLogits.length).toBe(tree.tokens.length * spec.vocabSize);
    // Some rows only, in the asked order: the same values as the full read-back.
    const V = spec.vocabSize;
    const some = await (dev as GpuRunner).lastLogits([5, 1]);
    expect(Array.from(some)).toEqual([...devLogits.subarray(5 * V, 6 * V), ...devLogits.subarray(V, 2 * V)]);
    await expect((dev as GpuRunner).lastLogits([6])).rejects.toThrow(/row 6 is not one of the 6 scored rows/);
    // Keep the path 0 → 1 → 3, then decode one token on both.
    for (const r of [ref, dev]) r.commit([0, 1, 3]);
    const a = await ref.forward({ tokens: [12] }, GREEDY, 'last');
    const b = await dev.forward({ tokens: [12] }, GREEDY, 'last');
    expect(Array.from(b)).toEqual(Array.from(a));
    expect(
      relErr(await dev.lastLogits(), ref.logits({ tokens: [12], parents: [-1] }).subarray(0)),
    ).toBeLessThan(1e-4);
    dev.dispose();
  });
});

// Every weight format: f16 takes the `enable f16` matmul where the device has shader-f16 (the
// lavapipe project), q4_0 its own codes. Logits of a prefill against the reference on the same
// rounded weights, then 24 greedy tokens through the engine (prefill chunks of 4, the GPU-resident
// decode loop) equal to the reference's.
describe.each(['f16', 'int8', 'q4_0', 'int4', 'int2'] as const)('GPU forward pass, %s weights', (quant) => {
  it.each(FAMILIES)(
    '%s logits and greedy ids equal the reference on the same rounded weights',
    async (family) => {
      const { files } = fixtureFiles(family, 'f32', 7);
      const opened = await openModel(memoryModelFiles(family, files));
      const tensors = roundedThrough(await readAllF32(opened.weights), formatOf(quant));
      const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64 });
      const dev = await createGpuRunner(opened, { quant, capacity: 64, gpu: await gpu() });
      const prompt = [5, 17, 99, 3, 250, 11];
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), ref.logits({ tokens: prompt }))).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      await expectSameGreedyIds(ref, dev, prompt);
      dev.dispose();
    },
  );
});

// Prompt chunks of GEMM_MIN_ROWS rows or more take the prefill GEMM (matmul_gemm.wgsl), whose sums
// differ from the decode forms' in their last bits: a 40-row prefill's logits against the reference
// on the same rounded weights, then greedy ids through the engine (one 40-token prefill chunk, the
// decode loop after it) equal to the reference's. The GEMM is the GPU forms' (the lavapipe project). qwen3: q/k norms, the fused q|k|v, a gated MLP.
describe.each(['f16', 'int4'] as const)('GPU prefill GEMM, %s weights', (quant) => {
  it.skipIf(gpuHost().kernels !== 'gpu').each(['qwen3'] as const)(
    '%s: a 40-row prefill scores like the reference',
    async (family) => {
      const { files } = fixtureFiles(family, 'f32', 7);
      const opened = await openModel(memoryModelFiles(family, files));
      const tensors = roundedThrough(await readAllF32(opened.weights), formatOf(quant));
      const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 96 });
      const dev = await createGpuRunner(opened, { quant, capacity: 96, gpu: await gpu() });
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 300);
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt, prefill: true }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), ref.logits({ tokens: prompt }))).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      for (const r of [ref, dev]) r.trim(0);
      const wantIds = await greedyIds(new Engine({ id: 'ref', runner: ref, codec: ids }), prompt, 8);
      expect(await greedyIds(new Engine({ id: 'gpu', runner: dev, codec: ids }), prompt, 8)).toEqual(wantIds);
      dev.dispose();
    },
  );
});

describe('GPU forward pass, w8a8', () => {
  it.each(FAMILIES)(
    '%s logits equal the reference with the same int8 weights and activation rounding',
    async (family) => {
      const { files } = fixtureFiles(family, 'f32', 7);
      const opened = await openModel(memoryModelFiles(family, files));
      const ref = new ReferenceRunner(
        opened.spec,
        mapWeights(roundedThrough(await readAllF32(opened.weights), 'int8')),
        { capacity: 64 },
      );
      const dev = await createGpuRunner(opened, { quant: 'w8a8', capacity: 64, gpu: await gpu() });
      const prompt = [5, 17, 99, 3, 250, 11];
      await dev.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.lastLogits();
      // Without the reference's per-token int8 activation rounding, the logits differ by percents
      // (random fixtures amplify the 1/127 steps): the control shows the test sees the rounding.
      const plain = relErr(got, ref.logits({ tokens: prompt }));
      ref.linearInput = w8a8Inputs('none');
      const err = relErr(got, ref.logits({ tokens: prompt }));
      console.log(
        `[w8a8] ${family}: max logit error ${err.toExponential(2)} (f32 activations: ${plain.toExponential(2)})`,
      );
      expect(err).toBeLessThan(1e-4);
      expect(plain).toBeGreaterThan(1e-3);
      // And 24 greedy tokens through the engine, as the reference chooses them.
      await expectSameGreedyIds(ref, dev, prompt);
      dev.dispose();
    },
  );
});

describe('GPU forward pass, MLP width not a multiple of 16', () => {
  it('kjv-draft (intermediate 344, padded on the GPU) gives the reference greedy ids', async () => {
    const opened = await openModel(await bundledModel('kjv-draft'));
    expect(opened.spec.intermediate % 16).not.toBe(0);
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const dev = await createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: await gpu() });
    const prompt = opened.tokenizer.encode('And the LORD said unto Moses', { addSpecialTokens: true });
    const want = await greedyIds(new Engine({ id: 'ref', runner: ref, codec: ids }), prompt, 8);
    expect(await greedyIds(new Engine({ id: 'gpu', runner: dev, codec: ids }), prompt, 8)).toEqual(want);
    dev.dispose();
  });
});
