import { describe, expect, it } from 'vitest';
import { gpu, projectForms, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32 } from '../../../test/helpers/random.js';
import { createBuffer, readBuffer, readF32, readU32, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  CODE_BITS,
  dequantize,
  type IntFormat,
  type QuantizedMatrix,
  quantize,
} from '../../quant/formats.js';
import { BindGroupCache } from '../bind.js';
import { matmulRef } from '../matmul/matmul.js';
import { uploadMatrix } from '../matmul/matrix.js';
import {
  MatmulW8A8,
  prepareW8A8,
  QuantizeAct,
  type QuantizedActivations,
  quantizeActRef,
  w8a8Ref,
} from './w8a8.js';

/**
 * Quantises x [M, K] on the GPU and multiplies by `w` (int8, int4 or int2) in one pass. With `act`
 * given, uploads those activations instead of running the quantiser (to test the matmul alone).
 * Returns y [M, N] and the GPU's activation codes and scales.
 */
async function runW8A8(
  ctx: GpuContext,
  w: QuantizedMatrix,
  x: Float32Array,
  M: number,
  act?: QuantizedActivations,
): Promise<{ y: Float32Array; xq: Int8Array; sx: Float32Array }> {
  const K = w.cols;
  await prepareW8A8(ctx, w.format, M);
  return runOnce(ctx, 'w8a8', (run) => {
    const quant = run.own(new QuantizeAct(ctx, run.binds, K));
    const mm = run.own(new MatmulW8A8(ctx, run.binds, run.own(uploadMatrix(ctx, w, 'w')), { maxM: M }));
    const xb = run.upload(x);
    const xq = act ? run.upload(act.packed) : run.empty(M * K);
    const sx = act ? run.upload(act.scale) : run.empty(M * 4);
    const yb = run.empty(M * w.rows * 4);
    return {
      encode: (pass) => {
        if (!act) quant.encode(pass, xb, xq, sx, M);
        mm.encode(pass, xq, sx, yb, M);
      },
      read: async () => ({
        y: await readF32(ctx, yb, M * w.rows),
        xq: new Int8Array(await readBuffer(ctx, xq, M * K)),
        sx: await readF32(ctx, sx, M),
      }),
    };
  });
}

const FORMATS: IntFormat[] = ['int8', 'q4_0', 'int4', 'int2'];
// [M, N, K]: N, M off any tile; K = 688 with N·K not a multiple of 256 (blocks spanning rows).
const SHAPES: [number, number, number][] = [
  [1, 37, 128],
  [5, 70, 256],
  [19, 6, 384],
  [3, 11, 688],
];
// The split form (a workgroup per weight row, its 64 partial sums added by a fixed tree: no subgroup
// operation, so no order that depends on the subgroup size; the tests run on SwiftShader's size 4
// and lavapipe's size 8, and test/scripts/gen-shaders.test.ts holds every kernel to it), and the serial
// form of a software adapter (GpuContext.kernels).
const PATHS = projectForms([
  ['split', 'gpu'],
  ['serial', 'serial'],
] as const).map(([name, kernels]) => [name, () => gpu({ kernels })] as const);

/** x with a few outlier channels, as real activations have. */
function activations(M: number, K: number, seed: number): Float32Array {
  const x = randomF32(M * K, seed);
  for (let m = 0; m < M; m++) x[m * K + ((seed * 7) % K)]! *= 20;
  return x;
}

