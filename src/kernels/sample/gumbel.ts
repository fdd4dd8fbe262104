/**
 * Shared Gumbel noise for lossless speculative sampling (ALGORITHMS.md §1), the bit-exact TS twin of
 * the WGSL in sample.wgsl. Noise is a pure function of (seed, absolute position, token id):
 *
 * - key = splitmix64 finalizer of `seed + (position + 1) · 0x9E3779B97F4A7C15` (64-bit, done in u32
 *   pairs so WGSL can do the same), split into Philox key words (lo, hi);
 * - bits = first word of Philox 4x32-10 with counter (token, 0, 0, 0) and that key;
 * - U = ((bits >>> 9) + 0.5) / 2^23, strictly inside (0, 1) and exact in f32. (The 24-bit form
 *   (m + 0.5) / 2^24 needs 25 significant bits and rounds to 1.0 in f32 for m = 2^24 - 1, so weft
 *   keeps the top 23 bits: every U is exactly representable, smallest 2^-24, largest 1 - 2^-24.)
 * - G = -log(-log U), in f32.
 *
 * The u32 bits and U agree bit for bit between TS and WGSL; G goes through `log`, whose last bits
 * differ between JS and GPU math libraries, so GPU/CPU decisions are compared with a tolerance.
 */

const MASK16 = 0xffff;

/** High and low 32 bits of the 64-bit product of two u32, built from 16-bit halves (as WGSL does). */
export function mulhilo(a: number, b: number): [hi: number, lo: number] {
  const a0 = a & MASK16;
  const a1 = a >>> 16;
  const b0 = b & MASK16;
  const b1 = b >>> 16;
  const p00 = a0 * b0;
  const p01 = a0 * b1;
  const p10 = a1 * b0;
  const p11 = a1 * b1;
  // Each partial product is < 2^32 and the middle sum < 3 * 2^16, so plain doubles stay exact.
  const mid = (p00 >>> 16) + (p01 & MASK16) + (p10 & MASK16);
  const hi = (p11 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16)) >>> 0;
  return [hi, Math.imul(a, b) >>> 0];
}

/** 64-bit wrapping multiply of (ahi, alo) by (bhi, blo), in u32 pairs. */
function mul64(ahi: number, alo: number, bhi: number, blo: number): [number, number] {
  const [h, l] = mulhilo(alo, blo);
  const hi = (h + Math.imul(alo, bhi) + Math.imul(ahi, blo)) >>> 0;
  return [hi, l];
}

/** 64-bit wrapping add, in u32 pairs. */
function add64(ahi: number, alo: number, bhi: number, blo: number): [number, number] {
  const lo = (alo + blo) >>> 0;
  const carry = lo < alo >>> 0 ? 1 : 0;
  return [(ahi + bhi + carry) >>> 0, lo];
}

/** (hi, lo) ^ ((hi, lo) >> s) for 0 < s < 32. */
function xorShr64(hi: number, lo: number, s: number): [number, number] {
  return [(hi ^ (hi >>> s)) >>> 0, (lo ^ ((lo >>> s) | (hi << (32 - s)))) >>> 0];
}

/**
 * Philox key words (k0 = low, k1 = high) for a user seed (u32) and an absolute token position (u32):
 * the splitmix64 finalizer of `seed + (position + 1) · 0x9E3779B97F4A7C15`.
 */
export function gumbelKey(seed: number, position: number): [k0: number, k1: number] {
  // (position + 1) as a 64-bit value: position is u32, so + 1 may carry into the high word.
  const [phi, plo] = add64(0, position >>> 0, 0, 1);
  let [hi, lo] = mul64(phi, plo, 0x9e3779b9, 0x7f4a7c15);
  [hi, lo] = add64(hi, lo, 0, seed >>> 0);
  [hi, lo] = xorShr64(hi, lo, 30);
  [hi, lo] = mul64(hi, lo, 0xbf58476d, 0x1ce4e5b9);
  [hi, lo] = xorShr64(hi, lo, 27);
  [hi, lo] = mul64(hi, lo, 0x94d049bb, 0x133111eb);
  [hi, lo] = xorShr64(hi, lo, 31);
  return [lo, hi];
}

/** Philox 4x32-10 (Salmon et al., Random123): four u32 outputs for a counter and a key. */
export function philox4x32(
  ctr: readonly [number, number, number, number],
  key: readonly [number, number],
): [number, number, number, number] {
  let [c0, c1, c2, c3] = ctr;
  let [k0, k1] = key;
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      k0 = (k0 + 0x9e3779b9) >>> 0;
      k1 = (k1 + 0xbb67ae85) >>> 0;
    }
    const [hi0, lo0] = mulhilo(0xd2511f53, c0);
    const [hi1, lo1] = mulhilo(0xcd9e8d57, c2);
    [c0, c1, c2, c3] = [(hi1 ^ c1 ^ k0) >>> 0, lo1, (hi0 ^ c3 ^ k1) >>> 0, lo0];
  }
  return [c0, c1, c2, c3];
}

