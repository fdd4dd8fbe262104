// The calibration statistic of one linear input: H = Σ x xᵀ over calibration tokens, in the basis the
// packed weights multiply (zero-padded to the packed width, Hadamard-rotated when the packing is).
// `gptqCodes` (quant/gptq) reads it; `collectHessians` (model/calibrate) fills it from a forward pass.
import { InvalidInputError } from '../errors.js';
import { hadamardRef } from './hadamard.js';
import { packedWidth, ROTATION_SEED, type Rotation, zeroPad } from './pack.js';

/**
 * A running sum H = Σ_t x_t x_tᵀ [n, n] (f64) of the rows x_t [width] of a linear's input, taken in
 * the basis `packLinear` quantizes in: each row is zero-padded to n = `packedWidth(width, rotate)`
 * and, when `rotate` is `'hadamard'`, rotated by R (`hadamardRef` with {@link ROTATION_SEED}, the
 * activations the GPU multiplies), so H is the Hessian of ‖(W·Rᵀ − Ŵ)(R·x)‖² in Ŵ. Products of f32
 * inputs are exact in f64 and summed in f64; only the upper triangle is accumulated.
 */
export class HessianSum {
  /** Side of H: the packed width. */
  readonly n: number;
  /** Rows added so far. */
  tokens = 0;
  /** [n, n]; the upper triangle (i ≤ j) holds the sums, the rest is scratch. */
  private readonly sum: Float64Array;

  constructor(
    /** Width of the linear's input rows, before padding. */
    readonly width: number,
    readonly rotate: Rotation,
  ) {
    this.n = packedWidth(width, rotate);
    this.sum = new Float64Array(this.n * this.n);
  }

  /** Adds the rows of x [T, width]. */
  add(x: Float32Array): void {
    const { n, width } = this;
    const T = x.length / width;
    if (!Number.isInteger(T))
      throw new InvalidInputError(`HessianSum.add: x has ${x.length} elements, not rows of ${width}`);
    let m = zeroPad(x, T, width, T, n); // [T, n]
    if (this.rotate === 'hadamard') m = hadamardRef(m, T, n, ROTATION_SEED);
    // Columns of m as rows of xt [n, T], so every dot product below reads memory in order.
    const xt = new Float64Array(n * T);
    for (let t = 0; t < T; t++) for (let i = 0; i < n; i++) xt[i * T + t] = m[t * n + i]!;
    addGram(this.sum, xt, n, T);
    this.tokens += T;
  }

  /** H [n, n], symmetric: a fresh copy of the sums so far. */
  matrix(): Float64Array {
    const { n } = this;
    const h = new Float64Array(n * n);
    for (let i = 0; i < n; i++)
      for (let j = i; j < n; j++) {
        const s = this.sum[i * n + j]!;
        h[i * n + j] = s;
        h[j * n + i] = s;
      }
    return h;
  }
}

/**
 * sum[i, j] += Σ_t xt[i, t]·xt[j, t] for every i ≤ j (xt [n, T], n a multiple of 4, as packed widths
 * are). Tiles of 2 rows i × 4 rows j keep 8 sums side by side, each loaded value feeding 2 or 4 of
 * them; a tile with j0 = ⌊i0 / 4⌋·4 also writes a few entries below the diagonal, which nothing reads.
 */
function addGram(sum: Float64Array, xt: Float64Array, n: number, T: number): void {
  for (let i0 = 0; i0 < n; i0 += 2) {
    const a0 = i0 * T;
    const a1 = a0 + T;
    for (let j0 = i0 - (i0 % 4); j0 < n; j0 += 4) {
      const b0 = j0 * T;
      const b1 = b0 + T;
      const b2 = b1 + T;
      const b3 = b2 + T;
      let s00 = 0;
      let s01 = 0;
      let s02 = 0;
      let s03 = 0;
      let s10 = 0;
      let s11 = 0;
      let s12 = 0;
      let s13 = 0;
      for (let t = 0; t < T; t++) {
        const u = xt[a0 + t]!;
        const v = xt[a1 + t]!;
        const p = xt[b0 + t]!;
        const q = xt[b1 + t]!;
        const r = xt[b2 + t]!;
        const s = xt[b3 + t]!;
        s00 += u * p;
        s01 += u * q;
        s02 += u * r;
        s03 += u * s;
        s10 += v * p;
        s11 += v * q;
        s12 += v * r;
        s13 += v * s;
      }
      const r0 = i0 * n + j0;
      const r1 = r0 + n;
      sum[r0] = sum[r0]! + s00;
      sum[r0 + 1] = sum[r0 + 1]! + s01;
      sum[r0 + 2] = sum[r0 + 2]! + s02;
      sum[r0 + 3] = sum[r0 + 3]! + s03;
      sum[r1] = sum[r1]! + s10;
      sum[r1 + 1] = sum[r1 + 1]! + s11;
      sum[r1 + 2] = sum[r1 + 2]! + s12;
      sum[r1 + 3] = sum[r1 + 3]! + s13;
    }
  }
}
