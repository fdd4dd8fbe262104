/**
 * GGML's lattice i-quants encoded: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (layouts in
 * iquant-decode.ts). Each group of 8 (or 4) values takes the codebook entry of least weighted
 * squared error, found exhaustively (a meet in the middle over the entries' half patterns, with the
 * ksigns types' parity rule); each sub-block's scale comes from trial scales refitted by least
 * squares, the block's d from {@link rankScales}, and each type's `PackBlock` writes its bytes. The
 * weights and their rationale are in iquant-fit.ts; {@link LATTICE_ENCODERS} is read by
 * iquant-encode.ts, which adds IQ4_NL and IQ4_XS.
 */
import { f32ToF16Bits } from '../../gpu/half.js';
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from '../iq-grids.js';
import type { GgmlCodec } from './codec.js';
import { blockWeights, checkQuantize, clamp, putF16Bits, rankScales } from './iquant-fit.js';

const fr = Math.fround;
const QK = 256;

/**
 * A lattice codebook prepared for an exhaustive search: each entry's coordinates as indices into
 * `levels`, and the pattern Σ code_k·L^k of each half of its coordinates, so an entry's error is
 * the sum of two table lookups (a meet in the middle over the L^(dim/2) half patterns).
 */
interface Lattice {
  /** The distinct coordinate values, ascending (IQ2: 8, 25, 43; IQ3_XXS: 4, 12, .., 52, 62; IQ3_S: 1, 3, .., 15). */
  readonly levels: Float64Array;
  /** Coordinates per entry: 8 (IQ2) or 4 (IQ3). */
  readonly dim: number;
  readonly size: number;
  /** [size, dim] level index of each coordinate. */
  readonly codes: Uint8Array;
  /** [size] pattern of coordinates 0 .. dim/2 − 1, and of dim/2 .. dim − 1. */
  readonly lo: Uint16Array;
  readonly hi: Uint16Array;
}

function prepareLattice(bytes: Uint8Array, dim: number): Lattice {
  const levels = Float64Array.from(new Set(bytes)).sort();
  const L = levels.length;
  const size = bytes.length / dim;
  const codes = Uint8Array.from(bytes, (v) => levels.indexOf(v));
  const lo = new Uint16Array(size);
  const hi = new Uint16Array(size);
  const h = dim >> 1;
  for (let e = 0; e < size; e++)
    for (let k = 0, m = 1; k < h; k++, m *= L) {
      lo[e] = lo[e]! + codes[e * dim + k]! * m;
      hi[e] = hi[e]! + codes[e * dim + h + k]! * m;
    }
  return { levels, dim, size, codes, lo, hi };
}

// Scratch of searchGroup: [dim, L] costs (dim·L ≤ 32) and [L^(dim/2)] half sums (≤ 3^4 = 81).
const cost = new Float64Array(32);
const flipCost = new Float64Array(32);
const half1 = new Float64Array(81);
const half2 = new Float64Array(81);
const flip1 = new Float64Array(81);
const flip2 = new Float64Array(81);
// searchGroup's answer: the best entry, and the best entry with one value's sign flipped.
let bestErr = 0;
let bestIndex = 0;
let flipErr = 0;
let flipIndex = 0;

/**
 * Fills `sums[p]` (p < L^h) with Σ_k c[(k0 + k)·L + digit_k(p)], or with their minimum for
 * `min`: built digit by digit in place (digit k has weight L^k; v = 0 is written last, as the
 * others read the shorter sums it overwrites).
 */
function halfSums(sums: Float64Array, c: Float64Array, k0: number, h: number, L: number, min: boolean): void {
  sums[0] = min ? Infinity : 0;
  for (let k = 0, n = 1; k < h; k++, n *= L)
    for (let v = L - 1; v >= 0; v--) {
      const ck = c[(k0 + k) * L + v]!;
      for (let p = 0; p < n; p++) sums[p + v * n] = min ? Math.min(sums[p]!, ck) : sums[p]! + ck;
    }
}

