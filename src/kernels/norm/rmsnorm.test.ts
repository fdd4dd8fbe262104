import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { RmsNorm, RmsNormAdd, type RmsNormOptions, rmsNormAddRef, rmsNormRef } from './rmsnorm.js';

/** Runs {@link RmsNorm} once on x [rows, n] with w [n] and reads y back. */
async function runRmsNorm(
  ctx: GpuContext,
  x: Float32Array,
  w: Float32Array,
  opts: RmsNormOptions,
): Promise<Float32Array> {
  await RmsNorm.prepare(ctx, opts.onePlus);
  return runOnce(ctx, 'rmsnorm', (run) => {
    const norm = run.own(new RmsNorm(ctx, run.binds, opts));
    const [bx, bw, by] = [run.upload(x), run.upload(w), run.empty(x.byteLength)];
    return {
      encode: (pass) => norm.encode(pass, bx, bw, by, x.length / opts.n),
      read: () => readF32(ctx, by, x.length),
    };
  });
}

function rand(n: number, seed: number, scale = 1, offset = 0): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale + offset;
  });
}

function maxRelErr(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!)));
  return worst;
}

describe('RMSNorm kernel vs the TS reference', () => {
  it.each([
    [3, 1000, false],
    [7, 96, true],
    [1, 4097, false],
    [33, 50, true],
    [6, 512, false], // QK-norm of Gemma 4's full-attention heads (n = headDim 512)
  ])('rows=%i n=%i onePlus=%s', async (rows, n, onePlus) => {
    const ctx = await gpu();
    const x = rand(rows * n, rows * n, 4);
    const w = rand(n, n, 0.5, onePlus ? 0 : 1);
    const opts = { n, eps: 1e-6, onePlus };
    const y = await runRmsNorm(ctx, x, w, opts);
    expect(maxRelErr(y, rmsNormRef(x, w, opts))).toBeLessThan(2e-6);
  });

  it('QK-norm: q [M, heads, headDim] normalised per head (rows = M * heads, n = headDim)', async () => {
    const ctx = await gpu();
    const M = 5;
    const heads = 6;
    const headDim = 40;
    const q = rand(M * heads * headDim, 11, 3);
    const w = rand(headDim, 12, 0.3, 1);
    const y = await runRmsNorm(ctx, q, w, { n: headDim, eps: 1e-6 });
    // Independent check of one head: its RMS after dividing by w is 1.
    const h = 13;
    let ss = 0;
    for (let d = 0; d < headDim; d++) ss += (y[h * headDim + d]! / w[d]!) ** 2;
    expect(Math.sqrt(ss / headDim)).toBeCloseTo(1, 4);
    expect(maxRelErr(y, rmsNormRef(q, w, { n: headDim, eps: 1e-6 }))).toBeLessThan(2e-6);
  });
});

describe('post-norm residual add (RmsNormAdd) vs RmsNorm then an f32 add, and vs the reference', () => {
  it.each([
    [2, 1000],
    [5, 100],
    [3, 2],
  ])('rows=%i n=%i', async (rows, n) => {
    const ctx = await gpu();
    const y = rand(rows * n, rows * n + 1, 4);
    const w = rand(n, n + 2, 0.5, 1);
    const x = rand(rows * n, rows * n + 3, 2);
    const opts = { n, eps: 1e-6 };
    await Promise.all([RmsNorm.prepare(ctx), RmsNormAdd.prepare(ctx)]);
    // One pass: RmsNorm of y into t, then RmsNormAdd of y into x.
    const [t, got] = await runOnce(ctx, 'rmsnorm-add', (run) => {
      const norm = run.own(new RmsNorm(ctx, run.binds, opts));
      const normAdd = run.own(new RmsNormAdd(ctx, run.binds, opts));
      const [by, bw, bx, bt] = [run.upload(y), run.upload(w), run.upload(x), run.empty(y.byteLength)];
      return {
        encode: (pass) => {
          norm.encode(pass, by, bw, bt, rows);
          normAdd.encode(pass, by, bw, bx, rows);
        },
        read: () => Promise.all([readF32(ctx, bt, y.length), readF32(ctx, bx, x.length)]),
      };
    });
    expect(Array.from(got)).toEqual(Array.from(x, (v, i) => Math.fround(v + t[i]!)));
    expect(maxRelErr(got, rmsNormAddRef(x, y, w, opts))).toBeLessThan(2e-6);
  });
});
