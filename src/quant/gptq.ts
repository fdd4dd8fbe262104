// Calibrated rounding of one linear's weights (GPTQ): codes chosen column by column so that the
// layer's output error on calibration inputs, not the weight error, is small. The scales come from
// the caller's grid and stay fixed; only the integer codes are chosen here.
import { InvalidInputError } from '../errors.js';

/**
 * The scales a weight matrix is rounded onto, fixed before any code is chosen: flat element
 * i = r·cols + k dequantizes to fround(scaleAt(i)·q − offsetAt(i)) for an integer code q in
 * [lo, hi]. A structural type: the round-to-nearest grid of a weight format (`gridOf` in
 * kernels/matmul/quant) satisfies it, and so does any small grid a test builds.
 */
export interface RoundingGrid {
  readonly lo: number;
  readonly hi: number;
  scaleAt(i: number): number;
  offsetAt(i: number): number;
}

/** Options of {@link gptqCodes}. */
export interface GptqOptions {
  /** Damping λ added to H's diagonal, as a fraction of its mean over live columns. Default 0.01. */
  readonly damp?: number;
  /** Columns per lazy batch update (a speed knob; the codes do not depend on it). Default 32. */
  readonly blockSize?: number;
  /**
   * Order the columns are rounded in: `'natural'` (default) or `'energy'`, by falling H_kk (the
   * paper's act-order), which helps most at low bits.
   */
  readonly order?: 'natural' | 'energy';
}

/**
 * GPTQ (Frantar, Ashkboos, Hoefler, Alistarh: "GPTQ: Accurate Post-Training Quantization for
 * Generative Pre-trained Transformers", arXiv 2210.17323): the integer codes [rows, cols] of
 * w [rows, cols] on `grid` that keep the output error ‖(W − Ŵ)X‖² small for the calibration inputs
 * X behind `hessian` = H = Σ x xᵀ [cols, cols] (f64, in the basis w multiplies, so padded and rotated
 * when the packing is). The method, in f64 and deterministic:
 * 1. Columns with H_kk = 0 never see a non-zero input ("dead"): H_kk is set to 1, so they round to
 *    nearest and spread no error. λ = damp · mean(live H_kk) is added to the diagonal.
 * 2. U = the upper Cholesky factor of H⁻¹ (H⁻¹ = UᵀU).
 * 3. Columns k = 0, 1, ... in order: q = clamp(round((w_k + offset) / scale), lo, hi) on the
 *    current (already corrected) column, e = (w_k − deq(q)) / U_kk, and every later column takes
 *    w_j −= e · U_kj: the optimal response of the unquantized columns to column k's rounding error
 *    (the OBS update), so later columns absorb what earlier ones lost.
 * Updates past the current block of `blockSize` columns are applied once per block (the paper's
 * lazy batches); each row is independent, so this only reorders the same sums. With H = I (no
 * correlations) U is diagonal, nothing spreads, and the codes are exactly round-to-nearest's.
 * Ties round up (Math.round); a zero scale takes the code nearest 0.
 */
