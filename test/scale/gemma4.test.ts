// Real-size check of Gemma 4's per-layer inputs and shared KV (`npm run test:scale`): E2B's and
// E4B's published text configs (test/fixtures/scale.ts; WEFT_SCALE_GEMMA4 picks, comma-separated,
// default both) with random weights at int4 on the GPU in Node (Dawn over Mesa's lavapipe, the
// kernels' GPU forms) against the CPU reference on the same int4 weights: the prompt's logits,
// every row, and the greedy ids. What is checked at real size: the per-layer table [262144,
// layers · 256] (1.3 GB at E2B's int4, split across lavapipe's 128 MiB bindings and looked up part
// by part), the 262k token embedding and tied head, head_dim 512 on the full layers, the last
// 20 (18) layers reading earlier layers' KV, E2B's double-wide MLPs on them.
//
// Memory: E2B's 5.1 billion weights are 2.6 GB packed but 20 GB as the reference's f32. So, as
// lfm2-moe.test.ts does, the checkpoint is written packed (test/fixtures/scale-packed.ts; once,
// under WEFT_SCALE_CACHE, default bench/.cache), the GPU runs first and is freed, and the
// reference then runs block by block (streamed-reference.ts), reading only the per-layer table's
// rows of the tokens it runs. One reference pass over the prompt and the GPU's generated ids checks
// the greedy ids (the argument is lfm2-moe.test.ts's: the reference is causal and batch invariant).
// E2B took 26.8 minutes here on a loaded CPU (placed in 14.6 s, 15 GPU passes in 9.1 minutes, the
// reference in 16.6), 4.2 GB peak resident; E4B (4.2 GB packed, about twice E2B's work a token)
// has not yet been run to its end here.
import { expect, it } from 'vitest';
import { modelFootprint } from '../../src/engine/limits.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { createGpuContext } from '../../src/gpu/device.js';
import { useVulkanDriver } from '../../src/host/vulkan.js';
import { argmax } from '../../src/kernels/sample/gumbel.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { GREEDY } from '../../src/model/runner.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { packedBytes } from '../../src/quant/formats.js';
import type { ScaleShape } from '../fixtures/scale.js';
import { cachedPackedScaleDir } from '../fixtures/scale-packed.js';
import { relErr } from '../helpers/compare.js';
import { streamedReferenceLogits } from './streamed-reference.js';

const CACHE = process.env.WEFT_SCALE_CACHE ?? 'bench/.cache';
const SHAPES: readonly ScaleShape[] = ['gemma-4-e2b', 'gemma-4-e4b'];
const RUNS = (process.env.WEFT_SCALE_GEMMA4 ?? SHAPES.join(',')).split(',').map((s) => {
  if (!SHAPES.includes(s as ScaleShape))
    throw new Error(`WEFT_SCALE_GEMMA4: ${s} is not one of ${SHAPES.join(', ')}`);
  return s as ScaleShape;
});
const PROMPT = [2, 818, 5279, 529, 506, 11211, 236764, 563];
const TOKENS = 8;

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const GB = (bytes: number) => `${(bytes / 1e9).toFixed(2)} GB`;

/** The int4 footprint's line: weights (the per-layer table among them) and the f16 KV at 4K and 32K. */
function footprintLine(spec: ModelSpec): string {
  const { width, vocab } = spec.perLayerInput!;
  const table = packedBytes('int4', vocab, spec.layers * width);
  const at = (context: number) => modelFootprint(spec, 'int4', { context, kvFormat: 'f16' });
  const kv = [4096, 32768].map((c) => `${c / 1024}K ${(at(c).kvCache / 2 ** 20).toFixed(1)} MiB`);
  return `int4 footprint: weights ${GB(at(4096).weights)} (per-layer table ${GB(table)}), f16 KV at ${kv.join(', ')}`;
}

for (const shape of RUNS)
  it(`${shape} at int4: the prompt's logits and greedy ${TOKENS} ids equal the CPU reference's (lavapipe)`, async () => {
    const t0 = performance.now();
    const log = (line: string) => console.log(`[scale] ${shape}: ${line}`);
    const dir = await cachedPackedScaleDir(CACHE, shape, shape, {}, log);
    const opened = await openModel(await pathModel(dir));
    expect(opened.packed).toEqual({ format: 'int4', rotation: 'none' });
    expect(opened.spec.perLayerInput?.width).toBe(256);
    log(footprintLine(opened.spec));
    const tWritten = performance.now();

    useVulkanDriver('lavapipe');
    const ctx = await createGpuContext({ kernels: 'gpu' });
    const got: number[] = [];
    let logits: Float32Array;
    const tLoad = { start: performance.now(), end: 0 };
    try {
      const dev = await createGpuRunner(opened, { quant: 'int4', capacity: 32, gpu: ctx });
      tLoad.end = performance.now();
      try {
        const rows = await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
        logits = await dev.lastLogits(); // [8, V]
        dev.commit(PROMPT.map((_, i) => i));
        let last = rows.subarray(rows.length - 1);
        for (let i = 0; i < TOKENS; i++) {
          got.push(last[0]!);
          if (i + 1 === TOKENS) break;
          last = await dev.forward({ tokens: [last[0]!] }, GREEDY, 'last');
          dev.commit([0]);
        }
        log(`GPU weight bytes per token ${dev.weightBytesPerPass}, KV ${dev.kvBytes} bytes at 32 positions`);
      } finally {
        dev.dispose();
      }
    } finally {
      // lavapipe's memory is the process's: freed before the reference holds a layer in f32.
      ctx.destroy();
    }
    (globalThis as { gc?: () => void }).gc?.();
    const tGpu = performance.now();

    const sequence = [...PROMPT, ...got.slice(0, -1)];
    const ref = await streamedReferenceLogits(opened, sequence);
    const V = opened.spec.vocabSize;
    const want = got.map((_, i) =>
      argmax(ref.subarray((PROMPT.length - 1 + i) * V, (PROMPT.length + i) * V)),
    );
    const err = relErr(logits, ref.subarray(0, PROMPT.length * V));
    const tRef = performance.now();
    log(
      `checkpoint ready in ${seconds(tWritten - t0)}; GPU placed in ${seconds(tLoad.end - tLoad.start)}, ` +
        `${PROMPT.length} prompt and ${TOKENS - 1} decode passes in ${seconds(tGpu - tLoad.end)}; ` +
        `reference (${sequence.length} rows, block by block) ${seconds(tRef - tGpu)}; ` +
        `prompt logits rel. error ${err.toExponential(2)}; ids ${got.join(',')}`,
    );
    expect(err).toBeLessThan(1e-3);
    expect(want).toEqual(got);
  });
