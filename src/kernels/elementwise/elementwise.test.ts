import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { AddInPlace, GatherRows, gatherRowsRef, SiluMul, siluMulRef } from './elementwise.js';

/** Runs {@link SiluMul} once (fused when `up` is null: `gate` is then [M, 2I]) and reads h [M, I]. */
async function runSiluMul(
  ctx: GpuContext,
  gate: Float32Array,
  up: Float32Array | null,
  M: number,
  I: number,
): Promise<Float32Array> {
  await SiluMul.prepare(ctx, up === null);
  return runOnce(ctx, 'silu', (run) => {
    const op = run.own(new SiluMul(ctx, run.binds, I, up === null));
    const inputs = [gate, ...(up ? [up] : [])].map((a) => run.upload(a));
    const h = run.empty(M * I * 4);
    return { encode: (pass) => op.encode(pass, inputs, h, M), read: () => readF32(ctx, h, M * I) };
  });
}

/** Runs {@link AddInPlace} once and returns y + x. */
async function runAdd(ctx: GpuContext, x: Float32Array, y: Float32Array): Promise<Float32Array> {
  await AddInPlace.prepare(ctx);
  return runOnce(ctx, 'add', (run) => {
    const op = run.own(new AddInPlace(ctx, run.binds));
    const [bx, by] = [run.upload(x), run.upload(y)];
    return { encode: (pass) => op.encode(pass, bx, by, x.length), read: () => readF32(ctx, by, x.length) };
  });
}

/** Runs {@link GatherRows} once on h [M, n] and reads out [rows.length, n]. */
async function runGatherRows(
  ctx: GpuContext,
  h: Float32Array,
  n: number,
  rows: Uint32Array,
): Promise<Float32Array> {
  await GatherRows.prepare(ctx);
  return runOnce(ctx, 'gather', (run) => {
    const op = run.own(new GatherRows(ctx, run.binds, n));
    const [bh, br, bo] = [run.upload(h), run.upload(rows), run.empty(rows.length * n * 4)];
    return {
      encode: (pass) => op.encode(pass, bh, br, bo, rows.length),
      read: () => readF32(ctx, bo, rows.length * n),
    };
  });
}

function rand(n: number, seed: number, scale = 4): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
  });
}

function maxRelErr(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!)));
  return worst;
}

describe('elementwise kernels vs the TS reference', () => {
  it.each([
    [3, 100],
    [1, 4097],
    [17, 65],
  ])('silu(gate) * up, separate and fused layouts, M=%i I=%i', async (M, I) => {
    const ctx = await gpu();
    const gate = rand(M * I, M * I);
    const up = rand(M * I, M + I);
    const sep = await runSiluMul(ctx, gate, up, M, I);
    expect(maxRelErr(sep, siluMulRef(gate, up, M, I))).toBeLessThan(1e-5);
    const gu = new Float32Array(M * 2 * I);
    for (let m = 0; m < M; m++) {
      gu.set(gate.subarray(m * I, (m + 1) * I), m * 2 * I);
      gu.set(up.subarray(m * I, (m + 1) * I), m * 2 * I + I);
    }
    const fused = await runSiluMul(ctx, gu, null, M, I);
    expect(maxRelErr(fused, siluMulRef(gu, null, M, I))).toBeLessThan(1e-5);
    expect(Array.from(fused)).toEqual(Array.from(sep));
  });

  it.each([1, 1000, 70001])('residual add y += x on %i floats (exact)', async (n) => {
    const ctx = await gpu();
    const x = rand(n, n);
    const y = rand(n, n + 1);
    const got = await runAdd(ctx, x, y);
    expect(Array.from(got)).toEqual(Array.from(y, (v, i) => Math.fround(v + x[i]!)));
  });

  it.each([
    [10, 64, [9, 0, 3]],
    [5, 1000, [4]],
    [300, 33, [1, 1, 299, 150, 2]],
  ])('gather rows of h [%i, %i]: %o (exact)', async (M, n, rows) => {
    const ctx = await gpu();
    const h = rand(M * n, M * n);
    const r = Uint32Array.from(rows);
    expect(Array.from(await runGatherRows(ctx, h, n, r))).toEqual(Array.from(gatherRowsRef(h, n, r)));
  });
});