/**
 * The entry of `lat` nearest to |x| of one group (a[at ..], weights w[at ..]) at scale s: sets
 * bestErr/bestIndex, and with `parity` flipErr/flipIndex, the best entry once one value takes the
 * sign opposite to its x (costing 4·w·s·g·|x| more), where a ksigns group has an odd number of
 * negative values. Exhaustive, so exact for the separable objective.
 */
function searchGroup(
  lat: Lattice,
  a: Float64Array,
  w: Float64Array,
  at: number,
  s: number,
  parity: boolean,
): void {
  const { levels, dim, size, lo, hi } = lat;
  const L = levels.length;
  const h = dim >> 1;
  for (let j = 0; j < dim; j++) {
    const aj = a[at + j]!;
    const wj = w[at + j]!;
    for (let v = 0; v < L; v++) {
      const q = s * levels[v]!;
      cost[j * L + v] = wj * (q - aj) * (q - aj);
      flipCost[j * L + v] = 4 * wj * q * aj;
    }
  }
  halfSums(half1, cost, 0, h, L, false);
  halfSums(half2, cost, h, h, L, false);
  let best = Infinity;
  let bi = 0;
  let bestF = Infinity;
  let bf = 0;
  if (!parity) {
    for (let e = 0; e < size; e++) {
      const err = half1[lo[e]!]! + half2[hi[e]!]!;
      if (err < best) {
        best = err;
        bi = e;
      }
    }
  } else {
    halfSums(flip1, flipCost, 0, h, L, true);
    halfSums(flip2, flipCost, h, h, L, true);
    for (let e = 0; e < size; e++) {
      const p = lo[e]!;
      const q = hi[e]!;
      const err = half1[p]! + half2[q]!;
      if (err < best) {
        best = err;
        bi = e;
      }
      if (err < bestF) {
        const f = err + Math.min(flip1[p]!, flip2[q]!);
        if (f < bestF) {
          bestF = f;
          bf = e;
        }
      }
    }
  }
  bestErr = best;
  bestIndex = bi;
  flipErr = bestF;
  flipIndex = bf;
}

/** The coordinate of entry `e` whose sign flip costs least (flipCost of the last searchGroup). */
function cheapestFlip(lat: Lattice, e: number): number {
  const L = lat.levels.length;
  let j0 = 0;
  for (let j = 1; j < lat.dim; j++)
    if (flipCost[j * L + lat.codes[e * lat.dim + j]!]! < flipCost[j0 * L + lat.codes[e * lat.dim + j0]!]!)
      j0 = j;
  return j0;
}

/**
 * Writes a block at `out[at ..]`: f16 bits of d, the 256 / sub 4-bit scales, an index per grid
 * group, and a sign byte per 8 values.
 */
type PackBlock = (
  out: Uint8Array,
  at: number,
  d: number,
  ls: Uint8Array,
  idx: Uint16Array,
  signs: Uint8Array,
) => void;

/** One lattice type: its codebook, sign rule, sub-blocks, scale formula and byte packing. */
interface LatticeType {
  readonly name: string;
  readonly bytes: number;
  readonly lattice: Lattice;
  /** Sign bits through ksigns (7 stored per 8 values, an even number negative). */
  readonly parity: boolean;
  /** Values per 4-bit scale: 32, or 16 (IQ2_XS, IQ2_S). */
  readonly sub: number;
  /** σ² factor of the weights (see iquant-fit.ts). */
  readonly sigma: number;
  /** The decoded sub-block scale db of 4-bit l under d, as ggml rounds it. */
  scale(d: number, l: number): number;
  /** The real l whose (unrounded) scale is t·d. */
  level(t: number): number;
  readonly pack: PackBlock;
}

/** Per-block working state of the lattice encoder. */
interface LatticeBlock {
  readonly a: Float64Array; // [256] |x|
  readonly w: Float64Array; // [256] weights
  readonly neg: Uint8Array; // [32] sign bits of x per 8 values (bit j: x < 0)
}

