// Real-size check of a mixture of experts (`npm run test:scale`): LFM2-8B-A1B's published config
// (8.34 billion weights: 32 experts of 1792 in 22 of its 24 layers, 4 chosen per token) at int4 on
// the GPU in Node (Dawn over Mesa's lavapipe, the kernels' GPU forms) against the CPU reference on
// the same int4 weights: the prompt's logits, every row, and the greedy ids.
//
// Memory: the weights are 4.7 GB packed but 33 GB as the reference's f32, more than this machine
// has. So the checkpoint is written packed (test/fixtures/scale-packed.ts; once, under
// WEFT_SCALE_CACHE, default bench/.cache), the GPU runs first and is freed, and the reference then
// runs block by block (streamed-reference.ts): each block's tensors dequantized (`referenceTensors`,
// as ReferenceRunner is fed), its own reference forward (`referenceBlock`, the code ReferenceRunner
// runs) over the rows, the tensors dropped: ReferenceRunner.logits for one chain on an empty cache.
//
// One reference pass checks the greedy ids: it runs the prompt and the GPU's first generated ids
// together, and the reference's argmax after each row must be the GPU's next id. The reference's
// rows do not depend on the rows after them (causal) nor on which rows share the pass (batch
// invariant), so its own greedy decoding would feed exactly these ids, one pass per token, and
// pick the same ones: the check is its greedy ids equal the GPU's, for a quarter of the cost.

import { expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { createGpuContext } from '../../src/gpu/device.js';
import { useVulkanDriver } from '../../src/host/vulkan.js';
import { argmax } from '../../src/kernels/sample/gumbel.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { GREEDY } from '../../src/model/runner.js';
import { cachedPackedScaleDir } from '../fixtures/scale-packed.js';
import { relErr } from '../helpers/compare.js';
import { streamedReferenceLogits } from './streamed-reference.js';

const CACHE = process.env.WEFT_SCALE_CACHE ?? 'bench/.cache';
const PROMPT = [1, 818, 5279, 529, 506, 11211, 36764, 563];
const TOKENS = 4;

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

it(`lfm2-8b-a1b at int4: the prompt's logits and greedy ${TOKENS} ids equal the CPU reference's (lavapipe)`, async () => {
  const t0 = performance.now();
  const log = (line: string) => console.log(`[scale] lfm2-8b-a1b: ${line}`);
  const dir = await cachedPackedScaleDir(CACHE, 'lfm2-8b-a1b', 'lfm2-8b-a1b', {}, log);
  const opened = await openModel(await pathModel(dir));
  expect(opened.packed).toEqual({ format: 'int4', rotation: 'none' });
  const tWritten = performance.now();

  useVulkanDriver('lavapipe');
  const ctx = await createGpuContext({ kernels: 'gpu' });
  const got: number[] = [];
  let logits: Float32Array;
  let tally: string;
  const tLoad = { start: performance.now(), end: 0 };
  try {
    const dev = await createGpuRunner(opened, { quant: 'int4', capacity: 32, gpu: ctx });
    tLoad.end = performance.now();
    try {
      const rows = await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
      logits = await dev.lastLogits(); // [8, V]
      dev.commit(PROMPT.map((_, i) => i));
      const before = await dev.expertTally(); // the decode passes' routing, from here
      let last = rows.subarray(rows.length - 1);
      for (let i = 0; i < TOKENS; i++) {
        got.push(last[0]!);
        if (i + 1 === TOKENS) break;
        last = await dev.forward({ tokens: [last[0]!] }, GREEDY, 'last');
        dev.commit([0]);
      }
      const after = await dev.expertTally();
      tally =
        before && after
          ? `${((after.experts - before.experts) / (after.routings - before.routings)).toFixed(2)} experts per mixture layer per decode pass`
          : 'no tally';
      log(`GPU weight bytes per token ${dev.weightBytesPerPass}`);
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
  const want = got.map((_, i) => argmax(ref.subarray((PROMPT.length - 1 + i) * V, (PROMPT.length + i) * V)));
  const err = relErr(logits, ref.subarray(0, PROMPT.length * V));
  const tRef = performance.now();
  log(
    `checkpoint ready in ${seconds(tWritten - t0)}; GPU placed in ${seconds(tLoad.end - tLoad.start)}, ` +
      `${PROMPT.length} prompt and ${TOKENS - 1} decode passes in ${seconds(tGpu - tLoad.end)} (${tally}); ` +
      `reference (${sequence.length} rows, block by block) ${seconds(tRef - tGpu)}; ` +
      `prompt logits rel. error ${err.toExponential(2)}; ids ${got.join(',')}`,
  );
  expect(err).toBeLessThan(1e-3);
  expect(want).toEqual(got);
});
