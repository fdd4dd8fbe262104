/**
 * GGML's i-quants, the lattice and non-linear block types of llama.cpp: the dequantisation
 * references (bit for bit ggml-quants.c's `dequantize_row_iq*`), encoders that search each group's
 * lattice point exhaustively and each sub-block's scale for the least weighted squared error (with
 * llama.cpp's importance weighting: see "Encoding" below), and the tables a GPU decoder needs.
 * Layouts from ggml-common.h (`block_iq*`); multi-byte fields little-endian.
 *
 * The lattice types store each group of 8 (or 4) values as an index into a fixed codebook of
 * non-negative points (the grids below: byte j of an entry is coordinate j), a sign per value and
 * one 4-bit scale s per sub-block under the block's f16 d. ksigns types store 7 sign bits per 8
 * values; the 8th is their parity (`KSIGNS_IQ2XS`), so a group always has an even number of
 * negative values. A value decodes as (db·g)·±1, db the sub-block's scale, g its grid coordinate.
 *
 *  IQ4_NL  (18 B / 32 values):  f16 d | u8 qs[16]           w = d·K[q], K = IQ4NL_VALUES; value
 *                               j < 16 the low nibble of qs[j], value j + 16 its high nibble
 *  IQ4_XS  (136 B / 256 values): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
 *                               sub-block i of 32: 6-bit ls = nibble (i & 1) of scales_l[i >> 1] |
 *                               bits 2i, 2i + 1 of scales_h << 4; w = (d·(ls − 32))·K[q], nibbles of
 *                               qs[16i ..] as IQ4_NL
 *  IQ2_XXS (66 B / 256 values): f16 d | u32 q[16]            sub-block i of 32: q[2i] = 4 u8 indices
 *                               into IQ2XXS_GRID (byte l: values 32i + 8l ..), q[2i + 1] = 4 × 7 sign
 *                               bits (bits 7l .. 7l + 6, through KSIGNS_IQ2XS) | s << 28;
 *                               db = (d·(0.5 + s))·0.25
 *  IQ2_XS  (74 B / 256 values): f16 d | u16 qs[32] | u8 scales[8]
 *                               qs[4i + l] = 9-bit index into IQ2XS_GRID | 7 sign bits << 9 (values
 *                               32i + 8l ..); scales[i] low nibble the s of groups l = 0, 1, high
 *                               nibble of l = 2, 3; db = (d·(0.5 + s))·0.25
 *  IQ2_S   (82 B / 256 values): f16 d | u8 qs[32] | u8 signs[32] | u8 qh[8] | u8 scales[8]
 *                               10-bit index into IQ2S_GRID of group 4i + l = qs[4i + l] | bits 2l,
 *                               2l + 1 of qh[i] << 8; signs[4i + l] its 8 sign bits (no parity);
 *                               scales and db as IQ2_XS
 *  IQ3_XXS (98 B / 256 values): f16 d | u8 qs[64] | u32 scales_signs[8]
 *                               qs[8i + k] indexes IQ3XXS_GRID (4 values each: 32i + 4k ..);
 *                               scales_signs[i] = 4 × 7 sign bits (per 8 values, as IQ2_XXS) | s << 28;
 *                               db = (d·(0.5 + s))·0.5
 *  IQ3_S   (110 B / 256 values): f16 d | u8 qs[64] | u8 qh[8] | u8 signs[32] | u8 scales[4]
 *                               9-bit index into IQ3S_GRID of group 8i + k = qs[8i + k] | bit k of
 *                               qh[i] << 8; signs[4i + l] the 8 sign bits of values 32i + 8l ..;
 *                               s = nibble (i & 1) of scales[i >> 1]; db = d·(1 + 2s)
 *
 * The lattice types decode through src/quant/lattice.ts (a block less its d is weft's layout of
 * them); the IQ4 decoders here. In both, every f32 product is rounded where ggml's C code rounds it
 * (Math.fround), and a zero d gives −0 under a set sign bit, as C's multiplication by ±1.0f.
 */