// encodeSub's sums for the least-squares scale of its codes: Σ w·|x|·q and Σ w·q² (q signed levels).
let sumAQ = 0;
let sumQQ = 0;

/**
 * Codes of the sub-block at value `from` (t.sub values) at scale s, written to idx (per grid
 * group) and signs (per 8 values); returns their weighted squared error and sets sumAQ/sumQQ.
 */
function encodeSub(
  t: LatticeType,
  blk: LatticeBlock,
  from: number,
  s: number,
  idx: Uint16Array,
  signs: Uint8Array,
): number {
  const lat = t.lattice;
  const { a, w, neg } = blk;
  let err = 0;
  sumAQ = 0;
  sumQQ = 0;
  for (let at = from; at < from + t.sub; at += 8) {
    const g = at >> 3;
    const odd = t.parity && popcount8(neg[g]!) % 2 === 1;
    let flipAt = -1; // the value (0..7) given the sign opposite to its x
    if (lat.dim === 8) {
      searchGroup(lat, a, w, at, s, odd);
      idx[g] = odd ? flipIndex : bestIndex;
      err += odd ? flipErr : bestErr;
      if (odd) flipAt = cheapestFlip(lat, flipIndex);
    } else {
      // Two grid groups of 4 share the 8 sign bits: the flip goes to whichever costs less.
      searchGroup(lat, a, w, at, s, odd);
      const e1 = bestIndex;
      const err1 = bestErr;
      const f1 = flipIndex;
      const ferr1 = flipErr;
      const j1 = odd ? cheapestFlip(lat, f1) : 0;
      searchGroup(lat, a, w, at + 4, s, odd);
      if (!odd) {
        idx[2 * g] = e1;
        idx[2 * g + 1] = bestIndex;
        err += err1 + bestErr;
      } else if (ferr1 + bestErr <= err1 + flipErr) {
        idx[2 * g] = f1;
        idx[2 * g + 1] = bestIndex;
        err += ferr1 + bestErr;
        flipAt = j1;
      } else {
        idx[2 * g] = e1;
        idx[2 * g + 1] = flipIndex;
        err += err1 + flipErr;
        flipAt = 4 + cheapestFlip(lat, flipIndex);
      }
    }
    signs[g] = flipAt < 0 ? neg[g]! : neg[g]! ^ (1 << flipAt);
    const shift = lat.dim === 8 ? 3 : 2;
    for (let j = 0; j < 8; j++) {
      const e = idx[(at + j) >> shift]!;
      const q = lat.levels[lat.codes[e * lat.dim + ((at + j) % lat.dim)]!]! * (j === flipAt ? -1 : 1);
      sumAQ += w[at + j]! * a[at + j]! * q;
      sumQQ += w[at + j]! * q * q;
    }
  }
  return err;
}

function popcount8(v: number): number {
  let n = 0;
  for (let b = v; b; b &= b - 1) n++;
  return n;
}

/**
 * The trial scales of the sub-block search: s = max|x| / (top·r), the largest value put at r times
 * the top level, r from 0.55 to 1.2. Each trial is refitted by least squares, so seven do: twice as
 * many changed the error on Gaussian rows by under 0.1%, four raised IQ3_S's by 1%.
 */
const SEARCH_RATIOS = Array.from({ length: 7 }, (_, k) => 0.55 * (1.2 / 0.55) ** (k / 6));

// The Σ w·q² of the codes of the last scale search's answer (how fast its error grows off that scale).
let scaleCurvature = 0;

/**
 * The best continuous scale of the sub-block at `from`: for each trial scale the exact codes, then
 * their least-squares scale; the one of least error (0 for an all-zero sub-block). Sets
 * scaleCurvature.
 */
