// Real-size check of the newer families (`npm run test:scale`): a random-weight checkpoint with the
// published config of each shape in WEFT_SCALE_FAMILIES (comma-separated ScaleShape names; default
// Gemma 3 270M and 1B, LFM2-350M, Qwen3.5-0.8B and 2B, all at f32) runs on the GPU in Node (Dawn
// over Mesa's lavapipe, the kernels' GPU forms), and its greedy ids for 32 tokens equal the CPU
// reference's on the same rounded weights. What is checked at real size is the shapes (head_dim
// 256, one KV head, 262k vocabulary split across bindings, 18 and 26 layers of sliding and global
// attention) and the load path; the windows themselves are checked on tiny models in `npm test`.
// SmolLM3-3B, Phi-4-mini and Ministral 3 3B need about 13, 16 and 14 GB for the reference's f32
// weights: name them to run them (at f16 by default; `shape:f32` for f32 on the GPU too). The
// reference runs first, and its weights are collected before the GPU holds the model.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { createGpuContext, type GpuContext } from '../../src/gpu/device.js';
import { useVulkanDriver } from '../../src/host/vulkan.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf } from '../../src/quant/pack.js';
import { SCALE_MODELS, type ScaleShape } from '../fixtures/scale.js';
import { writeScaleDir } from '../fixtures/scale-dir.js';
import { relErr } from '../helpers/compare.js';
import { greedy } from '../helpers/reference.js';

const FORMATS: Partial<Record<ScaleShape, 'f32' | 'f16' | 'int4'>> = {
  'gemma-3-270m': 'f32',
  'gemma-3-1b': 'f32',
  'smollm3-3b': 'f16',
  'phi-4-mini': 'f16',
  'lfm2-350m': 'f32',
  'ministral-3-3b': 'f16',
  'qwen3.5-0.8b': 'f32',
  'qwen3.5-2b': 'f32',
};
// Each entry `shape` runs at its FORMATS format; `shape:format` (f32, f16, int4) at the one named.
const RUNS = (process.env.WEFT_SCALE_FAMILIES ?? 'gemma-3-270m,gemma-3-1b,lfm2-350m,qwen3.5-0.8b,qwen3.5-2b')
  .split(',')
  .map((entry) => {
    const [s, format] = entry.split(':');
    if (!s || !(s in SCALE_MODELS) || !FORMATS[s as ScaleShape])
      throw new Error(`WEFT_SCALE_FAMILIES: ${s} is not one of ${Object.keys(FORMATS).join(', ')}`);
    if (format !== undefined && format !== 'f32' && format !== 'f16' && format !== 'int4')
      throw new Error(`WEFT_SCALE_FAMILIES: ${entry}: the format must be f32, f16 or int4`);
    return { shape: s as ScaleShape, quant: format ?? FORMATS[s as ScaleShape]! };
  });
const PROMPT = [2, 818, 5279, 529, 506, 11211, 236764, 563, 2621, 107, 9079, 236787];
const TOKENS = 32;

let ctx: GpuContext | undefined;
afterAll(() => ctx?.destroy());

describe('newer families at their published shapes, on the GPU in Node (lavapipe)', () => {
  for (const { shape, quant } of RUNS) {
    it(`${shape} at ${quant}: greedy ${TOKENS} ids equal the CPU reference's`, async () => {
      const dir = await mkdtemp(join(tmpdir(), `weft-scale-${shape}-`));
      try {
        const t0 = performance.now();
        const { weightBytes } = await writeScaleDir(dir, shape, 3);
        const opened = await openModel(await pathModel(dir));
        // The prompt's ids within this vocabulary (LFM2's is 65,536).
        const prompt = PROMPT.map((id) => id % opened.spec.vocabSize);
        const tWritten = performance.now();
        // The reference first, in a scope of its own: its f32 weights (Phi-4-mini's are 15 GB) are
        // collected before the device holds the model, so the two never add up.
        const { want, refLogits } = await (async () => {
          const tensors = await readAllF32(opened.weights);
          // Rounded one tensor at a time, each replacing its f32 source: held once.
          if (quant !== 'f32')
            for (const name of Object.keys(tensors))
              Object.assign(tensors, roundedThrough({ [name]: tensors[name]! }, formatOf(quant)));
          const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64 });
          const ids = greedy(ref, prompt, TOKENS);
          ref.trim(0);
          return { want: ids, refLogits: ref.logits({ tokens: prompt }).slice() };
        })();
        (globalThis as { gc?: () => void }).gc?.(); // vitest.scale.config.ts runs Node with --expose-gc
        const tRef = performance.now();
        useVulkanDriver('lavapipe');
        ctx ??= await createGpuContext({ kernels: 'gpu' });
        const dev = await createGpuRunner(opened, { quant, capacity: 64, gpu: ctx });
        const tLoad = performance.now();
        const got: number[] = [];
        // Every prompt row scored: its logits are compared whole below.
        const rows = await dev.forward({ tokens: prompt }, GREEDY, 'all');
        let last = rows.subarray(rows.length - 1);
        const logits = await dev.lastLogits();
        dev.commit(prompt.map((_, i) => i));
        for (let i = 0; i < TOKENS; i++) {
          got.push(last[0]!);
          if (i + 1 === TOKENS) break;
          last = await dev.forward({ tokens: [last[0]!] }, GREEDY, 'last');
          dev.commit([0]);
        }
        const tGpu = performance.now();
        const kvBytes = dev.kvBytes;
        dev.dispose();
        // The device goes too (the next shape makes its own): lavapipe's memory is the process's.
        ctx.destroy();
        ctx = undefined;
        const err = relErr(logits, refLogits);
        console.log(
          `[scale] ${shape} ${quant}: ${(weightBytes / 2 ** 20).toFixed(0)} MiB written in ${((tWritten - t0) / 1000).toFixed(1)} s; ` +
            `reference ${((tRef - tWritten) / 1000).toFixed(1)} s; placed in ${((tLoad - tRef) / 1000).toFixed(1)} s; ` +
            `GPU ${((tGpu - tLoad) / 1000).toFixed(1)} s for ${TOKENS} tokens; KV ${kvBytes} bytes at 64 positions; ` +
            `prompt logits rel. error ${err.toExponential(2)}; ids ${got.join(',')}`,
        );
        // Random weights at these widths often settle on one id: the prompt's logits, every row,
        // are the sharper check.
        expect(err).toBeLessThan(1e-3);
        expect(got).toEqual(want);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