import { InvalidInputError } from '../../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';
import { IQ4_VALUES } from '../formats.js';
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from '../iq-grids.js';
import { ksign, latticeBlockWords, latticeDequantize } from '../lattice.js';
import { dataWords, type LatticeFormat, scaleWords } from '../layout.js';
import type { GgmlCodec } from './codec.js';

export { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID };

const fr = Math.fround;
const QK = 256;

function f16At(b: Uint8Array, at: number): number {
  return f16BitsToF32(b[at]! | (b[at + 1]! << 8));
}

/** f32 value of the f16 nearest to `x` (what a stored d decodes as). */
function asF16(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}

// --- Decoding ------------------------------------------------------------------------------------

/**
 * The decoder of a lattice type (`blockBytes` per 256 values): its blocks are weft's layout of
 * `format` once each block's leading f16 d moves to the scales (see `QuantizedMatrix`), so they
 * decode through the GPU kernels' own reference, {@link latticeDequantize}, which follows ggml's
 * `dequantize_row_iq*` product for product (the golden vectors in the tests hold it to gguf-py's).
 */
function latticeDecoder(format: LatticeFormat, blockBytes: number) {
  return (bytes: Uint8Array, count: number): Float32Array => {
    const blocks = count / QK;
    const data = new Uint32Array(dataWords(format, count));
    const scales = new Uint32Array(scaleWords(format, count));
    const codes = new Uint8Array(data.buffer);
    const d = new Uint16Array(scales.buffer);
    const W = 4 * latticeBlockWords(format); // bytes of a block's codes: blockBytes − 2
    for (let s = 0; s < blocks; s++) {
      const at = s * blockBytes;
      d[s] = bytes[at]! | (bytes[at + 1]! << 8);
      codes.set(bytes.subarray(at + 2, at + blockBytes), W * s);
    }
    return count === 0
      ? new Float32Array(0)
      : latticeDequantize({ format, rows: 1, cols: count, data, scales });
  };
}

function dequantizeIq4nl(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let b = 0; b < count / 32; b++) {
    const at = b * 18;
    const d = f16At(bytes, at);
    for (let j = 0; j < 16; j++) {
      const q = bytes[at + 2 + j]!;
      out[b * 32 + j] = fr(d * IQ4NL_VALUES[q & 15]!);
      out[b * 32 + j + 16] = fr(d * IQ4NL_VALUES[q >> 4]!);
    }
  }
  return out;
}

function dequantizeIq4xs(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let b = 0; b < count / QK; b++) {
    const at = b * 136;
    const d = f16At(bytes, at);
    const sh = bytes[at + 2]! | (bytes[at + 3]! << 8);
    for (let i = 0; i < 8; i++) {
      const ls = ((bytes[at + 4 + (i >> 1)]! >> (4 * (i & 1))) & 15) | (((sh >> (2 * i)) & 3) << 4);
      const dl = fr(d * (ls - 32));
      for (let j = 0; j < 16; j++) {
        const q = bytes[at + 8 + 16 * i + j]!;
        out[b * QK + 32 * i + j] = fr(dl * IQ4NL_VALUES[q & 15]!);
        out[b * QK + 32 * i + j + 16] = fr(dl * IQ4NL_VALUES[q >> 4]!);
      }
    }
  }
  return out;
}

// --- Small tables ----------------------------------------------------------------------------------

/**
 * The 16 values of IQ4_NL and IQ4_XS codes (ggml-common.h `kvalues_iq4nl`, llama.cpp, MIT): a
 * non-uniform 4-bit grid, denser near 0, that a code q decodes to as d·K[q].
 */
export const IQ4NL_VALUES: Int8Array = Int8Array.from(IQ4_VALUES);
const IQ4NL_LIST: readonly number[] = [...IQ4NL_VALUES];

/**
 * The 8 sign bits of a ksigns group from its 7 stored ones: bit 7 is their parity, so the group has
 * an even number of negative values (ggml-common.h `ksigns_iq2xs`, llama.cpp, MIT; entry i is
 * i | parity(i) << 7, computed here). Bit j set: value j of the 8 is negative.
 */
