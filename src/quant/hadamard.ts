// Hadamard matrices of order K (Sylvester, Paley I/II over GF(q), Kronecker doubling) and the
// randomized orthogonal rotation R = H_n · D / √n with n = K · 2^m (QuaRot-style incoherence).
import { InvalidInputError } from '../errors.js';

/** Orders K (besides powers of two) that {@link hadamardFactor} tries, smallest first. */
export const HADAMARD_ORDERS = [12, 20, 28, 36, 40, 52, 60, 76, 108, 140, 148, 156, 172] as const;

/**
 * A K×K Hadamard matrix (entries ±1, H·Hᵀ = K·I), row-major. K = 1, 2 or a power of two: Sylvester.
 * Otherwise Paley I when q = K − 1 is a prime power ≡ 3 (mod 4); Paley II when q = K/2 − 1 is a
 * prime power ≡ 1 (mod 4); else the Williamson array when first rows of order K/4 are tabulated
 * (156 and 172); else H_2 ⊗ H_{K/2} when K/2 can be built. This covers every order in
 * {@link HADAMARD_ORDERS}; other orders throw {@link InvalidInputError}.
 */
export function hadamardMatrix(K: number): Int8Array {
  const h = build(K);
  if (!h) throw new InvalidInputError(`hadamardMatrix: no construction implemented for order K = ${K}`);
  return h;
}

function build(K: number): Int8Array | undefined {
  if (!Number.isInteger(K) || K < 1) return undefined;
  if (K === 1) return Int8Array.of(1);
  if ((K & (K - 1)) === 0) return kron2(build(K / 2)!, K / 2);
  if (K % 4 !== 0) return undefined;
  const p1 = primePower(K - 1);
  if (p1 && (K - 1) % 4 === 3) return paley1(new GaloisField(p1[0], p1[1]));
  const p2 = primePower(K / 2 - 1);
  if (p2 && (K / 2 - 1) % 4 === 1) return paley2(new GaloisField(p2[0], p2[1]));
  const rows = WILLIAMSON[K / 4];
  if (rows) return williamson(rows);
  const half = build(K / 2);
  return half ? kron2(half, K / 2) : undefined;
}

/**
 * First rows ('+' = 1, '-' = −1) of four symmetric circulant matrices A, B, C, D of order m with
 * A² + B² + C² + D² = 4m·I (Williamson matrices), for the orders no Paley construction reaches:
 * m = 39 (Đoković; listed in Longyear 2013) and m = 43 (Hall 1983). The unit test checks H·Hᵀ = K·I.
 */
const WILLIAMSON: Readonly<Record<number, readonly [string, string, string, string]>> = {
  39: [
    '+++--+-+-----+--++----++--+-----+-+--++',
    '+++--++-+---+-+--+----+--+-+---+-++--++',
    '++++---+--++----+-+--+-+----++--+---+++',
    '+---++-+-+-----+++-++-+++-----+-+-++---',
  ],
  43: [
    '++---++++-+--+--++--------++--+--+-++++---+',
    '+++-+-++--+-+-++++-+----+-++++-+-+--++-+-++',
    '++-++++++----+-+--++-++-++--+-+----++++++-+',
    '+---++--++++-+-+++-++--++-+++-+-++++--++---',
  ],
};

/** Williamson array [[A, B, C, D], [−B, A, −D, C], [−C, D, A, −B], [−D, −C, B, A]] of order 4m. */
function williamson(rows: readonly [string, string, string, string]): Int8Array {
  const m = rows[0].length;
  const first = rows.map((r) => Array.from(r, (c) => (c === '+' ? 1 : -1)));
  // Block (bi, bj) = sign · circulant(first[which]).
  const layout = [
    [0, 1, 2, 3],
    [-1, 0, -3, 2],
    [-2, 3, 0, -1],
    [-3, -2, 1, 0],
  ];
  const n = 4 * m;
  const h = new Int8Array(n * n);
  for (let bi = 0; bi < 4; bi++)
    for (let bj = 0; bj < 4; bj++) {
      const code = layout[bi]![bj]!;
      const sign = code >= 0 ? 1 : -1; // A (index 0) only appears with a + sign

      const row = first[Math.abs(code)]!;
      for (let i = 0; i < m; i++)
        for (let j = 0; j < m; j++) h[(bi * m + i) * n + bj * m + j] = sign * row[(j - i + m) % m]!;
    }
  return h;
}

