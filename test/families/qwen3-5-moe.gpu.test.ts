import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { mtpShapes } from '../../src/model/draft/mtp.js';
import { fuseProjections } from '../../src/model/fused-view.js';
import { configFixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';
import { moeGpuTests } from '../helpers/moe-gpu.js';

// qwen3_5_moe on the GPU against the reference: see test/helpers/moe-gpu.ts.
describe('qwen3_5_moe on the GPU', () => {
  moeGpuTests('qwen3_5_moe', (kind, gpuForms) => (kind === 'deltanet' ? 4 : gpuForms ? 6 : 5));

  it('its own MTP layer (a mixture, its experts one by one as published) drafts for the GPU target: plain decoding’s ids, greedy and seeded', async () => {
    const { spec, tensors, files } = configFixtureFiles(tinyConfig('qwen3_5_moe'), 7);
    // The MTP layer beside the model's tensors, small values so its drafts are not all noise.
    let seed = 11;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31 - 0.5;
    };
    const mtp = mtpShapes(spec).map(([name, shape]) => {
      const n = shape.reduce((a, b) => a * b, 1);
      const fan = shape.length === 2 ? Math.sqrt(shape[1]!) : 1;
      const scale = name.endsWith('norm.weight') ? 0.2 : 1 / fan;
      return { name, shape, data: Float32Array.from({ length: n }, () => rand() * scale) };
    });
    expect(mtp.some((t) => /^mtp\.layers\.0\.mlp\.experts\.5\.down_proj\.weight$/.test(t.name))).toBe(true);
    files.set(
      'model.safetensors',
      safetensorsBytes([...fuseProjections(spec, tensors, 'checkpoint'), ...mtp], 'F32'),
    );
    const engine = await createEngine({
      model: memoryModelFiles('qwen35moe-mtp', files),
      quant: 'f32',
      contextLength: 128,
      draft: 'mtp',
      gpu: await gpu(),
    });
    const p = [5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    expect(await run({ maxTokens: 12, drafter: 'draft', treeBudget: 6 })).toEqual(
      await run({ maxTokens: 12, drafter: 'none' }),
    );
    const seeded = { maxTokens: 10, temperature: 1, seed: 2 };
    expect(await run({ ...seeded, drafter: 'draft', treeBudget: 6 })).toEqual(
      await run({ ...seeded, drafter: 'none' }),
    );
    await engine.unload();
  });
});