export const KSIGNS_IQ2XS: Uint8Array = Uint8Array.from({ length: 128 }, (_, i) => ksign(i));

// --- Encoding ------------------------------------------------------------------------------------
//
// Every encoder minimises Σ w·(x − x̂)² per block with llama.cpp's weights (ggml-quants.c
// `quantize_row_iq*_impl`): w = c·√(σ² + x²), c the column's importance (an imatrix entry; 1
// without one) and σ² the block's mean square (doubled for all but IQ2_XXS and IQ2_XS, as there).
// Without an imatrix llama.cpp weighs IQ3_XXS, IQ3_S and the IQ4 types by x² alone, IQ2_S by
// σ²/4 + x², and refuses IQ2_XXS and IQ2_XS; unit importance is used for all of them here, because
// with an exhaustive search x² leaves small values almost free and doubled IQ3_XXS's unweighted
// error on Gaussian rows (0.34 against 0.18 of the rms; llama.cpp's own IQ3_XXS: 0.21). A
// sub-block whose weights are all 0 is weighed uniformly instead.

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
  /** σ² factor of the weights (see above). */
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

function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, v));
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
/** How many of the ranked d values (see {@link rankScales}) get a full trial. */
const D_TRIALS = 3;

/**
 * The block scales d worth a full trial: d = f16(big / scaleOf(1, top)) for each code in `tops`
 * (the largest sub-block scale `big` at that code), ranked by how far the sub-block scales lie from
 * the scale of their nearest code under d, Σ c_i·(s_i − scaleOf(d, l_i))² (c_i = curvature[i]: the
 * error a scale change adds to codes held fixed), the best D_TRIALS distinct values first. Throws
 * where d overflows f16; leaves out a d that rounds to 0.
 */
function rankScales(
  name: string,
  block: number,
  scales: Float64Array,
  curvature: Float64Array,
  big: number,
  tops: readonly number[],
  scaleOf: (d: number, l: number) => number,
  levelOf: (t: number) => number,
  codes: readonly [number, number],
): number[] {
  const ranked: [number, number][] = [];
  for (const top of big === 0 ? [] : tops) {
    const d = asF16(big / scaleOf(1, top));
    if (!Number.isFinite(d))
      throw new InvalidInputError(`quantize ${name}: block ${block}'s scale ${big} overflows f16`);
    if (d === 0 || ranked.some(([other]) => other === d)) continue;
    let misfit = 0;
    for (let i = 0; i < scales.length; i++) {
      const l = clamp(Math.round(levelOf(scales[i]! / d)), codes[0], codes[1]);
      misfit += curvature[i]! * (scales[i]! - scaleOf(d, l)) ** 2;
    }
    ranked.push([d, misfit]);
  }
  return ranked
    .sort((p, q) => p[1] - q[1])
    .slice(0, D_TRIALS)
    .map(([d]) => d);
}

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

/**
 * Checks `quantize`'s arguments: whole blocks, finite values, and importance (if any) a whole
 * number of rows of non-negative finite weights.
 */
function checkQuantize(
  name: string,
  elems: number,
  x: Float32Array,
  importance: Float32Array | undefined,
): void {
  if (x.length % elems !== 0)
    throw new InvalidInputError(`quantize ${name}: ${x.length} values are not whole blocks of ${elems}`);
  const bad = x.findIndex((v) => !Number.isFinite(v));
  if (bad >= 0) throw new InvalidInputError(`quantize ${name}: x[${bad}] = ${x[bad]} is not finite`);
  if (importance === undefined) return;
  if (importance.length === 0 || x.length % importance.length !== 0)
    throw new InvalidInputError(
      `quantize ${name}: ${x.length} values are not whole rows of the ${importance.length} importance weights`,
    );
  const neg = importance.findIndex((v) => !(v >= 0 && v < Infinity));
  if (neg >= 0)
    throw new InvalidInputError(
      `quantize ${name}: importance[${neg}] = ${importance[neg]} is not a finite weight >= 0`,
    );
}

/**
 * The weights of x[from, from + n) into w (see the comment atop this section); each `sub` values
 * whose weights are all 0 get 1.
 */