/** H_2 ⊗ H (order 2k): [[H, H], [H, −H]]. */
function kron2(h: Int8Array, k: number): Int8Array {
  const n = 2 * k;
  const out = new Int8Array(n * n);
  for (let i = 0; i < k; i++)
    for (let j = 0; j < k; j++) {
      const v = h[i * k + j]!;
      out[i * n + j] = v;
      out[i * n + j + k] = v;
      out[(i + k) * n + j] = v;
      out[(i + k) * n + j + k] = -v;
    }
  return out;
}

/** Paley I, q ≡ 3 (mod 4): H = I + [[0, 1ᵀ], [−1, Q]] of order q + 1, Q the Jacobsthal matrix. */
function paley1(f: GaloisField): Int8Array {
  const q = f.q;
  const n = q + 1;
  const h = new Int8Array(n * n);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) {
      let c: number;
      if (i === 0) c = j === 0 ? 0 : 1;
      else if (j === 0) c = -1;
      else c = f.chi(f.sub(i - 1, j - 1));
      h[i * n + j] = c + (i === j ? 1 : 0);
    }
  return h;
}

/**
 * Paley II, q ≡ 1 (mod 4): C = [[0, 1ᵀ], [1, Q]] (symmetric, order q + 1); each 0 becomes
 * [[1, −1], [−1, −1]] and each ±1 becomes ±[[1, 1], [1, −1]], giving order 2(q + 1).
 */
function paley2(f: GaloisField): Int8Array {
  const m = f.q + 1;
  const n = 2 * m;
  const h = new Int8Array(n * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < m; j++) {
      let c: number;
      if (i === 0) c = j === 0 ? 0 : 1;
      else if (j === 0) c = 1;
      else c = f.chi(f.sub(i - 1, j - 1));
      const block = c === 0 ? [1, -1, -1, -1] : [c, c, c, -c];
      h[2 * i * n + 2 * j] = block[0]!;
      h[2 * i * n + 2 * j + 1] = block[1]!;
      h[(2 * i + 1) * n + 2 * j] = block[2]!;
      h[(2 * i + 1) * n + 2 * j + 1] = block[3]!;
    }
  return h;
}

/** [p, k] when q = p^k for a prime p, else undefined. */
function primePower(q: number): [number, number] | undefined {
  if (q < 2) return undefined;
  for (let p = 2; p * p <= q; p++) {
    if (q % p !== 0) continue;
    let k = 0;
    let r = q;
    while (r % p === 0) {
      r /= p;
      k++;
    }
    return r === 1 ? [p, k] : undefined;
  }
  return [q, 1];
}

/**
 * GF(p^k) for k <= 3: element e is the polynomial with base-p digits of e as coefficients, products
 * reduced by a monic irreducible polynomial (for degree 2 or 3, one without roots). Only what the
 * Paley constructions need: subtraction and the quadratic character.
 */
class GaloisField {
  readonly q: number;
  private readonly squares: Set<number>;

  constructor(
    private readonly p: number,
    private readonly k: number,
  ) {
    if (k > 3) throw new InvalidInputError(`GF(${p}^${k}): only degrees up to 3 are implemented`);
    this.q = p ** k;
    const modulus = k === 1 ? [] : this.irreducible();
    this.squares = new Set();
    for (let a = 1; a < this.q; a++) this.squares.add(this.mul(a, a, modulus));
  }

  /** χ(a): 0 for 0, 1 for a nonzero square, −1 otherwise. */
  chi(a: number): number {
    if (a === 0) return 0;
    return this.squares.has(a) ? 1 : -1;
  }