export function gptqCodes(
  w: Float32Array,
  rows: number,
  cols: number,
  hessian: Float64Array,
  grid: RoundingGrid,
  options: GptqOptions = {},
): Int32Array {
  const damp = options.damp ?? 0.01;
  const B = options.blockSize ?? 32;
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1 || w.length !== rows * cols)
    throw new InvalidInputError(`gptqCodes: w has ${w.length} elements for [${rows}, ${cols}]`);
  if (hessian.length !== cols * cols)
    throw new InvalidInputError(`gptqCodes: hessian has ${hessian.length} elements, need [${cols}, ${cols}]`);
  const { lo, hi } = grid;
  if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo > hi)
    throw new InvalidInputError(`gptqCodes: code range [${lo}, ${hi}] must be integers with lo <= hi`);
  if (!(damp >= 0)) throw new InvalidInputError(`gptqCodes: damp ${damp} must be >= 0`);
  if (!Number.isInteger(B) || B < 1)
    throw new InvalidInputError(`gptqCodes: blockSize ${B} must be a positive integer`);

  // Column order: natural, or by falling energy H_kk (GPTQ's "act-order"): the columns whose
  // rounding matters most go first, while the most columns remain to absorb their error. perm[k] is
  // the original column at position k; W and H are permuted, the grid and the codes are not.
  const perm = Array.from({ length: cols }, (_, k) => k);
  if (options.order === 'energy')
    perm.sort((a, b) => hessian[b * cols + b]! - hessian[a * cols + a]! || a - b);
  const H = new Float64Array(cols * cols);
  for (let a = 0; a < cols; a++)
    for (let b = 0; b < cols; b++) H[a * cols + b] = hessian[perm[a]! * cols + perm[b]!]!;
  const U = inverseCholeskyUpper(H, cols, damp); // [cols, cols], in permuted order
  const W = new Float64Array(rows * cols); // [rows, cols] permuted, corrected as columns are rounded
  for (let r = 0; r < rows; r++) for (let k = 0; k < cols; k++) W[r * cols + k] = w[r * cols + perm[k]!]!;
  const codes = new Int32Array(rows * cols);
  const err = new Float64Array(rows * B); // [rows, B]: scaled errors e of the current block
  for (let b0 = 0; b0 < cols; b0 += B) {
    const b1 = Math.min(b0 + B, cols);
    for (let r = 0; r < rows; r++) {
      const row = r * cols;
      for (let k = b0; k < b1; k++) {
        const x = W[row + k]!;
        const i = row + perm[k]!; // the element's flat index in the (unpermuted) matrix
        const scale = grid.scaleAt(i);
        const offset = grid.offsetAt(i);
        const q = nearestCode(x, scale, offset, lo, hi);
        codes[i] = q;
        const e = (x - Math.fround(scale * q - offset)) / U[k * cols + k]!;
        err[r * B + k - b0] = e;
        // Within the block, at once: the columns after k that are still to be rounded.
        const u = k * cols;
        for (let j = k + 1; j < b1; j++) W[row + j] = W[row + j]! - e * U[u + j]!;
      }
    }
    // The lazy batch: W[:, b1:] −= Err[:, block] · U[block, b1:], while U's block rows are in cache.
    for (let r = 0; r < rows; r++) {
      const row = r * cols;
      for (let k = b0; k < b1; k++) {
        const e = err[r * B + k - b0]!;
        if (e === 0) continue;
        const u = k * cols;
        for (let j = b1; j < cols; j++) W[row + j] = W[row + j]! - e * U[u + j]!;
      }
    }
  }
  return codes;
}

/** The code in [lo, hi] nearest to w on a grid point: clamp(round((w + offset) / scale)). */
function nearestCode(w: number, scale: number, offset: number, lo: number, hi: number): number {
  const q = scale === 0 ? 0 : Math.round((w + offset) / scale);
  return Math.min(Math.max(q, lo), hi);
}

/**
 * U [n, n], upper triangular with (H + λI)⁻¹ = UᵀU, for H [n, n] symmetric positive semi-definite:
 * dead columns (H_kk = 0) get H_kk = 1, then λ = damp · mean of the live diagonal. Three plain
 * O(n³) steps in f64: Cholesky H = LLᵀ, H⁻¹ = L⁻ᵀL⁻¹, Cholesky H⁻¹ = L₂L₂ᵀ, U = L₂ᵀ.
 */
function inverseCholeskyUpper(hessian: Float64Array, n: number, damp: number): Float64Array {
  const a = dampedHessian(hessian, n, damp);
  choleskyLower(a, n, 'H');
  const inv = inverseFromCholesky(a, n);
  choleskyLower(inv, n, 'H⁻¹');
  const u = new Float64Array(n * n);
  for (let i = 0; i < n; i++) for (let j = i; j < n; j++) u[i * n + j] = inv[j * n + i]!;
  return u;
}

