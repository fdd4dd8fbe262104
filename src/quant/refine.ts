// Refinement of a calibrated K-quant matrix (int4, int2): after GPTQ has chosen codes on a fixed
// grid, coordinate descent on GPTQ's own objective over the codes, the sub-block scales and mins
// and the super-block D and M together. Every accepted step lowers the objective, so the result is
// never worse than its input; the bytes and the dequantization are the format's, unchanged.
import { InvalidInputError } from '../errors.js';
import {
  f16BitsToF32,
  f32ToF16Bits,
  type KQuantParams,
  kQuantGrid,
  kQuantParams,
  type MatrixGrid,
} from './formats.js';
import { dampedHessian } from './gptq.js';

/** Options of {@link refineKQuant}. */
export interface RefineOptions {
  /** Damping of H, as in `gptqCodes` (the objective is the damped one). Default 0.01. */
  readonly damp?: number;
  /** Most sweeps over codes, sub-blocks and super-blocks. Default 4. */
  readonly rounds?: number;
}

/** A refined matrix: its grid and codes, and the objective before and after. */
export interface Refined {
  readonly grid: MatrixGrid;
  readonly codes: Int32Array;
  readonly before: number;
  readonly after: number;
}

/**
 * Lowers E = Σ_r (w_r − ŵ_r)ᵀ(H + λI)(w_r − ŵ_r) (rows r of w [rows, cols], ŵ the dequantized
 * matrix, H + λI as `dampedHessian`), GPTQ's objective, over everything an int4 or int2 matrix
 * stores, starting from `grid` and `codes` (GPTQ's). Each round sweeps, in a fixed order:
 * 1. every code: q ± 1 where that lowers E (the exact change, from the gradient g = (H + λI)·e);
 * 2. every sub-block: the (sc, mn) of all pairs in range that lowers E most with its codes kept,
 *    ranked by the change's quadratic model (ŵ is linear in a = D·sc and b = M·mn up to one f32
 *    rounding) and accepted only when the exact change is negative;
 * 3. every super-block: (D, M) at the least-squares optimum for its sub-scales and codes, rounded
 *    to f16, and the f16 neighbours of that, accepted likewise.
 * It stops after `rounds` rounds or when a round lowers E by less than 1e-6 of it. Deterministic;
 * E never rises (each accepted step has an exact negative change, summed in f64).
 */
export function refineKQuant(
  w: Float32Array,
  rows: number,
  cols: number,
  hessian: Float64Array,
  grid: MatrixGrid,
  codes: Int32Array,
  options: RefineOptions = {},
): Refined {
  const n = cols;
  const N = rows * cols;
  if (grid.rows !== rows || grid.cols !== cols || w.length !== N || codes.length !== N)
    throw new InvalidInputError(
      `refineKQuant: w (${w.length}), codes (${codes.length}) and a [${grid.rows}, ${grid.cols}] grid for [${rows}, ${cols}]`,
    );
  if (hessian.length !== n * n)
    throw new InvalidInputError(`refineKQuant: hessian has ${hessian.length} elements, need [${n}, ${n}]`);
  const work = startWork(w, rows, cols, hessian, grid, codes, options.damp ?? 0.01);
  const before = objective(work);
  let current = before;
  for (let round = 0; round < (options.rounds ?? 4); round++) {
    sweepCodes(work);
    sweepSubBlocks(work);
    sweepSuperBlocks(work);
    const next = objective(work);
    const gain = current - next;
    current = next;
    if (!(gain > 1e-6 * next)) break;
  }
  return { grid: kQuantGrid(work.p), codes: work.q, before, after: current };
}

/**
 * What one refinement changes in place, and the residual it keeps exact: the K-quant parameters
 * `p` and the codes `q`, D and M as numbers beside their f16 bits, and e = w − ŵ with its gradient
 * g = e·(H + λI), both [rows, n] (E = Σ e·g). Every accepted step goes through {@link apply}.
 */