  sub(a: number, b: number): number {
    const da = this.digits(a);
    const db = this.digits(b);
    return this.number(da.map((v, i) => (v - db[i]! + this.p) % this.p));
  }

  private digits(a: number): number[] {
    const d: number[] = [];
    for (let i = 0; i < this.k; i++) {
      d.push(a % this.p);
      a = Math.floor(a / this.p);
    }
    return d;
  }

  private number(d: number[]): number {
    return d.reduceRight((acc, v) => acc * this.p + v, 0);
  }

  /** a · b reduced by x^k = −(c_0 + c_1 x + ... + c_{k−1} x^{k−1}) (modulus = [c_0, ..., c_{k−1}]). */
  private mul(a: number, b: number, modulus: number[]): number {
    const { p, k } = this;
    const da = this.digits(a);
    const db = this.digits(b);
    const prod = new Array<number>(2 * k - 1).fill(0);
    for (let i = 0; i < k; i++)
      for (let j = 0; j < k; j++) prod[i + j] = (prod[i + j]! + da[i]! * db[j]!) % p;
    for (let d = 2 * k - 2; d >= k; d--) {
      const c = prod[d]!;
      prod[d] = 0;
      for (let i = 0; i < k; i++) prod[d - k + i] = (((prod[d - k + i]! - c * modulus[i]!) % p) + p) % p;
    }
    return this.number(prod.slice(0, k));
  }

  /** Coefficients [c_0..c_{k−1}] of a monic polynomial of degree k (2 or 3) with no root in GF(p). */
  private irreducible(): number[] {
    const { p, k } = this;
    for (let code = 0; code < p ** k; code++) {
      const c = this.digits(code);
      let root = false;
      for (let x = 0; x < p && !root; x++) {
        let v = 1;
        for (let i = k - 1; i >= 0; i--) v = (v * x + c[i]!) % p; // Horner on x^k + c_{k−1}x^{k−1} + ...
        root = v === 0;
      }
      if (!root) return c;
    }
    throw new InvalidInputError(`GF(${p}^${k}): no irreducible polynomial found`);
  }
}

/**
 * Splits n = K · 2^m with K = 1 when n is a power of two, else the smallest K of
 * {@link HADAMARD_ORDERS} that works (so 40 · 2^m resolves to 20 · 2^(m+1)). The offline and online
 * sides both call this, so they always use the same matrix.
 */
export function hadamardFactor(n: number): { K: number; P: number } {
  if (!Number.isInteger(n) || n < 1)
    throw new InvalidInputError(`hadamardFactor: n = ${n} must be a positive integer`);
  if ((n & (n - 1)) === 0) return { K: 1, P: n };
  for (const K of HADAMARD_ORDERS) {
    const P = n / K;
    if (Number.isInteger(P) && (P & (P - 1)) === 0 && build(K)) return { K, P };
  }
  throw new InvalidInputError(`hadamardFactor: n = ${n} is not K · 2^m for a buildable K`);
}

/** Random ±1 signs D [n] from `seed` (splitmix32: one output per element, sign from its top bit). */
export function hadamardSigns(n: number, seed: number): Float32Array {
  const d = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    z ^= z >>> 16;
    d[i] = z >>> 31 ? -1 : 1;
  }
  return d;
}

/**
 * Reference of the online rotation: each row x [n] of x [M, n] becomes R·x = H_n (D x) / √n, with
 * H_n = H_K ⊗ H_P computed as butterflies within each block of P, then the K×K product across
 * blocks, in f32 in the GPU kernel's order. When P > `maxBlock` the kernel treats H_K ⊗ H_{P/maxBlock}
 * as its K matrix (same H_n); pass the same value to reproduce its order exactly.
 */