/**
 * The matrix GPTQ works with, H + λI [n, n] (a copy): dead columns (H_kk = 0) get H_kk = 1, then
 * λ = damp · the mean of the live diagonal is added to every diagonal entry. ‖(W − Ŵ)ᵀ‖² in this
 * metric, Σ_r (w_r − ŵ_r)ᵀ(H + λI)(w_r − ŵ_r), is the objective GPTQ lowers (and `refineKQuant`).
 */
export function dampedHessian(hessian: Float64Array, n: number, damp: number): Float64Array {
  const a = Float64Array.from(hessian);
  let live = 0;
  let sum = 0;
  for (let k = 0; k < n; k++) {
    const d = a[k * n + k]!;
    if (d === 0) a[k * n + k] = 1;
    else {
      live++;
      sum += d;
    }
  }
  const lambda = damp * (live > 0 ? sum / live : 1);
  for (let k = 0; k < n; k++) a[k * n + k] = a[k * n + k]! + lambda;
  return a;
}

/**
 * In place, the lower Cholesky factor L of a [n, n] (a = LLᵀ; the strict upper triangle is zeroed).
 * Throws when a pivot is not positive: the matrix is not positive definite (H not PSD, or no damping).
 */
function choleskyLower(a: Float64Array, n: number, what: string): void {
  for (let j = 0; j < n; j++) {
    const rj = j * n;
    let d = a[rj + j]!;
    for (let k = 0; k < j; k++) d -= a[rj + k]! * a[rj + k]!;
    if (!(d > 0))
      throw new InvalidInputError(`gptqCodes: ${what} is not positive definite (pivot ${j} is ${d})`);
    const l = Math.sqrt(d);
    a[rj + j] = l;
    for (let i = j + 1; i < n; i++) {
      const ri = i * n;
      let s = a[ri + j]!;
      for (let k = 0; k < j; k++) s -= a[ri + k]! * a[rj + k]!;
      a[ri + j] = s / l;
    }
    for (let i = 0; i < j; i++) a[i * n + j] = 0;
  }
}

/** (LLᵀ)⁻¹ [n, n] from the lower factor L: M = L⁻¹ by forward substitution, then MᵀM. */
function inverseFromCholesky(l: Float64Array, n: number): Float64Array {
  // Row i of M = L⁻¹: M_ij = −(Σ_{j ≤ k < i} L_ik M_kj) / L_ii for j < i, M_ii = 1 / L_ii; summed a
  // row of M at a time so every inner loop reads memory in order.
  const m = new Float64Array(n * n);
  for (let i = 0; i < n; i++) {
    const ri = i * n;
    for (let k = 0; k < i; k++) {
      const lik = l[ri + k]!;
      if (lik === 0) continue;
      const rk = k * n;
      for (let j = 0; j <= k; j++) m[ri + j] = m[ri + j]! + lik * m[rk + j]!;
    }
    const inv = 1 / l[ri + i]!;
    for (let j = 0; j < i; j++) m[ri + j] = -m[ri + j]! * inv;
    m[ri + i] = inv;
  }
  // (MᵀM)_ij = Σ_{k ≥ max(i, j)} M_ki M_kj; fill the upper triangle and mirror it.
  const out = new Float64Array(n * n);
  for (let k = 0; k < n; k++) {
    const rk = k * n;
    for (let i = 0; i <= k; i++) {
      const mki = m[rk + i]!;
      if (mki === 0) continue;
      const ri = i * n;
      for (let j = i; j <= k; j++) out[ri + j] = out[ri + j]! + mki * m[rk + j]!;
    }
  }
  for (let i = 0; i < n; i++) for (let j = 0; j < i; j++) out[i * n + j] = out[j * n + i]!;
  return out;
}