function subBlockScale(
  t: LatticeType,
  blk: LatticeBlock,
  from: number,
  idx: Uint16Array,
  signs: Uint8Array,
): number {
  let amax = 0;
  let zeroErr = 0;
  for (let i = from; i < from + t.sub; i++) {
    amax = Math.max(amax, blk.a[i]!);
    zeroErr += blk.w[i]! * blk.a[i]! * blk.a[i]!;
  }
  scaleCurvature = 0;
  if (amax === 0) return 0;
  const top = t.lattice.levels.at(-1)!;
  let best = zeroErr;
  let bestS = 0;
  for (const r of SEARCH_RATIOS) {
    encodeSub(t, blk, from, amax / (top * r), idx, signs);
    if (sumQQ <= 0 || sumAQ <= 0) continue;
    const err = zeroErr - (sumAQ * sumAQ) / sumQQ;
    if (err < best) {
      best = err;
      bestS = sumAQ / sumQQ;
      scaleCurvature = sumQQ;
    }
  }
  return bestS;
}

/** Codes the largest sub-block scale is tried at when choosing a lattice block's d. */
const LATTICE_TOPS = Array.from({ length: 12 }, (_, k) => 15 - k);

/** Encodes `x` (whole blocks of 256) as lattice type `t`. */
function quantizeLattice(t: LatticeType, x: Float32Array, importance: Float32Array | undefined): Uint8Array {
  checkQuantize(t.name, QK, x, importance);
  const nSub = QK / t.sub;
  const nIdx = QK / t.lattice.dim;
  const out = new Uint8Array((x.length / QK) * t.bytes);
  const blk: LatticeBlock = { a: new Float64Array(QK), w: new Float64Array(QK), neg: new Uint8Array(32) };
  const scales = new Float64Array(nSub);
  const curvature = new Float64Array(nSub);
  // Codes of the d being tried (cur), of the best d so far (best), and of one trial l (trial).
  let cur = { ls: new Uint8Array(nSub), idx: new Uint16Array(nIdx), signs: new Uint8Array(32) };
  let best = { ls: new Uint8Array(nSub), idx: new Uint16Array(nIdx), signs: new Uint8Array(32) };
  const trial = { idx: new Uint16Array(nIdx), signs: new Uint8Array(32) };
  for (let b = 0; b < x.length / QK; b++) {
    const from = b * QK;
    blockWeights(x, from, QK, importance, t.sigma, t.sub, blk.w);
    blk.neg.fill(0);
    for (let i = 0; i < QK; i++) {
      const v = x[from + i]!;
      blk.a[i] = Math.abs(v);
      if (v < 0) blk.neg[i >> 3] = blk.neg[i >> 3]! | (1 << (i & 7));
    }
    let sMax = 0;
    for (let s = 0; s < nSub; s++) {
      scales[s] = subBlockScale(t, blk, s * t.sub, trial.idx, trial.signs);
      curvature[s] = scaleCurvature;
      sMax = Math.max(sMax, scales[s]!);
    }
    let bestTotal = Infinity;
    let bestD = 0;
    // Under each d tried, each sub-block takes the code on either side of its own scale that
    // decodes with less error, its codes searched again at that exact scale.
    const ds = rankScales(t.name, b, scales, curvature, sMax, LATTICE_TOPS, t.scale, t.level, [0, 15]);
    for (const d of ds) {
      let total = 0;
      for (let s = 0; s < nSub; s++) {
        const l0 = Math.floor(t.level(scales[s]! / d));
        let subBest = Infinity;
        for (let l = clamp(l0, 0, 15); l <= clamp(l0 + 1, 0, 15); l++) {
          const err = encodeSub(t, blk, s * t.sub, t.scale(d, l), trial.idx, trial.signs);
          if (err < subBest) {
            subBest = err;
            cur.ls[s] = l;
            copySub(t, s, trial, cur);
          }
        }
        total += subBest;
      }
      if (total < bestTotal) {
        bestTotal = total;
        bestD = d;
        [cur, best] = [best, cur];
      }
    }
    if (bestD === 0) {
      best.ls.fill(0);
      best.idx.fill(0);
      best.signs.fill(0);
    }
    t.pack(out, b * t.bytes, f32ToF16Bits(bestD), best.ls, best.idx, best.signs);
  }
  return out;
}

