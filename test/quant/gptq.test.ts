import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.js';
import { dequantize, encode, gridOf, kQuantParams } from '../../src/quant/formats.js';
import { dampedHessian, gptqCodes, type RoundingGrid } from '../../src/quant/gptq.js';
import { refineKQuant } from '../../src/quant/refine.js';
import { randomF32, rng } from '../helpers/random.js';

// GPTQ (src/quant/gptq.ts) on small random linears: round-to-nearest when inputs are uncorrelated,
// a lower output error than round-to-nearest when they are correlated, codes in range, the same
// codes for every lazy-batch size, and agreement with the textbook recursion it is a fast form of.

const ROWS = 12;
const COLS = 48;
const GROUP = 16;

/** Symmetric grid with `bits`-bit codes, one scale max|w| / hi per GROUP weights of a row. */
function symmetricGrid(w: Float32Array, bits: number, shrink = 1): RoundingGrid {
  const hi = 2 ** (bits - 1) - 1;
  const scales = new Float32Array(w.length / GROUP);
  for (let g = 0; g < scales.length; g++) {
    let m = 0;
    for (let i = g * GROUP; i < (g + 1) * GROUP; i++) m = Math.max(m, Math.abs(w[i]!));
    scales[g] = (m / hi) * shrink;
  }
  return { lo: -hi - 1, hi, scaleAt: (i) => scales[Math.floor(i / GROUP)]!, offsetAt: () => 0 };
}

/** The grid code nearest to x at element i, written out independently of src/quant/gptq.ts. */
function nearestCode(x: number, grid: RoundingGrid, i: number): number {
  return Math.min(Math.max(Math.round((x + grid.offsetAt(i)) / grid.scaleAt(i)), grid.lo), grid.hi);
}

/** Round-to-nearest codes of w on a grid. */
function nearest(w: Float32Array, grid: RoundingGrid): Int32Array {
  return Int32Array.from(w, (x, i) => nearestCode(x, grid, i));
}

/**
 * x [T, COLS]: three shared factors (their mix into the columns fixed by `mixSeed`) plus a little
 * noise, so the columns are strongly correlated; `drawSeed` draws the tokens.
 */
function correlatedInputs(T: number, mixSeed: number, drawSeed = mixSeed): Float32Array {
  const factors = 3;
  const mix = randomF32(factors * COLS, mixSeed);
  const z = randomF32(T * factors, drawSeed + 1);
  const noise = randomF32(T * COLS, drawSeed + 2, 0.1);
  const x = new Float32Array(T * COLS);
  for (let t = 0; t < T; t++)
    for (let k = 0; k < COLS; k++) {
      let s = noise[t * COLS + k]!;
      for (let f = 0; f < factors; f++) s += z[t * factors + f]! * mix[f * COLS + k]!;
      x[t * COLS + k] = s;
    }
  return x;
}

/** H = Σ_t x_t x_tᵀ [COLS, COLS] in f64. */
function gram(x: Float32Array): Float64Array {
  const T = x.length / COLS;
  const h = new Float64Array(COLS * COLS);
  for (let t = 0; t < T; t++)
    for (let i = 0; i < COLS; i++)
      for (let j = 0; j < COLS; j++) h[i * COLS + j] = h[i * COLS + j]! + x[t * COLS + i]! * x[t * COLS + j]!;
  return h;
}

/** ‖(W − Ŵ)Xᵀ‖²: the output error over the inputs x [T, COLS], summed directly over tokens. */
function outputError(w: Float32Array, codes: Int32Array, grid: RoundingGrid, x: Float32Array): number {
  const T = x.length / COLS;
  let total = 0;
  for (let r = 0; r < ROWS; r++)
    for (let t = 0; t < T; t++) {
      let y = 0;
      for (let k = 0; k < COLS; k++) {
        const i = r * COLS + k;
        const d = w[i]! - Math.fround(grid.scaleAt(i) * codes[i]! - grid.offsetAt(i));
        y += d * x[t * COLS + k]!;
      }
      total += y * y;
    }
  return total;
}