interface Work {
  /** Columns: H is [n, n]. */
  readonly n: number;
  /** Elements: rows·n. */
  readonly N: number;
  /** H + λI [n, n]. */
  readonly H: Float64Array;
  readonly p: KQuantParams;
  /** The codes [N], each in [lo, hi]. */
  readonly q: Int32Array;
  readonly lo: number;
  readonly hi: number;
  /** f32(D) and f32(M) per super-block, kept beside p.D and p.M. */
  readonly dVal: Float64Array;
  readonly mVal: Float64Array;
  /** log2 of the sub-block size: element i is in sub-block i >> subShift. */
  readonly subShift: number;
  /** e = w − ŵ [rows, n]. */
  readonly e: Float64Array;
  /** g = e·(H + λI) [rows, n]. */
  readonly g: Float64Array;
  /** Scratch of one super-block [256]: the moves of ŵ, the codes as numbers, ones. */
  readonly dv: Float64Array;
  readonly qv: Float64Array;
  readonly ones: Float64Array;
}

/** The {@link Work} of `grid` and `codes`: the parameters copied, e and g computed from scratch. */
function startWork(
  w: Float32Array,
  rows: number,
  n: number,
  hessian: Float64Array,
  grid: MatrixGrid,
  codes: Int32Array,
  damp: number,
): Work {
  const N = rows * n;
  const p = kQuantParams(grid);
  const H = dampedHessian(hessian, n, damp);
  const work: Work = {
    n,
    N,
    H,
    p,
    q: Int32Array.from(codes),
    lo: grid.lo,
    hi: grid.hi,
    dVal: Float64Array.from(p.D, f16BitsToF32),
    mVal: Float64Array.from(p.M, f16BitsToF32),
    subShift: Math.log2(p.sub),
    e: new Float64Array(N),
    g: new Float64Array(N),
    dv: new Float64Array(256),
    qv: new Float64Array(256),
    ones: new Float64Array(256).fill(1),
  };
  const { e, g, q } = work;
  for (let i = 0; i < N; i++) e[i] = w[i]! - value(work, i, q[i]!);
  for (let r = 0; r < rows; r++)
    for (let k = 0; k < n; k++) {
      const ek = e[r * n + k]!;
      if (ek === 0) continue;
      for (let j = 0; j < n; j++) g[r * n + j] = g[r * n + j]! + ek * H[k * n + j]!;
    }
  return work;
}

/** ŵ_i for code `code` under the current parameters: the format's fround(D·sc·q − M·mn). */
function value(work: Work, i: number, code: number): number {
  const { p, dVal, mVal } = work;
  const u = i >> work.subShift;
  const s = i >> 8;
  return Math.fround(dVal[s]! * p.sc[u]! * code - mVal[s]! * p.mn[u]!);
}

/** E = Σ e·g. */
function objective(work: Work): number {
  const { N, e, g } = work;
  let t = 0;
  for (let i = 0; i < N; i++) t += e[i]! * g[i]!;
  return t;
}

/**
 * [xHx, xHy, yHy]: Σ x_a·H[k_a, k_b]·y_b and the same for (x, x) and (y, y), over pairs a, b of
 * [i0, i0 + len) in one row (only those share an H); x and y are indexed from i0.
 */
function quad(
  work: Work,
  i0: number,
  x: Float64Array,
  y: Float64Array,
  len: number,
): [number, number, number] {
  const { n, H } = work;
  let xx = 0;
  let xy = 0;
  let yy = 0;
  // Row by row: the part of [i0, i0 + len) in row r is [a0, a1) (offsets into x and y).
  for (let a0 = 0; a0 < len; ) {
    const r = ((i0 + a0) / n) | 0;
    const a1 = Math.min(len, (r + 1) * n - i0);
    const hBase = -r * n * (n + 1); // H[k_a, k_b] = H[hBase + i_a·n + i_b]
    for (let a = a0; a < a1; a++) {
      const hRow = hBase + (i0 + a) * n + i0;
      let hx = 0;
      let hy = 0;
      for (let b = a0; b < a1; b++) {
        const h = H[hRow + b]!;
        hx += h * x[b]!;
        hy += h * y[b]!;
      }
      xx += x[a]! * hx;
      xy += x[a]! * hy;
      yy += y[a]! * hy;
    }
    a0 = a1;
  }
  return [xx, xy, yy];
}

/** The exact change of E when ŵ_i moves by dv_i for i in [i0, i0 + len) (dv indexed from i0). */
function change(work: Work, i0: number, dv: Float64Array, len: number): number {
  const { g } = work;
  let lin = 0;
  for (let a = 0; a < len; a++) lin += dv[a]! * g[i0 + a]!;
  return -2 * lin + quad(work, i0, dv, dv, len)[0];
}