/** The 32 random bits of token `token` at a key from {@link gumbelKey}. */
export function gumbelBits(key: readonly [number, number], token: number): number {
  return philox4x32([token >>> 0, 0, 0, 0], key)[0];
}

/** U in (0, 1) from random bits: ((bits >>> 9) + 0.5) / 2^23, exact in f32. */
export function uniformFromBits(bits: number): number {
  return ((bits >>> 9) + 0.5) / 8388608;
}

/** Gumbel(0, 1) noise -log(-log U) rounded as f32 arithmetic would (the GPU's log may differ in the last bits). */
export function gumbelFromUniform(u: number): number {
  return Math.fround(-Math.log(Math.fround(-Math.log(u))));
}

/** Gumbel noise G(seed, position, token). */
export function gumbel(seed: number, position: number, token: number): number {
  return gumbelFromUniform(uniformFromBits(gumbelBits(gumbelKey(seed, position), token)));
}

/** Sampling options: temperature plus the truncations of ALGORITHMS.md §1 (0 / 1 / 0 disable them). */
export interface SampleOptions {
  /** Softmax temperature; 0 means greedy (argmax, ties to the lower id). */
  temperature: number;
  /** Keep tokens with fewer than `topK` strictly larger logits; 0 disables. */
  topK?: number;
  /** Keep tokens whose strictly-larger tokens hold less than `topP` of the probability; 1 disables. */
  topP?: number;
  /** Keep tokens with probability ≥ `minP` · max probability; 0 disables. */
  minP?: number;
}

/** Index of the largest value, ties to the lower index (NaN never wins). */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}

/**
 * Which tokens survive top-k / top-p / min-p at temperature T, judged on the unperturbed logits.
 * Each rule keeps an upper set in logit order (ties are kept together), so the result is
 * `logit ≥ threshold`. Probabilities are softmax(ℓ / T) in f64.
 */
export function allowedTokens(logits: ArrayLike<number>, opts: SampleOptions): boolean[] {
  const V = logits.length;
  const invT = Math.fround(1 / opts.temperature);
  const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => logits[b]! - logits[a]!);
  const maxL = logits[order[0]!]!;
  const p = order.map((v) => Math.exp((logits[v]! - maxL) * invT));
  const total = p.reduce((s, x) => s + x, 0);
  const topK = opts.topK ?? 0;
  const topP = opts.topP ?? 1;
  const minP = opts.minP ?? 0;
  const ok = new Array<boolean>(V).fill(false);
  // Walk groups of equal logits from the top; `above` is the count and mass strictly above a group.
  let above = 0;
  let massAbove = 0;
  for (let i = 0; i < V; ) {
    let j = i;
    let mass = 0;
    while (j < V && logits[order[j]!] === logits[order[i]!]) mass += p[j++]!;
    const keep =
      (topK <= 0 || above < topK) && (topP >= 1 || massAbove < topP * total) && (minP <= 0 || p[i]! >= minP);
    if (!keep) break;
    for (let t = i; t < j; t++) ok[order[t]!] = true;
    above += j - i;
    massAbove += mass;
    i = j;
  }
  return ok;
}

/**
 * The reference Gumbel-max sample of one row: argmax over allowed tokens of ℓ_v · (1/T) + G(seed,
 * position, v) in f32, ties to the lower id; temperature 0 is plain argmax. The GPU kernel reaches
 * the same token without sorting (the restricted Gumbel-argmax), which equals this by construction.
 */
export function sampleRef(
  logits: ArrayLike<number>,
  seed: number,
  position: number,
  opts: SampleOptions,
): number {
  if (opts.temperature <= 0) return argmax(logits);
  const invT = Math.fround(1 / opts.temperature);
  const ok = allowedTokens(logits, opts);
  const key = gumbelKey(seed, position);
  let best = -1;
  let bestScore = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < logits.length; v++) {
    if (!ok[v]) continue;
    const s = gumbelScore(logits[v]!, invT, key, v);
    if (best < 0 || s > bestScore) {
      best = v;
      bestScore = s;
    }
  }
  return best;
}

/** ℓ · invT + G in f32, the score the sampler maximises for token `v` at `key`. */
export function gumbelScore(logit: number, invT: number, key: readonly [number, number], v: number): number {
  const g = gumbelFromUniform(uniformFromBits(gumbelBits(key, v)));
  return Math.fround(Math.fround(logit * invT) + g);
}