/**
 * The textbook form (Optimal Brain Quantization, as the GPTQ paper states it before its Cholesky
 * reformulation): keep the inverse F of the damped H over the columns not yet rounded; round column k,
 * move the rest by −(w_k − ŵ_k)/F_kk · F_{k,:}, then remove k from F by Gaussian elimination.
 */
function textbookGptq(w: Float32Array, h: Float64Array, grid: RoundingGrid): Int32Array {
  const n = COLS;
  const a = Float64Array.from(h);
  let mean = 0;
  for (let k = 0; k < n; k++) mean += a[k * n + k]! / n;
  for (let k = 0; k < n; k++) a[k * n + k] = a[k * n + k]! + 0.01 * mean;
  const f = invert(a, n);
  const W = Float64Array.from(w);
  const codes = new Int32Array(w.length);
  for (let k = 0; k < n; k++) {
    const d = f[k * n + k]!;
    for (let r = 0; r < ROWS; r++) {
      const i = r * n + k;
      const q = nearestCode(W[i]!, grid, i);
      codes[i] = q;
      const e = (W[i]! - Math.fround(grid.scaleAt(i) * q - grid.offsetAt(i))) / d;
      for (let j = k + 1; j < n; j++) W[r * n + j] = W[r * n + j]! - e * f[k * n + j]!;
    }
    for (let i = k + 1; i < n; i++)
      for (let j = k + 1; j < n; j++) f[i * n + j] = f[i * n + j]! - (f[i * n + k]! * f[k * n + j]!) / d;
  }
  return codes;
}

/** Inverse of a symmetric positive definite [n, n] matrix by Gauss–Jordan elimination. */
function invert(a: Float64Array, n: number): Float64Array {
  const m = Float64Array.from(a);
  const inv = new Float64Array(n * n);
  for (let i = 0; i < n; i++) inv[i * n + i] = 1;
  for (let p = 0; p < n; p++) {
    const d = m[p * n + p]!;
    for (let j = 0; j < n; j++) {
      m[p * n + j] = m[p * n + j]! / d;
      inv[p * n + j] = inv[p * n + j]! / d;
    }
    for (let i = 0; i < n; i++) {
      if (i === p) continue;
      const c = m[i * n + p]!;
      for (let j = 0; j < n; j++) {
        m[i * n + j] = m[i * n + j]! - c * m[p * n + j]!;
        inv[i * n + j] = inv[i * n + j]! - c * inv[p * n + j]!;
      }
    }
  }
  return inv;
}

