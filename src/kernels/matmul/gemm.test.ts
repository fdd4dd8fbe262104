// The prefill GEMM (matmul_gemm.wgsl, what Matmul.encode takes with `prefill` at GEMM_MIN_ROWS
// rows or more, in the GPU forms) against the plain TS references on random shapes: every tile edge ragged (M, N and
// K no multiples of the 32 x 32 tile or of its 32-column K step), formats of every code layout, the
// fusions prefill uses (norm prologue, residual add, gated SiLU), a split matrix and an x offset.
import { describe, expect, it } from 'vitest';
import { gpu, gpuHost, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32, randomMatrix } from '../../../test/helpers/random.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import type { QuantizedMatrix, WeightFormat } from '../../quant/formats.js';
import { rmsNormRef } from '../norm/rmsnorm.js';
import { gatedMatmulRef, Matmul, matmulRef, prepareMatmul } from './matmul.js';
import { type GpuMatrix, uploadGatedPair, uploadMatrix } from './matrix.js';
import { GEMM_MIN_ROWS } from './plan.js';
import type { MatmulOptions } from './variant.js';

// One format per code layout: f32 and f16 words, int8 codes, 4-bit nibbles with a grid per 32
// (q4_0) and per super-block (int4), the IQ4 table (iq4_xs), 2-bit codes (int2), planar 3-, 5- and
// 6-bit codes (q3_k, q5_k, q6_k) and a lattice i-quant (iq2_xs).
// On SwiftShader (where compiling is what a test costs: ~2 s a format) the blocks are read by
// matmul_block.wgsl, the serial form's own code, which matmul.test.ts covers per format: there
// one format per grid kind runs.
const ALL_FORMATS: WeightFormat[] = [
  'f32',
  'f16',
  'int8',
  'q4_0',
  'int4',
  'iq4_xs',
  'int2',
  'q3_k',
  'q5_k',
  'q6_k',
  'iq2_xs',
];
const lavapipe = gpuHost().vulkan === 'lavapipe';
const FORMATS: WeightFormat[] = lavapipe ? ALL_FORMATS : ['f16', 'int4', 'q6_k', 'iq2_xs'];
// [M, N, K]: M from GEMM_MIN_ROWS to past two row tiles, N no multiple of the 32 columns (and one
// narrower than a tile), K = 80 and 688 an odd number of blocks (the last K step half empty), 256
// whole steps.
const SHAPES: [number, number, number][] = [
  [GEMM_MIN_ROWS, 37, 256],
  [70, 9, 688],
  [33, 70, 80],
];
const EPS = 1e-5;

/** Each output within 1e-4 of its magnitude (Σ|x·w|) of the reference. */
function expectClose(got: Float32Array, want: Float32Array, magnitude: Float32Array): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++)
    worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (1e-4 * magnitude[i]! + 1e-30));
  expect(worst).toBeLessThanOrEqual(1);
}

interface Run {
  /** The matrix, or the gate of a gated pair with its up. */
  w: QuantizedMatrix;
  up?: QuantizedMatrix;
  x: Float32Array; // [x0 + M, K]
  M: number;
  x0?: number;
  y0?: Float32Array; // [M, N] what y holds before (the add epilogue's residual)
  gamma?: Float32Array; // [K] the fused norm's weight
  epilogue?: MatmulOptions['epilogue'];
  /** Bytes per part of W (a split matrix). */
  limit?: number;
}

/** y of one prefill Matmul dispatch. */
async function prefill(ctx: GpuContext, r: Run): Promise<Float32Array> {
  const { w, M } = r;
  const N = w.rows;
  const opts = { epilogue: r.epilogue, ...(r.gamma ? { norm: { onePlus: false } } : {}), prefill: true };
  await prepareMatmul(ctx, w.format, w, M, opts);
  return runOnce(ctx, 'gemm', (run) => {
    const m: GpuMatrix = run.own(
      r.up ? uploadGatedPair(ctx, w, r.up, 'gu') : uploadMatrix(ctx, w, 'w', r.limit),
    );
    const norm = r.gamma ? { norm: { weight: run.upload(r.gamma), eps: EPS } } : {};
    const mm = run.own(new Matmul(ctx, run.binds, m, { maxM: M, epilogue: r.epilogue, ...norm }));
    const xb = run.upload(r.x);
    const yb = r.y0 ? run.upload(r.y0) : run.empty(M * N * 4);
    return {
      encode: (pass) => mm.encode(pass, xb, yb, M, r.x0 ?? 0, true),
      read: () => readF32(ctx, yb, M * N),
    };
  });
}

