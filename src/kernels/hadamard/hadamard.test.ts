import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32 } from '../../../test/helpers/random.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { type QuantizedMatrix, quantize } from '../../quant/formats.js';
import { hadamardRef, rotateWeightsIn } from '../../quant/hadamard.js';
import { Matmul, matmulRef, prepareMatmul } from '../matmul/matmul.js';
import { uploadMatrix } from '../matmul/matrix.js';
import { Hadamard, hadamardMaxBlock } from './hadamard.js';

/** Rotates the rows of x [M, n] once with {@link Hadamard} and reads y back. */
async function runHadamard(
  ctx: GpuContext,
  x: Float32Array,
  M: number,
  n: number,
  seed: number,
): Promise<Float32Array> {
  return runOnce(ctx, 'hadamard', (run) => {
    const h = run.own(new Hadamard(ctx, run.binds, n, seed, { maxM: M }));
    const [xb, yb] = [run.upload(x), run.empty(M * n * 4)];
    return { encode: (pass) => h.encode(pass, xb, yb, M), read: () => readF32(ctx, yb, M * n) };
  });
}

/** y [M, N] = x [M, K] · Wᵀ once through {@link Matmul}. */
async function runMatmul(
  ctx: GpuContext,
  q: QuantizedMatrix,
  x: Float32Array,
  M: number,
): Promise<Float32Array> {
  await prepareMatmul(ctx, q.format, q, M);
  return runOnce(ctx, 'matmul', (run) => {
    const mm = run.own(new Matmul(ctx, run.binds, run.own(uploadMatrix(ctx, q, 'w')), { maxM: M }));
    const [xb, yb] = [run.upload(x), run.empty(M * q.rows * 4)];
    return { encode: (pass) => mm.encode(pass, xb, yb, M), read: () => readF32(ctx, yb, M * q.rows) };
  });
}

describe('Hadamard rotation kernel', () => {
  // n = K · 2^m: powers of two, 12/20/28 blocks, Qwen's 76 · 64, Llama-2's 172 · 64 (Williamson), and
  // 8192 (two blocks of 4096 when the device allows 16 KiB of workgroup memory: butterfly + mix).
  it.each([64, 96, 80, 56, 896, 1536, 4864, 11008, 8192])(
    'n = %i equals the reference for M = 1, 3, 5',
    async (n) => {
      const ctx = await gpu();
      for (const M of [1, 3, 5]) {
        const x = randomF32(M * n, n + M, 3);
        const got = await runHadamard(ctx, x, M, n, 42);
        const want = hadamardRef(x, M, n, 42, hadamardMaxBlock(ctx));
        for (let r = 0; r < M; r++) {
          // |y| ≤ Σ|x| / √n per row; f32 butterflies add about log2(n) roundings of that size.
          let sum = 0;
          for (let i = 0; i < n; i++) sum += Math.abs(x[r * n + i]!);
          const tol = (1e-6 * Math.log2(n) * sum) / Math.sqrt(n);
          for (let i = 0; i < n; i++)
            expect(Math.abs(got[r * n + i]! - want[r * n + i]!)).toBeLessThanOrEqual(tol);
        }
      }
    },
  );
});

describe('rotated matmul', () => {
  it('GPU rotation then matmul with W·Rᵀ equals the unrotated product', async () => {
    const ctx = await gpu();
    const [M, N, K] = [3, 19, 96];
    const w = randomF32(N * K, 1);
    const x = randomF32(M * K, 2);
    const rx = await runHadamard(ctx, x, M, K, 5);
    const q = quantize(rotateWeightsIn(w, N, K, 5), N, K, 'f32');
    const y = await runMatmul(ctx, q, rx, M);
    const ref = matmulRef(quantize(w, N, K, 'f32'), x, M);
    for (let i = 0; i < y.length; i++)
      expect(Math.abs(y[i]! - ref.y[i]!)).toBeLessThanOrEqual(1e-5 * ref.magnitude[i]! * Math.sqrt(K));
  });
});
