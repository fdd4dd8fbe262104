/**
 * GGML's i-quants encoded: the IQ4_NL and IQ4_XS encoders, and the map of all seven encoders
 * ({@link IQUANT_ENCODERS}: these two and the lattice types' of iquant-lattice.ts) that
 * `quantizeGgml` routes to. Each sub-block's scale is tried against targets for its largest value
 * and refitted by least squares, the codes are the nearest of `IQ4NL_VALUES` (a non-uniform grid),
 * and IQ4_XS chooses its d from the sub-block scales as the lattice types do (iquant-fit.ts, which
 * also holds the weights). Layouts in iquant-decode.ts.
 */
import { InvalidInputError } from '../../errors.js';
import { f32ToF16Bits } from '../../gpu/half.js';
import type { GgmlCodec } from './codec.js';
import { IQ4NL_VALUES, IQUANT_DECODERS } from './iquant-decode.js';
import { asF16, blockWeights, checkQuantize, clamp, putF16Bits, rankScales } from './iquant-fit.js';
import { LATTICE_ENCODERS } from './iquant-lattice.js';

const fr = Math.fround;
const QK = 256;
const IQ4NL_LIST: readonly number[] = [...IQ4NL_VALUES];

// The Σ w·q² of the codes of the last scale search's answer (how fast its error grows off that scale).
let scaleCurvature = 0;

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

/**
 * The i-quant encoders by GGML type id (as {@link IQUANT_DECODERS}). Non-finite values and bad
 * importance throw {@link InvalidInputError}.
 */
export const IQUANT_ENCODERS: ReadonlyMap<number, GgmlCodec['quantize']> = /* @__PURE__ */ new Map([
  ...LATTICE_ENCODERS,
  [20, quantizeIq4nl],
  [23, quantizeIq4xs],
]);

/** Both directions of each i-quant, by GGML type id (tests, and tools that write files). */
export const IQUANT_CODECS: ReadonlyMap<number, GgmlCodec> = /* @__PURE__ */ new Map(
  [...IQUANT_DECODERS].map(([id, dequantize]) => [id, { dequantize, quantize: IQUANT_ENCODERS.get(id)! }]),
);