describe('gptqCodes', () => {
  const w = randomF32(ROWS * COLS, 1);

  it('with uncorrelated inputs (H = I, or any diagonal H) returns exactly round-to-nearest', () => {
    const grid = symmetricGrid(w, 4);
    const identity = new Float64Array(COLS * COLS);
    for (let k = 0; k < COLS; k++) identity[k * COLS + k] = 1;
    expect(Array.from(gptqCodes(w, ROWS, COLS, identity, grid))).toEqual(Array.from(nearest(w, grid)));
    const next = rng(2);
    const diagonal = new Float64Array(COLS * COLS);
    for (let k = 0; k < COLS; k++) diagonal[k * COLS + k] = k % 7 === 3 ? 0 : 0.1 + 10 * next();
    expect(Array.from(gptqCodes(w, ROWS, COLS, diagonal, grid))).toEqual(Array.from(nearest(w, grid)));
  });

  it('lowers the output error ‖(W − Ŵ)X‖² below round-to-nearest on correlated inputs', () => {
    for (const bits of [2, 3, 4]) {
      const grid = symmetricGrid(w, bits);
      const x = correlatedInputs(400, 10 + bits);
      const codes = gptqCodes(w, ROWS, COLS, gram(x), grid);
      const rtn = nearest(w, grid);
      expect(outputError(w, codes, grid, x)).toBeLessThan(0.5 * outputError(w, rtn, grid, x));
      // Also on fresh inputs from the same distribution (same mix, new draws): it did not overfit.
      const fresh = correlatedInputs(400, 10 + bits, 1000 + bits);
      expect(outputError(w, codes, grid, fresh)).toBeLessThan(0.5 * outputError(w, rtn, grid, fresh));
    }
  });

  it("in act-order ('energy': columns by falling H_kk) rounds diagonal H to nearest, lowers correlated error, and keeps the grid's indexing", () => {
    const grid = symmetricGrid(w, 2);
    const next = rng(3);
    const diagonal = new Float64Array(COLS * COLS);
    for (let k = 0; k < COLS; k++) diagonal[k * COLS + k] = 0.1 + 10 * next();
    expect(Array.from(gptqCodes(w, ROWS, COLS, diagonal, grid, { order: 'energy' }))).toEqual(
      Array.from(nearest(w, grid)),
    );
    const x = correlatedInputs(400, 21);
    // Unequal column energies, so the order differs from the natural one.
    for (let t = 0; t < 400; t++)
      for (let k = 0; k < COLS; k++) x[t * COLS + k] = x[t * COLS + k]! * (1 + (k % 5));
    const h = gram(x);
    const ordered = gptqCodes(w, ROWS, COLS, h, grid, { order: 'energy' });
    const natural = gptqCodes(w, ROWS, COLS, h, grid);
    expect(Array.from(ordered)).not.toEqual(Array.from(natural));
    expect(outputError(w, ordered, grid, x)).toBeLessThan(0.5 * outputError(w, nearest(w, grid), grid, x));
    for (const blockSize of [1, 7, 100])
      expect(Array.from(gptqCodes(w, ROWS, COLS, h, grid, { order: 'energy', blockSize }))).toEqual(
        Array.from(ordered),
      );
  });

  it('keeps every code in [lo, hi], also when the grid is too narrow and codes clamp', () => {
    const grid = symmetricGrid(w, 2, 0.5); // scales halved: the largest weights fall off the grid
    const x = correlatedInputs(200, 5);
    const codes = gptqCodes(w, ROWS, COLS, gram(x), grid);
    expect(Math.min(...codes)).toBe(grid.lo);
    expect(Math.max(...codes)).toBe(grid.hi);
    for (const q of codes) expect(q >= grid.lo && q <= grid.hi && Number.isInteger(q)).toBe(true);
  });

  it('is deterministic, and gives the same codes for every lazy-batch size', () => {
    const grid = symmetricGrid(w, 3);
    const h = gram(correlatedInputs(300, 7));
    const codes = Array.from(gptqCodes(w, ROWS, COLS, h, grid));
    expect(Array.from(gptqCodes(w, ROWS, COLS, h, grid))).toEqual(codes);
    for (const blockSize of [1, 5, 16, 48, 100])
      expect(Array.from(gptqCodes(w, ROWS, COLS, h, grid, { blockSize }))).toEqual(codes);
  });

  it('matches the textbook recursion with explicit inverse updates', () => {
    const grid = symmetricGrid(w, 3);
    const h = gram(correlatedInputs(300, 9));
    expect(Array.from(gptqCodes(w, ROWS, COLS, h, grid))).toEqual(Array.from(textbookGptq(w, h, grid)));
  });

  it('rejects mismatched shapes and a bad code range, naming the values', () => {
    const grid = symmetricGrid(w, 4);
    const h = new Float64Array(COLS * COLS);
    expect(() => gptqCodes(w, ROWS, COLS + 1, h, grid)).toThrow(InvalidInputError);
    expect(() => gptqCodes(w, ROWS, COLS, h.subarray(1), grid)).toThrow(/hessian has 2303 elements/);
    expect(() => gptqCodes(w, ROWS, COLS, h, { ...grid, lo: 3, hi: 2 })).toThrow(/\[3, 2\]/);
  });
});

/** Σ_r (w_r − ŵ_r)ᵀ A (w_r − ŵ_r) over rows of `cols`, written out directly (A [cols, cols]). */
function weightedError(w: Float32Array, what: Float32Array, cols: number, a: Float64Array): number {
  let total = 0;
  for (let r = 0; r < w.length / cols; r++)
    for (let i = 0; i < cols; i++)
      for (let j = 0; j < cols; j++)
        total +=
          (w[r * cols + i]! - what[r * cols + i]!) *
          a[i * cols + j]! *
          (w[r * cols + j]! - what[r * cols + j]!);
  return total;
}