/** Copies sub-block s's grid indices and sign bytes from `from` to `to`. */
function copySub(
  t: LatticeType,
  s: number,
  from: { idx: Uint16Array; signs: Uint8Array },
  to: { idx: Uint16Array; signs: Uint8Array },
): void {
  const perIdx = t.sub / t.lattice.dim;
  to.idx.set(from.idx.subarray(s * perIdx, (s + 1) * perIdx), s * perIdx);
  to.signs.set(from.signs.subarray((s * t.sub) >> 3, ((s + 1) * t.sub) >> 3), (s * t.sub) >> 3);
}

// --- The lattice types' scales and packing --------------------------------------------------------

/** IQ2_XXS, IQ2_XS, IQ2_S: db = (d·(0.5 + l))·0.25. */
const iq2Scale = (d: number, l: number) => fr(fr(d * (0.5 + l)) * 0.25);
const iq2Level = (t: number) => 4 * t - 0.5;

function putU32(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 255;
  out[at + 1] = (v >>> 8) & 255;
  out[at + 2] = (v >>> 16) & 255;
  out[at + 3] = v >>> 24;
}

const packIq2xxs: PackBlock = (out, at, d, ls, idx, signs) => {
  putF16Bits(out, at, d);
  for (let i = 0; i < 8; i++) {
    const q = at + 2 + 8 * i;
    for (let l = 0; l < 4; l++) out[q + l] = idx[4 * i + l]!;
    let aux = ls[i]! << 28;
    for (let l = 0; l < 4; l++) aux |= (signs[4 * i + l]! & 127) << (7 * l);
    putU32(out, q + 4, aux >>> 0);
  }
};

const packIq2xs: PackBlock = (out, at, d, ls, idx, signs) => {
  putF16Bits(out, at, d);
  for (let g = 0; g < 32; g++) {
    const q = idx[g]! | ((signs[g]! & 127) << 9);
    out[at + 2 + 2 * g] = q & 255;
    out[at + 3 + 2 * g] = q >> 8;
  }
  for (let i = 0; i < 8; i++) out[at + 66 + i] = ls[2 * i]! | (ls[2 * i + 1]! << 4);
};

const packIq2s: PackBlock = (out, at, d, ls, idx, signs) => {
  putF16Bits(out, at, d);
  for (let g = 0; g < 32; g++) {
    out[at + 2 + g] = idx[g]! & 255;
    out[at + 34 + g] = signs[g]!;
  }
  for (let i = 0; i < 8; i++) {
    let qh = 0;
    for (let l = 0; l < 4; l++) qh |= (idx[4 * i + l]! >> 8) << (2 * l);
    out[at + 66 + i] = qh;
    out[at + 74 + i] = ls[2 * i]! | (ls[2 * i + 1]! << 4);
  }
};

const packIq3xxs: PackBlock = (out, at, d, ls, idx, signs) => {
  putF16Bits(out, at, d);
  for (let k = 0; k < 64; k++) out[at + 2 + k] = idx[k]!;
  for (let i = 0; i < 8; i++) {
    let aux = ls[i]! << 28;
    for (let l = 0; l < 4; l++) aux |= (signs[4 * i + l]! & 127) << (7 * l);
    putU32(out, at + 66 + 4 * i, aux >>> 0);
  }
};

const packIq3s: PackBlock = (out, at, d, ls, idx, signs) => {
  putF16Bits(out, at, d);
  for (let i = 0; i < 8; i++) {
    let qh = 0;
    for (let k = 0; k < 8; k++) {
      out[at + 2 + 8 * i + k] = idx[8 * i + k]! & 255;
      qh |= (idx[8 * i + k]! >> 8) << k;
    }
    out[at + 66 + i] = qh;
  }
  out.set(signs, at + 74);
  for (let i = 0; i < 4; i++) out[at + 106 + i] = ls[2 * i]! | (ls[2 * i + 1]! << 4);
};