function blockWeights(
  x: Float32Array,
  from: number,
  n: number,
  importance: Float32Array | undefined,
  sigma: number,
  sub: number,
  w: Float64Array,
): void {
  let sumX2 = 0;
  for (let i = 0; i < n; i++) sumX2 += x[from + i]! * x[from + i]!;
  const sigma2 = (sigma * sumX2) / n;
  for (let i = 0; i < n; i++) {
    const c = importance ? importance[(from + i) % importance.length]! : 1;
    w[i] = c * Math.sqrt(sigma2 + x[from + i]! * x[from + i]!);
  }
  for (let s = 0; s < n; s += sub) {
    let sum = 0;
    for (let i = s; i < s + sub; i++) sum += w[i]!;
    if (!(sum > 0)) w.fill(1, s, s + sub);
  }
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

function putF16Bits(out: Uint8Array, at: number, bits: number): void {
  out[at] = bits & 255;
  out[at + 1] = bits >> 8;
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

// --- IQ4_NL and IQ4_XS ----------------------------------------------------------------------------

/** Midpoints between consecutive IQ4NL_VALUES: the nearest value's index is how many lie below. */
const IQ4_MIDPOINTS = Float64Array.from({ length: 15 }, (_, k) => (IQ4NL_LIST[k]! + IQ4NL_LIST[k + 1]!) / 2);

function nearestIq4(y: number): number {
  let q = 0;
  while (q < 15 && y > IQ4_MIDPOINTS[q]!) q++;
  return q;
}

/**
 * Codes the largest |x| is put near by the IQ4 scale search (x/s = target): around either end of
 * the table, and around the next values in (a sub-block whose extremes miss the ends).
 */
const IQ4_TARGETS = [
  ...Array.from({ length: 17 }, (_, k) => k - 8).flatMap((k) => [-127 + k, 113 + k]),
  ...Array.from({ length: 7 }, (_, k) => k - 3).flatMap((k) => [-104 + k, 89 + k]),
];

/**
 * The best (signed) scale of the 32 values x[from ..] weighted w[wAt ..]: for each trial scale the
 * nearest codes, then their least-squares scale; the one of least error (0 for all zeros). Sets
 * scaleCurvature.
 */
function iq4Scale(x: Float32Array, from: number, w: Float64Array, wAt: number): number {
  let max = 0;
  let zeroErr = 0;
  for (let j = 0; j < 32; j++) {
    const v = x[from + j]!;
    if (Math.abs(v) > Math.abs(max)) max = v;
    zeroErr += w[wAt + j]! * v * v;
  }
  scaleCurvature = 0;
  if (max === 0) return 0;
  let best = zeroErr;
  let bestS = 0;
  for (const target of IQ4_TARGETS) {
    const id = target / max;
    let sxq = 0;
    let sqq = 0;
    for (let j = 0; j < 32; j++) {
      const v = x[from + j]!;
      const q = IQ4NL_LIST[nearestIq4(v * id)]!;
      sxq += w[wAt + j]! * v * q;
      sqq += w[wAt + j]! * q * q;
    }
    if (sqq <= 0) continue;
    const err = zeroErr - (sxq * sxq) / sqq;
    if (err < best) {
      best = err;
      bestS = sxq / sqq;
      scaleCurvature = sqq;
    }
  }
  return bestS;
}

/**
 * Nearest codes of the 32 values x[from ..] at the decoded scale dl into q[qAt ..]; returns their
 * weighted squared error against the values ggml decodes, fr(dl·K[q]).
 */
function iq4Codes(
  x: Float32Array,
  from: number,
  w: Float64Array,
  wAt: number,
  dl: number,
  q: Uint8Array,
  qAt: number,
): number {
  let err = 0;
  const id = dl === 0 ? 0 : 1 / dl;
  for (let j = 0; j < 32; j++) {
    const v = x[from + j]!;
    const c = dl === 0 ? 8 : nearestIq4(v * id);
    q[qAt + j] = c;
    const e = v - fr(dl * IQ4NL_LIST[c]!);
    err += w[wAt + j]! * e * e;
  }
  return err;
}

function quantizeIq4nl(x: Float32Array, importance: Float32Array | undefined): Uint8Array {
  checkQuantize('IQ4_NL', 32, x, importance);
  const out = new Uint8Array((x.length / 32) * 18);
  const w = new Float64Array(32);
  const q = new Uint8Array(32);
  for (let b = 0; b < x.length / 32; b++) {
    blockWeights(x, 32 * b, 32, importance, 2, 32, w);
    const s = iq4Scale(x, 32 * b, w, 0);
    const d = asF16(s);
    if (!Number.isFinite(d))
      throw new InvalidInputError(`quantize IQ4_NL: block ${b}'s scale ${s} overflows f16`);
    iq4Codes(x, 32 * b, w, 0, d, q, 0);
    putF16Bits(out, 18 * b, f32ToF16Bits(d));
    for (let j = 0; j < 16; j++) out[18 * b + 2 + j] = q[j]! | (q[j + 16]! << 4);
  }
  return out;
}

/** Sub-block codes l (ls − 32) the largest IQ4_XS scale is tried at when choosing d. */
const IQ4XS_TOPS = Array.from({ length: 17 }, (_, k) => 16 + k).flatMap((l) => (l === 32 ? [-l] : [-l, l]));

function quantizeIq4xs(x: Float32Array, importance: Float32Array | undefined): Uint8Array {
  checkQuantize('IQ4_XS', QK, x, importance);
  const out = new Uint8Array((x.length / QK) * 136);
  const w = new Float64Array(QK);
  const scales = new Float64Array(8);
  const curvature = new Float64Array(8);
  const trial = new Uint8Array(32);
  let cur = { l: new Int8Array(8), q: new Uint8Array(QK) };
  let best = { l: new Int8Array(8), q: new Uint8Array(QK) };
  for (let b = 0; b < x.length / QK; b++) {
    const from = b * QK;
    blockWeights(x, from, QK, importance, 2, 32, w);
    let big = 0;
    for (let i = 0; i < 8; i++) {
      scales[i] = iq4Scale(x, from + 32 * i, w, 32 * i);
      curvature[i] = scaleCurvature;
      if (Math.abs(scales[i]!) > Math.abs(big)) big = scales[i]!;
    }
    let bestTotal = Infinity;
    let bestD = 0;
    const ds = rankScales(
      'IQ4_XS',
      b,
      scales,
      curvature,
      big,
      IQ4XS_TOPS,
      (d, l) => fr(d * l),
      (t) => t,
      [-32, 31],
    );
    for (const d of ds) {
      let total = 0;
      for (let i = 0; i < 8; i++) {
        const l0 = Math.floor(scales[i]! / d);
        let subBest = Infinity;
        for (let l = clamp(l0, -32, 31); l <= clamp(l0 + 1, -32, 31); l++) {
          const err = iq4Codes(x, from + 32 * i, w, 32 * i, fr(d * l), trial, 0);
          if (err < subBest) {
            subBest = err;
            cur.l[i] = l;
            cur.q.set(trial, 32 * i);
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
    const at = b * 136;
    if (bestD === 0) {
      best.l.fill(0);
      best.q.fill(8);
    }
    putF16Bits(out, at, f32ToF16Bits(bestD));
    let sh = 0;
    for (let i = 0; i < 8; i++) {
      const ls = best.l[i]! + 32;
      out[at + 4 + (i >> 1)] = out[at + 4 + (i >> 1)]! | ((ls & 15) << (4 * (i & 1)));
      sh |= (ls >> 4) << (2 * i);
      for (let j = 0; j < 16; j++)
        out[at + 8 + 16 * i + j] = best.q[32 * i + j]! | (best.q[32 * i + j + 16]! << 4);
    }
    out[at + 2] = sh & 255;
    out[at + 3] = sh >> 8;
  }
  return out;
}

// --- The codecs ------------------------------------------------------------------------------------

/** Checks `dequantize`'s arguments: a whole number of blocks, and the bytes to hold them. */
function checked(
  name: string,
  elems: number,
  size: number,
  decode: (bytes: Uint8Array, count: number) => Float32Array,
): GgmlCodec['dequantize'] {
  return (bytes, count) => {
    if (
      !Number.isInteger(count) ||
      count < 0 ||
      count % elems !== 0 ||
      bytes.byteLength < (count / elems) * size
    )
      throw new InvalidInputError(
        `dequantize ${name}: ${count} values need whole blocks of ${elems} in ${size} bytes each, got ${bytes.byteLength} bytes`,
      );
    return decode(bytes, count);
  };
}

// --- The lattice codebooks (src/quant/iq-grids.ts) as bytes ----------------------------------------

/** A grid's coordinates in entry order: byte j of entry i at [i·dim + j] (little-endian words). */
function gridBytes(words: Uint32Array): Uint8Array {
  return Uint8Array.from({ length: 4 * words.length }, (_, b) => (words[b >> 2]! >>> (8 * (b & 3))) & 255);
}

const IQ2XXS_BYTES = /* @__PURE__ */ gridBytes(IQ2XXS_GRID);
const IQ2XS_BYTES = /* @__PURE__ */ gridBytes(IQ2XS_GRID);
const IQ2S_BYTES = /* @__PURE__ */ gridBytes(IQ2S_GRID);
const IQ3XXS_BYTES = /* @__PURE__ */ gridBytes(IQ3XXS_GRID);
const IQ3S_BYTES = /* @__PURE__ */ gridBytes(IQ3S_GRID);

// --- The codecs ------------------------------------------------------------------------------------

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
 * The i-quant decoders by GGML type id: IQ2_XXS (16), IQ2_XS (17), IQ3_XXS (18), IQ4_NL (20),
 * IQ3_S (21), IQ2_S (22), IQ4_XS (23). Bad sizes throw {@link InvalidInputError}. Kept apart from
 * the encoders (and every table here marked pure) so that an app that only reads GGUF files, the
 * engine worker, bundles no encoder.
 */
export const IQUANT_DECODERS: ReadonlyMap<number, GgmlCodec['dequantize']> = /* @__PURE__ */ new Map([
  [16, /* @__PURE__ */ checked('IQ2_XXS', QK, 66, /* @__PURE__ */ latticeDecoder('iq2_xxs', 66))],
  [17, /* @__PURE__ */ checked('IQ2_XS', QK, 74, /* @__PURE__ */ latticeDecoder('iq2_xs', 74))],
  [18, /* @__PURE__ */ checked('IQ3_XXS', QK, 98, /* @__PURE__ */ latticeDecoder('iq3_xxs', 98))],
  [20, /* @__PURE__ */ checked('IQ4_NL', 32, 18, dequantizeIq4nl)],
  [21, /* @__PURE__ */ checked('IQ3_S', QK, 110, /* @__PURE__ */ latticeDecoder('iq3_s', 110))],
  [22, /* @__PURE__ */ checked('IQ2_S', QK, 82, /* @__PURE__ */ latticeDecoder('iq2_s', 82))],
  [23, /* @__PURE__ */ checked('IQ4_XS', QK, 136, dequantizeIq4xs)],
]);

/**
 * The i-quant encoders by GGML type id (as {@link IQUANT_DECODERS}). Non-finite values and bad
 * importance throw {@link InvalidInputError}.
 */
export const IQUANT_ENCODERS: ReadonlyMap<number, GgmlCodec['quantize']> = /* @__PURE__ */ new Map([
  ...LATTICE_TYPES.map(([id, t]): [number, GgmlCodec['quantize']] => [
    id,
    (x, importance) => quantizeLattice(t, x, importance),
  ]),
  [20, quantizeIq4nl],
  [23, quantizeIq4xs],
]);

/** Both directions of each i-quant, by GGML type id (tests, and tools that write files). */
export const IQUANT_CODECS: ReadonlyMap<number, GgmlCodec> = /* @__PURE__ */ new Map(
  [...IQUANT_DECODERS].map(([id, dequantize]) => [id, { dequantize, quantize: IQUANT_ENCODERS.get(id)! }]),
);