/** Moves ŵ_i by dv_i for i in [i0, i0 + len): updates e and g (the caller updates p or q). */
function apply(work: Work, i0: number, dv: Float64Array, len: number): void {
  const { n, H, e, g } = work;
  for (let a = 0; a < len; a++) {
    const va = dv[a]!;
    if (va === 0) continue;
    const ia = i0 + a;
    const r = (ia / n) | 0;
    const k = ia - r * n;
    e[ia] = e[ia]! - va;
    for (let j = 0; j < n; j++) g[r * n + j] = g[r * n + j]! - va * H[k * n + j]!;
  }
}

/** Step 1 of a round: each code in turn moves by ±1 where that lowers E (the exact change). */
function sweepCodes(work: Work): void {
  const { n, N, H, q, g, lo, hi, dv } = work;
  for (let i = 0; i < N; i++) {
    const k = i % n;
    const v0 = value(work, i, q[i]!);
    let best = 0;
    let bestCode = q[i]!;
    for (const step of [-1, 1]) {
      const c = q[i]! + step;
      if (c < lo || c > hi) continue;
      const d = value(work, i, c) - v0;
      const delta = -2 * d * g[i]! + d * d * H[k * n + k]!;
      if (delta < best) [best, bestCode] = [delta, c];
    }
    if (bestCode === q[i]) continue;
    dv[0] = value(work, i, bestCode) - v0;
    apply(work, i, dv, 1);
    q[i] = bestCode;
  }
}

/**
 * Step 2 of a round: each sub-block takes the (sc, mn) its quadratic model ranks best (codes
 * kept), if that differs from its own and the exact change of E is negative.
 */
function sweepSubBlocks(work: Work): void {
  const { N, p, q, dVal, mVal, dv } = work;
  for (let u = 0; u < p.sc.length; u++) {
    const i0 = u * p.sub;
    const len = Math.min(p.sub, N - i0);
    if (len <= 0) break;
    const s = i0 >> 8;
    const D = dVal[s]!;
    const M = mVal[s]!;
    const a0 = D * p.sc[u]!;
    const b0 = M * p.mn[u]!;
    const [bsc, bmn] = bestSubScales(work, u, i0, len, D, M);
    if (bsc === p.sc[u] && bmn === p.mn[u]) continue;
    for (let a = 0; a < len; a++) {
      const c = q[i0 + a]!;
      dv[a] = Math.fround(D * bsc * c - M * bmn) - Math.fround(a0 * c - b0);
    }
    if (!(change(work, i0, dv, len) < 0)) continue;
    apply(work, i0, dv, len);
    p.sc[u] = bsc;
    p.mn[u] = bmn;
  }
}

/**
 * The (sc, mn) of sub-block u (elements [i0, i0 + len), super-block scales D, M) whose modelled
 * change of E is least, its own when none is negative. With ŵ_i moving by da·q_i − db the change
 * is Δ = −2(da·Σq g − db·Σg) + da²·qᵀHq − 2·da·db·qᵀH1 + db²·1ᵀH1 (pairs in one row only).
 */
function bestSubScales(
  work: Work,
  u: number,
  i0: number,
  len: number,
  D: number,
  M: number,
): [number, number] {
  const { p, q, g, qv, ones } = work;
  const S = p.maxScale;
  let qg = 0;
  let og = 0;
  for (let a = 0; a < len; a++) {
    qv[a] = q[i0 + a]!;
    qg += qv[a]! * g[i0 + a]!;
    og += g[i0 + a]!;
  }
  const [qq, q1, oo] = quad(work, i0, qv, ones, len);
  const a0 = D * p.sc[u]!;
  const b0 = M * p.mn[u]!;
  let best = 0;
  let bsc = p.sc[u]!;
  let bmn = p.mn[u]!;
  for (let sc = 0; sc <= S; sc++)
    for (let mn = 0; mn <= S; mn++) {
      const da = D * sc - a0;
      const db = M * mn - b0;
      const delta = -2 * (da * qg - db * og) + da * da * qq - 2 * da * db * q1 + db * db * oo;
      if (delta < best) [best, bsc, bmn] = [delta, sc, mn];
    }
  return [bsc, bmn];
}