describe('refineKQuant', () => {
  // Shapes: whole super-blocks per row; a row width that is not a multiple of 256 (super-blocks
  // span rows); int4 at 48 columns (its sub-blocks of 32 span rows too); and flat padding.
  const cases = [
    { format: 'int2', rows: 6, cols: 256 },
    { format: 'int2', rows: 5, cols: 80 },
    { format: 'int4', rows: 7, cols: 48 },
    { format: 'int4', rows: 3, cols: 256 },
  ] as const;
  for (const { format, rows, cols } of cases)
    it(`(${format} [${rows}, ${cols}]) never raises the damped output error it minimises, and reports it exactly`, () => {
      const seed = rows * 1000 + cols;
      const w = randomF32(rows * cols, seed);
      // Correlated inputs with uneven column energies, as real activations have.
      const T = 3 * cols;
      const z = randomF32(T * 4, seed + 1);
      const mix = randomF32(4 * cols, seed + 2);
      const noise = randomF32(T * cols, seed + 3, 0.2);
      const h = new Float64Array(cols * cols);
      const x = new Float32Array(cols);
      for (let t = 0; t < T; t++) {
        for (let k = 0; k < cols; k++) {
          let v = noise[t * cols + k]!;
          for (let f = 0; f < 4; f++) v += z[t * 4 + f]! * mix[f * cols + k]!;
          x[k] = v * (1 + (k % 3));
        }
        for (let i = 0; i < cols; i++)
          for (let j = 0; j < cols; j++) h[i * cols + j] = h[i * cols + j]! + x[i]! * x[j]!;
      }
      const importance = Float32Array.from({ length: cols }, (_, k) => h[k * cols + k]!);
      const grid = gridOf(w, rows, cols, format, importance);
      const codes = gptqCodes(w, rows, cols, h, grid, { order: 'energy' });
      const damped = dampedHessian(h, cols, 0.01);
      const start = weightedError(w, dequantize(encode(grid, codes)), cols, damped);
      const refined = refineKQuant(w, rows, cols, h, grid, codes);
      const end = weightedError(w, dequantize(encode(refined.grid, refined.codes)), cols, damped);
      expect(refined.before).toBeCloseTo(start, 6);
      expect(refined.after).toBeCloseTo(end, 6);
      expect(end).toBeLessThanOrEqual(start);
      // On these inputs it finds something (int2, with the coarser grid: at least 2% lower).
      expect(end).toBeLessThan(format === 'int2' ? 0.98 * start : start);
      for (const q of refined.codes) expect(q >= grid.lo && q <= grid.hi).toBe(true);
      // Deterministic, and a second refinement from its own result cannot raise the error either.
      const again = refineKQuant(w, rows, cols, h, grid, codes);
      expect(Array.from(again.codes)).toEqual(Array.from(refined.codes));
      expect(Array.from(again.grid.scales)).toEqual(Array.from(refined.grid.scales));
      const twice = refineKQuant(w, rows, cols, h, refined.grid, refined.codes);
      // (Up to the f64 rounding of summing the error afresh rather than step by step.)
      expect(twice.after).toBeLessThanOrEqual(refined.after * (1 + 1e-12));
      expect(kQuantParams(twice.grid).format).toBe(format);
    });

  it('rejects mismatched shapes', () => {
    const w = randomF32(4 * 64, 9);
    const grid = gridOf(w, 4, 64, 'int2');
    const codes = new Int32Array(4 * 64);
    expect(() => refineKQuant(w, 4, 64, new Float64Array(63 * 63), grid, codes)).toThrow(/hessian has 3969/);
    expect(() => refineKQuant(w, 4, 64, new Float64Array(64 * 64), grid, codes.subarray(1))).toThrow(
      InvalidInputError,
    );
  });
});