export function hadamardRef(
  x: Float32Array,
  M: number,
  n: number,
  seed: number,
  maxBlock = 4096,
): Float32Array {
  if (x.length !== M * n)
    throw new InvalidInputError(`hadamardRef: x has ${x.length} elements for [${M}, ${n}]`);
  const plan = hadamardPlan(n, maxBlock);
  const signs = hadamardSigns(n, seed);
  const { P, Kb, hb, scale } = plan;
  const y = new Float32Array(M * n);
  const t = new Float32Array(n);
  for (let r = 0; r < M; r++) {
    for (let i = 0; i < n; i++) t[i] = x[r * n + i]! * signs[i]!;
    blockButterflies(t, P, Kb);
    for (let a = 0; a < Kb; a++)
      for (let b = 0; b < P; b++) {
        let acc = 0;
        if (Kb === 1) acc = t[b]!;
        else for (let c = 0; c < Kb; c++) acc = Math.fround(acc + hb[a * Kb + c]! * t[c * P + b]!);
        y[r * n + a * P + b] = Math.fround(acc * scale);
      }
  }
  return y;
}

/**
 * In place, the unscaled natural-order Walsh–Hadamard butterflies H_P on each of the Kb blocks of P
 * consecutive elements of `t` (stage h pairs i with i + h), in the GPU kernel's order. A
 * Float32Array rounds every stage to f32 as the kernel does; a Float64Array keeps f64.
 */
export function blockButterflies(t: Float32Array | Float64Array, P: number, Kb: number): void {
  for (let a = 0; a < Kb; a++)
    for (let h = 1; h < P; h *= 2)
      for (let j = 0; j < P / 2; j++) {
        const i = a * P + Math.floor(j / h) * 2 * h + (j % h);
        const u = t[i]!;
        const v = t[i + h]!;
        t[i] = u + v;
        t[i + h] = u - v;
      }
}

/**
 * How the GPU applies H_n: blocks of P ≤ maxBlock elements get butterflies, then the Kb×Kb ±1 matrix
 * hb = H_K ⊗ H_{2^m / P} mixes blocks; scale = fround(1/√n).
 */
export function hadamardPlan(
  n: number,
  maxBlock = 4096,
): { K: number; P: number; Kb: number; hb: Int8Array; scale: number } {
  const { K, P: full } = hadamardFactor(n);
  const P = Math.min(full, maxBlock);
  const Kb = n / P;
  let hb = hadamardMatrix(K);
  for (let k = K; k < Kb; k *= 2) hb = kron2Right(hb, k);
  return { K, P, Kb, hb, scale: Math.fround(1 / Math.sqrt(n)) };
}

/** H ⊗ H_2 (order 2k): entry [2i + u, 2j + v] = H[i, j] · H_2[u, v]. */
function kron2Right(h: Int8Array, k: number): Int8Array {
  const n = 2 * k;
  const out = new Int8Array(n * n);
  for (let i = 0; i < k; i++)
    for (let j = 0; j < k; j++)
      for (let u = 0; u < 2; u++)
        for (let v = 0; v < 2; v++) out[(2 * i + u) * n + 2 * j + v] = h[i * k + j]! * (u & v ? -1 : 1);
  return out;
}

/**
 * Offline input-side rotation: returns W' = W · Rᵀ [N, K] for W [N, K], so that W·x = W'·(R·x).
 * Each row of W is rotated by R (row r of W·Rᵀ is R · W[r]ᵀ).
 */
export function rotateWeightsIn(w: Float32Array, N: number, K: number, seed: number): Float32Array {
  if (w.length !== N * K)
    throw new InvalidInputError(`rotateWeightsIn: w has ${w.length} elements for [${N}, ${K}]`);
  return hadamardRef(w, N, K, seed);
}

/**
 * Offline output-side rotation: returns W' = R · W [N, K] for W [N, K], so that W'·x = R·(W·x)
 * (a layer whose output feeds a rotated stream).
 */
export function rotateWeightsOut(w: Float32Array, N: number, K: number, seed: number): Float32Array {
  if (w.length !== N * K)
    throw new InvalidInputError(`rotateWeightsOut: w has ${w.length} elements for [${N}, ${K}]`);
  const cols = transpose(w, N, K); // [K, N]: rotate each column of W as a row
  return transpose(hadamardRef(cols, K, N, seed), K, N);
}

function transpose(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}
