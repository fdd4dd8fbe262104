// The f16 KV cache in the GPU runner (kvFormat 'f16'): keys and values rounded to halves (nearest
// even) as they are written, read back as halves by attention, moved as packed words when a tree
// path is committed. Checked against the CPU reference with the same rounding, on f32 weights;
// the reference with an f32 cache is the control that shows the rounding is seen.
import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import type { ModelFamily } from '../../../src/model/families/index.js';
import { createGpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { relErr } from '../../helpers/compare.js';
import { gpu } from '../../helpers/gpu.js';
import { withCreatedBuffers } from '../../helpers/gpu-buffers.js';

const FAMILIES: ModelFamily[] = ['llama', 'qwen2', 'qwen3'];

describe.each(FAMILIES)('f16 KV cache, %s', (family) => {
  it('prefill, a draft tree, its committed path and a decode step match the reference with an f16 cache', async () => {
    const { files } = fixtureFiles(family, 'f32', 7);
    const opened = await openModel(memoryModelFiles(family, files));
    const tensors = await readAllF32(opened.weights);
    const ref16 = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64, kvFormat: 'f16' });
    const ref32 = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64 });
    const ctx = await gpu();
    // Bytes of the KV cache: every layer's K and V buffers.
    const kvBytes = (buffers: GPUBuffer[]) =>
      buffers.filter((b) => /\.[kv]_cache$/.test(b.label)).reduce((sum, b) => sum + b.size, 0);
    const made16 = await withCreatedBuffers(ctx.device, () =>
      createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: ctx, kvFormat: 'f16' }),
    );
    const made32 = await withCreatedBuffers(ctx.device, () =>
      createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: ctx }),
    );
    const dev = made16.result;
    const dev32 = made32.result;
    try {
      expect(kvBytes(made16.buffers)).toBeGreaterThan(0);
      expect(kvBytes(made16.buffers) * 2).toBe(kvBytes(made32.buffers));
      const runners: ModelRunner[] = [ref16, ref32, dev];
      // Per step: greedy ids must agree; logit errors are summed over the steps.
      let maxErr = 0;
      let meanErr = 0;
      let meanErrF32Cache = 0;
      const mean = (a: Float32Array, b: Float32Array) =>
        a.reduce((s, x, i) => s + Math.abs(x - b[i]!), 0) / a.length;
      const step = async (input: { tokens: number[]; parents?: number[] }) => {
        const ids: string[] = [];
        const logits: Float32Array[] = [];
        for (const r of runners) {
          ids.push(Array.from(await r.forward(input, GREEDY, 'all')).join());
          logits.push(await r.lastLogits!());
        }
        const [want, control, got] = logits as [Float32Array, Float32Array, Float32Array];
        expect(ids[2]).toBe(ids[0]);
        maxErr = Math.max(maxErr, relErr(got, want));
        meanErr += mean(got, want);
        meanErrF32Cache += mean(got, control);
      };
      const prompt = [5, 17, 99, 3, 250, 11, 42, 8];
      await step({ tokens: prompt });
      for (const r of runners) r.commit(prompt.map((_, i) => i));
      // Depth-first tree: 0 → (1 → 2, 3), 4 → 5; keep 0 → 1 → 3, then decode one token.
      await step({ tokens: [40, 41, 42, 43, 44, 45], parents: [-1, 0, 1, 1, -1, 4] });
      for (const r of runners) r.commit([0, 1, 3]);
      await step({ tokens: [12] });
      console.log(
        `[kv-f16] ${family}: max logit error vs the f16-cache reference ${maxErr.toExponential(2)}; mean ${meanErr.toExponential(2)}, vs the f32-cache reference ${meanErrF32Cache.toExponential(2)}`,
      );
      // Not bit-exact: a key or value the GPU computes one f32 ulp away from the reference's can
      // round to the neighbouring half (about 1% of layer 0's elements here; the next layers inherit
      // the difference). Such flips are as large as the rounding but rare, so the mean error stays a
      // fraction of the f32-cache control's (the kernel's rounding itself is exact: kv.test.ts).
      expect(maxErr).toBeLessThan(1e-3);
      expect(meanErrF32Cache).toBeGreaterThan(2 * meanErr);
    } finally {
      dev.dispose();
      dev32.dispose();
    }
  });
});
