// Real model shapes on the GPU forms (the lavapipe project only: see vitest.config.ts): each weight
// format at N = 2048 with K = 2048 and 8192, as a 1B model's decode matmuls meet them (their split
// lanes, trips and load widths are those of a real model, not of the small shapes in
// matmul.test.ts), and an LM head larger than lavapipe's 128 MiB storage binding, split into parts.
// Each against the TS reference, and with its GEMV rows bit-identical to a batch's.
import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32 } from '../../../test/helpers/random.js';
import { readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { type IntFormat, type QuantizedMatrix, quantize, type WeightFormat } from '../../quant/formats.js';
import { MatmulW8A8, prepareW8A8, quantizeActRef, w8a8Ref } from '../w8a8/w8a8.js';
import { Matmul, matmulRef, prepareMatmul } from './matmul.js';
import { uploadMatrix } from './matrix.js';
import { blocksPerUnit, splitLanes } from './plan.js';

const FORMATS: WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];

/** y [M, N] bits of one Matmul call over `q` (an instance for M rows). */
async function bits(ctx: GpuContext, q: QuantizedMatrix, x: Float32Array, M: number, maxBinding?: number) {
  await prepareMatmul(ctx, q.format, q, M);
  return runOnce(ctx, 'matmul-shapes', (run) => {
    const w = run.own(uploadMatrix(ctx, q, 'w', maxBinding));
    const mm = run.own(new Matmul(ctx, run.binds, w, { maxM: M }));
    const [xb, yb] = [run.upload(x), run.empty(M * q.rows * 4)];
    return {
      encode: (pass) => mm.encode(pass, xb, yb, M),
      read: async () => ({ y: await readU32(ctx, yb, M * q.rows), parts: w.parts.length }),
    };
  });
}

/** The largest error against the reference, in units of 1e-4 of each output's magnitude. */
function worst(got: Uint32Array, q: QuantizedMatrix, x: Float32Array, M: number): number {
  const ref = matmulRef(q, x, M);
  const y = new Float32Array(got.buffer, got.byteOffset, got.length);
  let w = 0;
  for (let i = 0; i < y.length; i++)
    w = Math.max(w, Math.abs(y[i]! - ref.y[i]!) / (1e-4 * ref.magnitude[i]! + 1e-30));
  return w;
}

describe('matmul at real shapes, GPU forms', () => {
  it.each(FORMATS)(
    '%s [2048, 2048] and [2048, 8192]: the reference, GEMV rows = batch rows',
    async (format) => {
      const ctx = await gpu({ kernels: 'gpu' });
      for (const K of [2048, 8192]) {
        const N = 2048;
        const q = quantize(randomF32(N * K, K + 1), N, K, format);
        const x = randomF32(5 * K, K + 2);
        // 5 rows: the 8-row tile, short; then each row through the GEMV.
        const batch = await bits(ctx, q, x, 5);
        expect(worst(batch.y, q, x, 5)).toBeLessThanOrEqual(1);
        for (let r = 0; r < 5; r++) {
          const one = await bits(ctx, q, x.subarray(r * K, (r + 1) * K), 1);
          expect(Array.from(one.y)).toEqual(Array.from(batch.y.subarray(r * N, (r + 1) * N)));
        }
        console.log(
          `[shapes] ${format} [${N}, ${K}]: ${splitLanes(format, N, K)} lanes per output, ${blocksPerUnit(format, K)} blocks per load`,
        );
      }
    },
  );

  it('an LM head over the 128 MiB binding: split into parts, the same bits and the reference', async () => {
    const ctx = await gpu({ kernels: 'gpu' });
    const limit = Math.min(ctx.limits.maxStorageBufferBindingSize, 128 * 2 ** 20);
    // f16 [68000, 1024]: 139 MB of codes, two parts at 128 MiB.
    const [N, K] = [68000, 1024];
    const q = quantize(randomF32(N * K, 31), N, K, 'f16');
    const x = randomF32(3 * K, 32);
    const split = await bits(ctx, q, x, 3, limit);
    expect(split.parts).toBe(2);
    expect(worst(split.y, q, x, 3)).toBeLessThanOrEqual(1);
    const one = await bits(ctx, q, x.subarray(K, 2 * K), 1, limit);
    expect(Array.from(one.y)).toEqual(Array.from(split.y.subarray(N, 2 * N)));
  });

  it.each(['int8', 'int4'] as IntFormat[])('w8a8 %s [2048, 8192]: the integer reference', async (format) => {
    const ctx = await gpu({ kernels: 'gpu' });
    const [M, N, K] = [3, 2048, 8192];
    const w = quantize(randomF32(N * K, 41), N, K, format);
    const act = quantizeActRef(randomF32(M * K, 42), M, K);
    await prepareW8A8(ctx, format, M);
    const y = await runOnce(ctx, 'w8a8-shapes', (run) => {
      const mm = run.own(new MatmulW8A8(ctx, run.binds, run.own(uploadMatrix(ctx, w, 'w')), { maxM: M }));
      const [xq, sx, yb] = [run.upload(act.packed), run.upload(act.scale), run.empty(M * N * 4)];
      return { encode: (pass) => mm.encode(pass, xq, sx, yb, M), read: () => readU32(ctx, yb, M * N) };
    });
    const ref = w8a8Ref(w, act, M);
    const got = new Float32Array(y.buffer);
    for (let i = 0; i < got.length; i++)
      expect(Math.abs(got[i]! - ref.y[i]!)).toBeLessThanOrEqual(1e-5 * ref.magnitude[i]! + 1e-30);
  });
});
