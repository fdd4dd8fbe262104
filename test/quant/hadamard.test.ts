import { describe, expect, it } from 'vitest';
import {
  HADAMARD_ORDERS,
  hadamardFactor,
  hadamardMatrix,
  hadamardRef,
  rotateWeightsIn,
  rotateWeightsOut,
} from '../../src/quant/hadamard.js';
import { randomF32 } from '../helpers/random.js';

describe('Hadamard matrices', () => {
  it.each([1, 2, 4, 8, 16, ...HADAMARD_ORDERS])('order %i: entries ±1 and H·Hᵀ = K·I', (K) => {
    const h = hadamardMatrix(K);
    expect(h.length).toBe(K * K);
    for (const v of h) expect(Math.abs(v)).toBe(1);
    for (let i = 0; i < K; i++)
      for (let j = 0; j < K; j++) {
        let dot = 0;
        for (let k = 0; k < K; k++) dot += h[i * K + k]! * h[j * K + k]!;
        expect(dot).toBe(i === j ? K : 0);
      }
  });

  it.each([6, 92, 668])('order %i is reported as not implemented', (K) => {
    expect(() => hadamardMatrix(K)).toThrow(/no construction/);
  });

  it('factors n = K · 2^m', () => {
    expect(hadamardFactor(64)).toEqual({ K: 1, P: 64 });
    expect(hadamardFactor(96)).toEqual({ K: 12, P: 8 });
    expect(hadamardFactor(4864)).toEqual({ K: 76, P: 64 });
    expect(hadamardFactor(18944)).toEqual({ K: 148, P: 128 });
    expect(hadamardFactor(160)).toEqual({ K: 20, P: 8 });
    expect(hadamardFactor(11008)).toEqual({ K: 172, P: 64 });
    expect(hadamardFactor(156 * 32)).toEqual({ K: 156, P: 32 });
    expect(() => hadamardFactor(11000)).toThrow(/11000/);
  });
});

describe('rotation R = H·D/√n', () => {
  // [n, maxBlock]: maxBlock below n's power-of-two part exercises the two-stage (mix) plan.
  it.each([
    [64, 4096],
    [96, 4096],
    [80, 4096],
    [56, 4096],
    [208, 4096],
    [896, 4096],
    [256, 64],
  ])('n = %i (block %i): R·Rᵀ = I within 1e-5', (n, maxBlock) => {
    const eye = new Float32Array(n * n);
    for (let i = 0; i < n; i++) eye[i * n + i] = 1;
    const r = hadamardRef(eye, n, n, 7, maxBlock); // row i = R·e_i = column i of R
    let worst = 0;
    for (let i = 0; i < n; i++)
      for (let j = 0; j < n; j++) {
        let dot = 0;
        for (let k = 0; k < n; k++) dot += r[i * n + k]! * r[j * n + k]!;
        worst = Math.max(worst, Math.abs(dot - (i === j ? 1 : 0)));
      }
    expect(worst).toBeLessThan(1e-5);
  });

  it('a block-limited plan gives the same rotation as the one-block plan', () => {
    const x = randomF32(3 * 512, 4);
    const a = hadamardRef(x, 3, 512, 9, 4096);
    const b = hadamardRef(x, 3, 512, 9, 32);
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i]! - b[i]!)).toBeLessThan(1e-5);
  });

  it('W·x = (W·Rᵀ)(R·x) and R·(W·x) = (R·W)·x', () => {
    const [N, K] = [48, 96];
    const w = randomF32(N * K, 1);
    const x = randomF32(K, 2);
    const mv = (a: Float32Array, v: Float32Array, rows: number, cols: number) => {
      const out = new Float32Array(rows);
      for (let r = 0; r < rows; r++) {
        let s = 0;
        for (let c = 0; c < cols; c++) s += a[r * cols + c]! * v[c]!;
        out[r] = s;
      }
      return out;
    };
    const y = mv(w, x, N, K);
    const yIn = mv(rotateWeightsIn(w, N, K, 3), hadamardRef(x, 1, K, 3), N, K);
    for (let i = 0; i < N; i++) expect(Math.abs(yIn[i]! - y[i]!)).toBeLessThan(1e-4);
    const yOut = mv(rotateWeightsOut(w, N, K, 5), x, N, K);
    const ry = hadamardRef(y, 1, N, 5);
    for (let i = 0; i < N; i++) expect(Math.abs(yOut[i]! - ry[i]!)).toBeLessThan(1e-4);
  });
});