// Matmul takes the GEMM in the GPU forms only (the serial forms were faster on SwiftShader): both
// projects run them, on their own driver.
describe('prefill GEMM', () => {
  const context = () => gpu({ kernels: 'gpu' });

  it.each(FORMATS)('%s equals dequantize + f32 matmul on ragged shapes', async (format) => {
    const ctx = await context();
    let seed = 71;
    for (const [M, N, K] of SHAPES) {
      const w = randomMatrix(format, N, K, seed++);
      const x = randomF32(M * K, seed++);
      const ref = matmulRef(w, x, M);
      expectClose(await prefill(ctx, { w, x, M }), ref.y, ref.magnitude);
    }
  });

  it.each(lavapipe ? (['f16', 'int4'] as const) : (['int4'] as const))(
    '%s with the fusions prefill uses: norm, add, gated SiLU',
    async (format) => {
      const ctx = await context();
      // N·K a multiple of 256: the shapes make gated pairs (their up half aligned).
      const [M, N, K] = [40, 48, 688];
      const w = randomMatrix(format, N, K, 5);
      const up = randomMatrix(format, N, K, 6);
      const x = randomF32(M * K, 7, 3);
      const gamma = randomF32(K, 8);
      const y0 = randomF32(M * N, 9, 10);
      const normed = rmsNormRef(x, gamma, { n: K, eps: EPS });

      const n = matmulRef(w, normed, M);
      expectClose(await prefill(ctx, { w, x, M, gamma }), n.y, n.magnitude);

      const a = matmulRef(w, x, M);
      const added = await prefill(ctx, { w, x, M, y0, epilogue: 'add' });
      expectClose(
        added,
        a.y.map((v, i) => v + y0[i]!),
        a.magnitude.map((v, i) => v + Math.abs(y0[i]!)),
      );

      const g = gatedMatmulRef(w, up, normed, M, 'silu');
      expectClose(await prefill(ctx, { w, up, x, M, gamma, epilogue: 'silu' }), g.y, g.magnitude);
    },
  );

  it('a split matrix at an x offset gives the rows of the reference', async () => {
    const ctx = await context();
    // q6_k parts start on a pair of super-blocks (2 rows of K = 256): parts of 10, 10, 10, 7 rows.
    const [M, N, K, x0] = [20, 37, 256, 3];
    const w = randomMatrix('q6_k', N, K, 31);
    const x = randomF32((x0 + M) * K, 32);
    const ref = matmulRef(w, x.subarray(x0 * K), M);
    const got = await prefill(ctx, { w, x, M, x0, limit: (10 * K * 6) / 8 });
    expectClose(got, ref.y, ref.magnitude);
  });

  it('below GEMM_MIN_ROWS a prefill keeps the decode form: the same bits as without the flag', async () => {
    const ctx = await context();
    const [M, N, K] = [GEMM_MIN_ROWS - 1, 37, 256];
    const w = randomMatrix('int4', N, K, 41);
    const x = randomF32(M * K, 42);
    await prepareMatmul(ctx, w.format, w, M);
    const bits = (prefillFlag: boolean) =>
      runOnce(ctx, 'gemm-min', (run) => {
        const mm = run.own(new Matmul(ctx, run.binds, run.own(uploadMatrix(ctx, w, 'w')), { maxM: M }));
        const [xb, yb] = [run.upload(x), run.empty(M * N * 4)];
        return {
          encode: (pass) => mm.encode(pass, xb, yb, M, 0, prefillFlag),
          read: () => readU32(ctx, yb, M * N),
        };
      });
    expect(Array.from(await bits(true))).toEqual(Array.from(await bits(false)));
  });
});