// --- The lattice codebooks (src/quant/iq-grids.ts) as bytes ---------------------------------------

/** A grid's coordinates in entry order: byte j of entry i at [i·dim + j] (little-endian words). */
function gridBytes(words: Uint32Array): Uint8Array {
  return Uint8Array.from({ length: 4 * words.length }, (_, b) => (words[b >> 2]! >>> (8 * (b & 3))) & 255);
}

const IQ2XXS_BYTES = /* @__PURE__ */ gridBytes(IQ2XXS_GRID);
const IQ2XS_BYTES = /* @__PURE__ */ gridBytes(IQ2XS_GRID);
const IQ2S_BYTES = /* @__PURE__ */ gridBytes(IQ2S_GRID);
const IQ3XXS_BYTES = /* @__PURE__ */ gridBytes(IQ3XXS_GRID);
const IQ3S_BYTES = /* @__PURE__ */ gridBytes(IQ3S_GRID);

// --- The encoders ----------------------------------------------------------------------------------

const LATTICE_TYPES: readonly (readonly [number, LatticeType])[] = [
  [
    16,
    {
      name: 'IQ2_XXS',
      bytes: 66,
      lattice: /* @__PURE__ */ prepareLattice(IQ2XXS_BYTES, 8),
      parity: true,
      sub: 32,
      sigma: 1,
      scale: iq2Scale,
      level: iq2Level,
      pack: packIq2xxs,
    },
  ],
  [
    17,
    {
      name: 'IQ2_XS',
      bytes: 74,
      lattice: /* @__PURE__ */ prepareLattice(IQ2XS_BYTES, 8),
      parity: true,
      sub: 16,
      sigma: 1,
      scale: iq2Scale,
      level: iq2Level,
      pack: packIq2xs,
    },
  ],
  [
    22,
    {
      name: 'IQ2_S',
      bytes: 82,
      lattice: /* @__PURE__ */ prepareLattice(IQ2S_BYTES, 8),
      parity: false,
      sub: 16,
      sigma: 2,
      scale: iq2Scale,
      level: iq2Level,
      pack: packIq2s,
    },
  ],
  [
    18,
    {
      name: 'IQ3_XXS',
      bytes: 98,
      lattice: /* @__PURE__ */ prepareLattice(IQ3XXS_BYTES, 4),
      parity: true,
      sub: 32,
      sigma: 2,
      scale: (d, l) => fr(fr(d * (0.5 + l)) * 0.5),
      level: (t) => 2 * t - 0.5,
      pack: packIq3xxs,
    },
  ],
  [
    21,
    {
      name: 'IQ3_S',
      bytes: 110,
      lattice: /* @__PURE__ */ prepareLattice(IQ3S_BYTES, 4),
      parity: false,
      sub: 32,
      sigma: 2,
      scale: (d, l) => fr(d * (1 + 2 * l)),
      level: (t) => (t - 1) / 2,
      pack: packIq3s,
    },
  ],
];

/**
 * The lattice i-quant encoders by GGML type id: IQ2_XXS (16), IQ2_XS (17), IQ2_S (22), IQ3_XXS (18)
 * and IQ3_S (21), each `GgmlCodec['quantize']`. Non-finite values and bad importance throw
 * `InvalidInputError`, as does a block scale that overflows f16.
 */
export const LATTICE_ENCODERS: ReadonlyMap<number, GgmlCodec['quantize']> = /* @__PURE__ */ new Map(
  LATTICE_TYPES.map(([id, t]): [number, GgmlCodec['quantize']] => [
    id,
    (x, importance) => quantizeLattice(t, x, importance),
  ]),
);
