import { describe, expect, it } from 'vitest';
import {
  gatherRowsRef,
  runAdd,
  runGatherRows,
  runSiluMul,
  siluMulRef,
} from '../../src/kernels/elementwise/elementwise.js';
import { gpu } from '../helpers/gpu.js';

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