/**
 * Step 3 of a round: each super-block takes the f16 (D, M) that {@link bestHalves} picks, if that
 * differs from its own and the exact change of E is negative (else its (D, M) are put back).
 */
function sweepSuperBlocks(work: Work): void {
  const { N, p, q, dv } = work;
  for (let s = 0; s < p.D.length; s++) {
    const i0 = 256 * s;
    const len = Math.min(256, N - i0);
    if (len <= 0) break;
    const best = bestHalves(work, s, i0, len);
    if (!best) continue;
    const [bD, bM] = best;
    if (bD === p.D[s] && bM === p.M[s]) continue;
    const old = Float64Array.from({ length: len }, (_, a) => value(work, i0 + a, q[i0 + a]!));
    const [oldD, oldM] = [p.D[s]!, p.M[s]!];
    setHalves(work, s, bD, bM);
    for (let a = 0; a < len; a++) dv[a] = value(work, i0 + a, q[i0 + a]!) - old[a]!;
    if (!(change(work, i0, dv, len) < 0)) {
      setHalves(work, s, oldD, oldM);
      continue;
    }
    apply(work, i0, dv, len);
  }
}

/**
 * The f16 bit patterns (D, M) of super-block s (elements [i0, i0 + len)) that its quadratic model
 * ranks best: ŵ_i = D·α_i − M·β_i with α_i = sc·q_i, β_i = mn of i's sub-block, so E is quadratic
 * in (dD, dM) and its minimum solves [αᵀHα, −αᵀHβ; −αᵀHβ, βᵀHβ]·(dD, dM) = (αᵀg, −βᵀg). That
 * optimum is rounded to f16 and it and its f16 neighbours ranked by the model; the block's own
 * (D, M) when none has a negative change, undefined when the system is singular.
 */
function bestHalves(work: Work, s: number, i0: number, len: number): [number, number] | undefined {
  const { p, q, g, dVal, mVal } = work;
  const nsub = 256 / p.sub;
  const alpha = new Float64Array(len);
  const beta = new Float64Array(len);
  for (let a = 0; a < len; a++) {
    const u = s * nsub + ((a / p.sub) | 0);
    alpha[a] = p.sc[u]! * q[i0 + a]!;
    beta[a] = p.mn[u]!;
  }
  let ag = 0;
  let bg = 0;
  for (let a = 0; a < len; a++) {
    ag += alpha[a]! * g[i0 + a]!;
    bg += beta[a]! * g[i0 + a]!;
  }
  const [aa, ab, bb] = quad(work, i0, alpha, beta, len);
  const det = aa * bb - ab * ab;
  if (!(det > 0)) return undefined;
  const dD = (ag * bb - bg * ab) / det;
  const dM = (ag * ab - bg * aa) / det;
  const D0 = dVal[s]!;
  const M0 = mVal[s]!;
  const Dc = f32ToF16Bits(Math.max(0, D0 + dD));
  const Mc = f32ToF16Bits(Math.max(0, M0 + dM));
  let best = 0;
  let bD = p.D[s]!;
  let bM = p.M[s]!;
  for (const sd of [-1, 0, 1])
    for (const sm of [-1, 0, 1]) {
      const Dh = Dc + sd;
      const Mh = Mc + sm;
      // Non-negative finite halves only (bit patterns 0 .. 0x7bff).
      if (Dh < 0 || Dh > 0x7bff || Mh < 0 || Mh > 0x7bff) continue;
      const x = f16BitsToF32(Dh) - D0;
      const y = f16BitsToF32(Mh) - M0;
      const delta = -2 * (x * ag - y * bg) + x * x * aa - 2 * x * y * ab + y * y * bb;
      if (delta < best) [best, bD, bM] = [delta, Dh, Mh];
    }
  return [bD, bM];
}

/** Sets super-block s's (D, M) to the f16 bit patterns (Dh, Mh), and their values beside them. */
function setHalves(work: Work, s: number, Dh: number, Mh: number): void {
  const { p, dVal, mVal } = work;
  [p.D[s], p.M[s]] = [Dh, Mh];
  [dVal[s], mVal[s]] = [f16BitsToF32(Dh), f16BitsToF32(Mh)];
}