describe.each(PATHS)('W8A8 (%s)', (_name, context) => {
  it('the activation quantiser matches the reference (codes within 1 at near-ties)', async () => {
    const ctx = await context();
    for (const [M, , K] of SHAPES) {
      const x = activations(M, K, M + K);
      x.fill(0, 0, K); // an all-zero row
      const want = quantizeActRef(x, M, K);
      const q = quantize(randomF32(16 * K, 1), 16, K, 'int8');
      const got = await runW8A8(ctx, q, x, M);
      let off = 0;
      for (let i = 0; i < want.q.length; i++) {
        const d = Math.abs(got.xq[i]! - want.q[i]!);
        expect(d).toBeLessThanOrEqual(1);
        off += d;
      }
      expect(off).toBeLessThanOrEqual(Math.ceil(want.q.length / 1000));
      for (let m = 0; m < M; m++)
        expect(Math.abs(got.sx[m]! - want.scale[m]!)).toBeLessThanOrEqual(want.scale[m]! * 2 ** -22);
    }
  });

  it.each(FORMATS)('%s: integer matmul equals the reference', async (format) => {
    const ctx = await context();
    let seed = 100;
    for (const [M, N, K] of SHAPES) {
      const w = quantize(randomF32(N * K, seed++), N, K, format);
      const x = activations(M, K, seed++);
      const act = quantizeActRef(x, M, K);
      const { y } = await runW8A8(ctx, w, x, M, act);
      const ref = w8a8Ref(w, act, M);
      for (let i = 0; i < y.length; i++)
        expect(Math.abs(y[i]! - ref.y[i]!)).toBeLessThanOrEqual(1e-5 * ref.magnitude[i]! + 1e-30);
    }
  });

  it.each(FORMATS)('%s: end to end within the activation quantisation step', async (format) => {
    const ctx = await context();
    const [M, N, K] = [7, 29, 688];
    const w = quantize(randomF32(N * K, 5), N, K, format);
    const x = activations(M, K, 6);
    const { y, sx } = await runW8A8(ctx, w, x, M);
    // y_w8a8 - x·Wdqᵀ = Σ_k Wdq[n,k] (sx·qx - x): each activation is off by at most sx/2.
    const wdq = dequantize(w);
    const ref = matmulRef(w, x, M);
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) {
        let wabs = 0;
        for (let k = 0; k < K; k++) wabs += Math.abs(wdq[n * K + k]!);
        const bound = wabs * sx[m]! * 0.5 * 1.001 + 1e-4 * ref.magnitude[m * N + n]!;
        expect(Math.abs(y[m * N + n]! - ref.y[m * N + n]!)).toBeLessThanOrEqual(bound);
      }
  });

  it.each(
    FORMATS.flatMap((f) => [
      [f, false],
      [f, true],
    ]),
  )('%s (split %s): row r is bit-identical at M = 1 and in a batch', async (format, split) => {
    const ctx = await context();
    const [N, K, T] = [21, 256, 6];
    const w = quantize(randomF32(N * K, 8), N, K, format);
    const x = activations(T, K, 9);
    await prepareW8A8(ctx, format, 64);
    const binds = new BindGroupCache(ctx.device);
    // Split into parts of 8 rows (8, 8, 5): parts must not change any bit either.
    const gw = uploadMatrix(ctx, w, 'w', split ? (8 * K * CODE_BITS[format]) / 8 : undefined);
    expect(gw.parts.length).toBe(split ? 3 : 1);
    const xb = uploadBuffer(ctx, x, 'x');
    const xq = createBuffer(ctx, T * K, 'xq');
    const sx = createBuffer(ctx, T * 4, 'sx');
    const y = createBuffer(ctx, T * N * 4, 'y');
    const quant = new QuantizeAct(ctx, binds, K);
    const one = new MatmulW8A8(ctx, binds, gw, { maxM: 1 });
    const many = new MatmulW8A8(ctx, binds, gw, { maxM: 64 });
    const run = async (f: (pass: GPUComputePassEncoder) => void, n: number) => {
      const enc = ctx.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      f(pass);
      pass.end();
      ctx.device.queue.submit([enc.finish()]);
      return readU32(ctx, y, n);
    };
    const batch = await run((p) => {
      quant.encode(p, xb, xq, sx, T);
      many.encode(p, xq, sx, y, T);
    }, T * N);
    for (let r = 0; r < T; r++) {
      // Row r alone: quantise only that row (into slot 0), then a GEMV.
      const alone = await run((p) => {
        quant.encode(p, xb, xq, sx, 1, r);
        one.encode(p, xq, sx, y, 1);
      }, N);
      expect(Array.from(alone)).toEqual(Array.from(batch.subarray(r * N, (r + 1) * N)));
    }
    for (const o of [quant, one, many, gw]) o.destroy();
    for (const b of [xb, xq, sx, y]) b.destroy();
  });
});
