import { describe, expect, it } from 'vitest';
import { quantizeActRef } from '../../src/kernels/w8a8/w8a8.js';
import { roundedThrough, w8a8Inputs } from '../../src/model/quantized.js';
import { hadamardRef } from '../../src/quant/hadamard.js';
import {
  effectiveWeights,
  packedWidth,
  packLinear,
  ROTATION_SEED,
  unrotateRows,
} from '../../src/quant/pack.js';

/** Deterministic values in [-1, 1) with a few large outliers (what rotation is for). */
function values(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32) * 2 - 1;
    if (i % 37 === 5) out[i] = out[i]! * 20;
  }
  return out;
}

function maxAbs(a: Float32Array): number {
  return a.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

/** Root-mean-square of a - b over the root-mean-square of b. */
function relRms(a: Float32Array, b: Float32Array): number {
  let e = 0;
  let s = 0;
  for (let i = 0; i < a.length; i++) {
    e += (a[i]! - b[i]!) ** 2;
    s += b[i]! ** 2;
  }
  return Math.sqrt(e / s);
}

describe('packedWidth', () => {
  it('picks Hadamard sizes when rotating and blocks of 16 otherwise', () => {
    expect(packedWidth(688, 'hadamard')).toBe(688); // 172 · 4
    expect(packedWidth(344, 'hadamard')).toBe(384); // 12 · 32
    expect(packedWidth(11008, 'hadamard')).toBe(11008); // 172 · 64
    expect(packedWidth(256, 'hadamard')).toBe(256);
    expect(packedWidth(96, 'hadamard')).toBe(96); // 12 · 8
    expect(packedWidth(344, 'none')).toBe(352);
    expect(packedWidth(688, 'none')).toBe(688);
  });
});

describe('unrotateRows', () => {
  it.each([64, 96, 688, 384])('inverts hadamardRef (n = %i), also for non-symmetric H_K', (n) => {
    const x = values(3 * n, n);
    const back = unrotateRows(hadamardRef(x, 3, n, ROTATION_SEED), 3, n);
    expect(maxDiff(back, x)).toBeLessThan(1e-5 * maxAbs(x));
  });

  it('is Rᵀ: equal to multiplying by the explicit transpose of R (n = 28, a Paley I order)', () => {
    const n = 28;
    const eye = new Float32Array(n * n);
    for (let i = 0; i < n; i++) eye[i * n + i] = 1;
    const rCols = hadamardRef(eye, n, n, ROTATION_SEED); // row i is R·e_i, column i of R
    const y = values(n, 3);
    // (Rᵀ y)_i = Σ_j R[j][i] y_j = (R·e_i) · y
    const want = new Float32Array(n);
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) want[i] = want[i]! + rCols[i * n + j]! * y[j]!;
    expect(maxDiff(unrotateRows(y, 1, n), want)).toBeLessThan(1e-5 * maxAbs(want));
  });
});

describe('effectiveWeights of a rotated packing', () => {
  const rows = 24;
  it.each([
    ['int8', 0.01],
    ['int4', 0.12],
  ] as const)('%s approximates W, better than without rotation on outliers', (format, bound) => {
    const cols = 96;
    const w = values(rows * cols, 11);
    const pad = { rows, cols: packedWidth(cols, 'hadamard') };
    const rotated = effectiveWeights(
      packLinear(w, rows, cols, pad, format, 'hadamard'),
      rows,
      cols,
      'hadamard',
    );
    const plain = effectiveWeights(packLinear(w, rows, cols, pad, format, 'none'), rows, cols, 'none');
    expect(relRms(rotated, w)).toBeLessThan(bound);
    expect(relRms(rotated, w)).toBeLessThan(relRms(plain, w));
  });

  it('f32 packing with rotation and padding gives W back (344 columns padded to 384)', () => {
    const cols = 344;
    const w = values(rows * cols, 5);
    const pad = { rows, cols: packedWidth(cols, 'hadamard') };
    expect(pad.cols).toBe(384);
    const eff = effectiveWeights(packLinear(w, rows, cols, pad, 'f32', 'hadamard'), rows, cols, 'hadamard');
    expect(maxDiff(eff, w)).toBeLessThan(1e-5 * maxAbs(w));
  });

  it('roundedThrough rotates *_proj matrices only', () => {
    const w = values(16 * 64, 9);
    const t = { shape: [16, 64], data: w };
    const out = roundedThrough({ 'a.q_proj.weight': t, 'model.embed_tokens.weight': t }, 'int4', 'hadamard');
    const plain = roundedThrough({ e: t }, 'int4', 'none');
    expect(Array.from(out['model.embed_tokens.weight']!.data)).toEqual(Array.from(plain.e!.data));
    expect(maxDiff(out['a.q_proj.weight']!.data, plain.e!.data)).toBeGreaterThan(0);
  });
});

describe('w8a8Inputs', () => {
  it('without rotation, is the per-token int8 rounding of quantizeActRef', () => {
    const x = values(3 * 64, 1);
    const got = w8a8Inputs('none')(x, 64);
    const { q, scale } = quantizeActRef(x, 3, 64);
    expect(Array.from(got)).toEqual(Array.from(q, (v, i) => Math.fround(v * scale[Math.floor(i / 64)]!)));
  });

  it('with rotation, rounds in the rotated basis: error within a step of the rotated row max', () => {
    const n = 96;
    const x = values(2 * n, 4);
    const got = w8a8Inputs('hadamard')(x, n);
    const rx = hadamardRef(x, 2, n, ROTATION_SEED);
    const back = unrotateRows(rx, 2, n);
    // Rounding error per element is at most half a step (max|R·x| / 127 / 2); R is orthogonal, so
    // the error's norm in the original basis is at most √n times that.
    const step = maxAbs(rx) / 127;
    let err = 0;
    for (let i = 0; i < got.length; i++) err += (got[i]! - back[i]!) ** 2;
    expect(Math.sqrt(err)).toBeLessThan(0.5 * step * Math.sqrt(2 * n));
    expect(maxDiff(got, x)).toBeGreaterThan(0); // it did round
    // Rotation shrinks the outliers' effect: the error is smaller than rounding x directly.
    const plain = w8a8Inputs('none')(x, n);
    expect(relRms(got, x)).toBeLessThan(relRms(plain, x));
  });
});
