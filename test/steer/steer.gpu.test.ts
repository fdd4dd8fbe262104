import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { readF32 } from '../../src/gpu/buffers.js';
import { type SteerPlan, steerHook } from '../../src/kernels/steer/steer.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { basis, deadCoordinateModel } from '../fixtures/steer.js';
import { fixtureFiles, qwen35FixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu } from '../helpers/gpu.js';
import { bufferLabelled, withCreatedBuffers } from '../helpers/gpu-buffers.js';

function rand(n: number, seed: number, scale = 4): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
  });
}

function unit(n: number, seed: number): Float32Array {
  const v = rand(n, seed);
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);
const PROMPT = [5, 17, 99, 3, 250, 11, 42];

async function runners(files: ReturnType<typeof memoryModelFiles>, plan?: SteerPlan) {
  const opened = await openModel(files);
  const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 64,
  });
  if (plan) ref.residualHook = steerHook(plan);
  const ctx = await gpu();
  const { result: dev, buffers } = await withCreatedBuffers(ctx.device, () =>
    createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: ctx, ...(plan ? { steer: plan } : {}) }),
  );
  // The residual stream [T, H] after the last block of the last forward (before the final norm).
  const x = bufferLabelled(buffers, 'x');
  const residual = (T: number) => readF32(ctx, x, T * opened.spec.hidden);
  return { ref, dev, residual, spec: opened.spec };
}

describe('steering in the GPU forward', () => {
  it('ablation leaves no component along r at the steered layer, and logits match the reference', async () => {
    const files = memoryModelFiles('llama', fixtureFiles('llama', 'f32', 7).files);
    const { spec } = await openModel(files);
    const r = unit(spec.hidden, 3);
    const last = spec.layers - 1;
    const vectors = Array.from({ length: spec.layers }, (_, l) => (l === last ? r : undefined));
    const { ref, dev, residual } = await runners(files, { mode: 'ablate', scale: 1, inputs: true, vectors });
    await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    const x = await residual(PROMPT.length); // [T, H] after the last (steered) block
    const H = spec.hidden;
    for (let t = 0; t < PROMPT.length; t++)
      expect(Math.abs(dot(x.subarray(t * H, (t + 1) * H), r))).toBeLessThan(1e-4);
    const refLogits = ref.logits({ tokens: PROMPT });
    expect(relErr(await dev.lastLogits(), refLogits)).toBeLessThan(1e-4);
    dev.dispose();
  });

  it('"add" with inputs at every layer matches the reference', async () => {
    const files = memoryModelFiles('qwen3', fixtureFiles('qwen3', 'f32', 9).files);
    const { spec } = await openModel(files);
    const vectors = Array.from({ length: spec.layers }, (_, l) => unit(spec.hidden, 10 + l));
    const { ref, dev } = await runners(files, { mode: 'add', scale: 3, inputs: true, vectors });
    const want = ref.logits({ tokens: PROMPT });
    await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), want)).toBeLessThan(1e-4);
    const plain = await runners(files);
    await plain.dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    expect(relErr(await plain.dev.lastLogits(), want)).toBeGreaterThan(1e-3);
    dev.dispose();
    plain.dev.dispose();
  });

  it('"add" at every layer of a hybrid model (Qwen3.5: Gated DeltaNet layers) matches the reference', async () => {
    const files = memoryModelFiles('qwen35', qwen35FixtureFiles(9).files);
    const { spec } = await openModel(files);
    const vectors = Array.from({ length: spec.layers }, (_, l) => unit(spec.hidden, 20 + l));
    const { ref, dev } = await runners(files, { mode: 'add', scale: 3, inputs: true, vectors });
    const want = ref.logits({ tokens: PROMPT });
    await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), want)).toBeLessThan(1e-4);
    dev.dispose();
  });

  it.each(['gemma3', 'gemma4', 'lfm2', 'phi3', 'ministral3'] as const)(
    '"add" at every layer of %s matches the reference',
    async (family) => {
      const files = memoryModelFiles(family, fixtureFiles(family, 'f32', 9).files);
      const { spec } = await openModel(files);
      const vectors = Array.from({ length: spec.layers }, (_, l) => unit(spec.hidden, 30 + l));
      const { ref, dev } = await runners(files, { mode: 'add', scale: 3, inputs: true, vectors });
      const want = ref.logits({ tokens: PROMPT });
      await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), want)).toBeLessThan(1e-4);
      dev.dispose();
    },
  );

  it('ablating a direction the residual stream never uses leaves the logits bit-identical', async () => {
    const c = 5;
    const { spec, files } = deadCoordinateModel('llama', c);
    const vectors = Array.from({ length: spec.layers }, () => basis(spec.hidden, c));
    const steered = await runners(files, { mode: 'ablate', scale: 1, inputs: true, vectors });
    const plain = await runners(files);
    await steered.dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    await plain.dev.forward({ tokens: PROMPT }, GREEDY, 'all');
    expect(Array.from(await steered.dev.lastLogits())).toEqual(Array.from(await plain.dev.lastLogits()));
    steered.dev.dispose();
    plain.dev.dispose();
  });
});
