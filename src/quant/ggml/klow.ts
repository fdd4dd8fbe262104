/**
 * GGML's 2- and 3-bit K-quants, Q2_K and Q3_K: the dequantisation references (bit for bit
 * ggml-quants.c's `dequantize_row_q2_K` / `dequantize_row_q3_K`), encoders that search each
 * sub-block's scale (and Q2_K's min) for the least weighted squared error, and the field readers a
 * lossless GPU repack needs. Layouts from ggml-common.h (`block_q2_K`, `block_q3_K`); multi-byte
 * fields little-endian. Both hold 256 values as 16 sub-blocks of 16 (sub-block s = values
 * 16s .. 16s + 15), and both spread a value's 2 low bits the same way: value e = 128n + 32j + l
 * (n < 2, j < 4, l < 32) is bits 2j, 2j + 1 of qs[32n + l].
 *
 *  Q2_K (84 B / 256 values):  u8 scales[16] | u8 qs[64] | f16 d | f16 dmin
 *                             scales[s] = sc | m << 4 (4-bit scale and min of sub-block s);
 *                             w = (d·sc)·q − dmin·m, q = the 2-bit code 0..3
 *  Q3_K (110 B / 256 values): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d
 *                             6-bit scale sc of sub-block s: low 4 bits the low nibble of scales[s]
 *                             (s < 8) or the high nibble of scales[s − 8], high 2 bits bits
 *                             2(s >> 2), 2(s >> 2) + 1 of scales[8 + (s & 3)];
 *                             w = (d·(sc − 32))·q, q = raw − 4 in −4..3, raw = the 2 low bits from
 *                             qs | bit (4n + j) of hmask[l] << 2 (a set bit means no −4)
 *
 * In ggml's f32 arithmetic every product here is exact (an f16 times a ≤ 6-bit integer, then times
 * a ≤ 3-bit one, stays within 24 bits), so Q3_K rounds nothing and Q2_K rounds once, at its
 * subtraction; the decoders still round each step to f32 where the C code does.
 */
import { InvalidInputError } from '../../errors.js';
import { f16BitsToF32, f32ToF16Bits } from '../../gpu/half.js';
import type { GgmlCodec } from './codec.js';

const fr = Math.fround;

/** Values and bytes of a Q2_K and a Q3_K block. */
const QK = 256;
const Q2K_BYTES = 84;
const Q3K_BYTES = 110;

function f16At(b: Uint8Array, at: number): number {
  return f16BitsToF32(b[at]! | (b[at + 1]! << 8));
}

function putF16(b: Uint8Array, at: number, bits: number): void {
  b[at] = bits & 0xff;
  b[at + 1] = bits >> 8;
}

/** Byte of `qs` and bit shift holding the 2 low bits of value e (the layout both types share). */
function lowAt(e: number): [byte: number, shift: number] {
  return [32 * (e >> 7) + (e & 31), 2 * ((e >> 5) & 3)];
}

/** The 256 2-bit codes (0..3) of the Q2_K block at `at`, in value order: w = d·sc·code − dmin·m. */
export function q2kCodes(bytes: Uint8Array, at: number, out: Uint8Array): void {
  for (let e = 0; e < QK; e++) {
    const [byte, shift] = lowAt(e);
    out[e] = (bytes[at + 16 + byte]! >> shift) & 3;
  }
}

/**
 * The 256 raw 3-bit codes (0..7) of the Q3_K block at `at`, in value order: the 2 low bits from
 * qs and the hmask bit as bit 2, so the signed code is q = raw − 4 (llama.cpp subtracts 4 where the
 * hmask bit is clear).
 */
export function q3kCodes(bytes: Uint8Array, at: number, out: Uint8Array): void {
  for (let e = 0; e < QK; e++) {
    const [byte, shift] = lowAt(e);
    const high = (bytes[at + (e & 31)]! >> ((e >> 5) & 7)) & 1;
    out[e] = ((bytes[at + 32 + byte]! >> shift) & 3) | (high << 2);
  }
}

/**
 * The 16 signed sub-scales of the Q3_K block at `at`: each 6-bit field minus 32 (in −32..31), so
 * sub-block s decodes as d · out[s] · q. Unpacks the 12 bytes as the header says.
 */
export function q3kScales(bytes: Uint8Array, at: number, out: Int8Array = new Int8Array(16)): Int8Array {
  const sc = at + 96;
  for (let s = 0; s < 16; s++) {
    const low = s < 8 ? bytes[sc + s]! & 15 : bytes[sc + s - 8]! >> 4;
    const high = (bytes[sc + 8 + (s & 3)]! >> (2 * (s >> 2))) & 3;
    out[s] = (low | (high << 4)) - 32;
  }
  return out;
}

function dequantizeQ2K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const codes = new Uint8Array(QK);
  for (let b = 0; b < count / QK; b++) {
    const at = b * Q2K_BYTES;
    const d = f16At(bytes, at + 80);
    const dmin = f16At(bytes, at + 82);
    q2kCodes(bytes, at, codes);
    for (let s = 0; s < 16; s++) {
      const sm = bytes[at + s]!;
      const dl = fr(d * (sm & 15));
      const ml = fr(dmin * (sm >> 4));
      for (let l = 0; l < 16; l++) out[b * QK + 16 * s + l] = fr(fr(dl * codes[16 * s + l]!) - ml);
    }
  }
  return out;
}

function dequantizeQ3K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const codes = new Uint8Array(QK);
  const scales = new Int8Array(16);
  for (let b = 0; b < count / QK; b++) {
    const at = b * Q3K_BYTES;
    const d = f16At(bytes, at + 108);
    q3kCodes(bytes, at, codes);
    q3kScales(bytes, at, scales);
    for (let s = 0; s < 16; s++) {
      const dl = fr(d * scales[s]!);
      for (let l = 0; l < 16; l++) out[b * QK + 16 * s + l] = fr(dl * (codes[16 * s + l]! - 4));
    }
  }
  return out;
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, v));
}

/**
 * The scale s (through zero) and integer codes `L` in [lo, hi] that minimise Σ w·(s·L − x)² over
 * x[from, from + n): a grid of inverse scales around the one mapping the value of largest
 * magnitude to the longer end of the code range, each with its least-squares s; then alternating
 * nearest codes and least-squares s while the error drops; then moving single codes one step where
 * that lowers it (the idea of llama.cpp's make_q3_quants). Returns s (0 and zero codes for an
 * all-zero x); `L` gets the codes at [from, from + n).
 */
function fitScale(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  from: number,
  n: number,
  lo: number,
  hi: number,
  L: Int8Array,
): number {
  let pivot = 0;
  for (let i = from; i < from + n; i++) if (Math.abs(x[i]!) > Math.abs(pivot)) pivot = x[i]!;
  if (Math.abs(pivot) < 1e-30) {
    L.fill(0, from, from + n);
    return 0;
  }
  const top = -lo >= hi ? lo : hi;
  // Error = Σwx² − sxl²/sll at the least-squares s = sxl/sll: the best codes maximise sxl²/sll.
  let best = -1;
  let scale = pivot / top;
  const trial = new Int8Array(n);
  const codesFor = (inv: number, into: Int8Array, off: number) => {
    let sxl = 0;
    let sll = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(Math.round(inv * x[from + i]!), lo, hi);
      into[off + i] = l;
      sxl += w[from + i]! * x[from + i]! * l;
      sll += w[from + i]! * l * l;
    }
    return [sxl, sll] as const;
  };
  for (let k = -9; k <= 9; k++) {
    const inv = (top + Math.sign(top) * 0.1 * k) / pivot;
    const [sxl, sll] = codesFor(inv, trial, 0);
    if (sll > 0 && (sxl * sxl) / sll > best) {
      best = (sxl * sxl) / sll;
      scale = sxl / sll;
      L.set(trial, from);
    }
  }
  if (best < 0) {
    // Every weight zero: any codes do; take the nominal grid point.
    codesFor(top / pivot, L, from);
    return scale;
  }
  for (let iter = 0; iter < 8 && scale !== 0; iter++) {
    const [sxl, sll] = codesFor(1 / scale, trial, 0);
    if (!(sll > 0 && (sxl * sxl) / sll > best)) break;
    best = (sxl * sxl) / sll;
    scale = sxl / sll;
    L.set(trial, from);
  }
  // Single codes one step up or down where that raises sxl²/sll: the alternation above moves every
  // code at once and stops at its first fixed point.
  let sxl = 0;
  let sll = 0;
  for (let i = from; i < from + n; i++) {
    sxl += w[i]! * x[i]! * L[i]!;
    sll += w[i]! * L[i]! * L[i]!;
  }
  for (let pass = 0; pass < 4; pass++) {
    let moved = false;
    for (let i = from; i < from + n; i++) {
      const wi = w[i]!;
      const l = L[i]!;
      for (const m of [l - 1, l + 1]) {
        if (m < lo || m > hi) continue;
        const sx2 = sxl + wi * x[i]! * (m - l);
        const sl2 = sll + wi * (m * m - l * l);
        if (sl2 > 0 && sx2 * sx2 * sll > sxl * sxl * sl2 * (1 + 1e-12)) {
          L[i] = m;
          sxl = sx2;
          sll = sl2;
          moved = true;
          break;
        }
      }
    }
    if (!moved) break;
  }
  return sll > 0 ? sxl / sll : scale;
}

/**
 * The scale s ≥ 0, min m ≥ 0 and codes `L` in [0, nmax] that minimise Σ w·(s·L − m − x)² over
 * x[from, from + n): a grid of inverse scales (nmax − 0.9 .. nmax + 0.9) / (max − min(0, min)),
 * each with its weighted least-squares s and m (m held at 0 where the fit wants it below), then
 * alternating nearest codes and least squares while the error drops. Returns [s, m].
 */
function fitAffine(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  from: number,
  n: number,
  nmax: number,
  L: Int8Array,
): [number, number] {
  let lo = 0;
  let hi = x[from]!;
  for (let i = from; i < from + n; i++) {
    lo = Math.min(lo, x[i]!);
    hi = Math.max(hi, x[i]!);
  }
  if (hi <= lo) {
    // Every value the same (≤ 0): the min alone gives it.
    L.fill(0, from, from + n);
    return [0, -lo];
  }
  const trial = new Int8Array(n);
  // Least squares of x ≈ s·l + b with b ≤ 0 for the codes in `trial`; returns [s, b, error].
  const leastSquares = (): [number, number, number] => {
    let sw = 0;
    let sl = 0;
    let sll = 0;
    let sx = 0;
    let sxl = 0;
    for (let i = 0; i < n; i++) {
      const wi = w[from + i]!;
      const l = trial[i]!;
      const xi = x[from + i]!;
      sw += wi;
      sl += wi * l;
      sll += wi * l * l;
      sx += wi * xi;
      sxl += wi * xi * l;
    }
    const D = sw * sll - sl * sl;
    let s = D > 0 ? (sw * sxl - sx * sl) / D : 0;
    let b = D > 0 ? (sll * sx - sl * sxl) / D : 0;
    if (b > 0 || D <= 0) {
      b = 0;
      s = sll > 0 ? sxl / sll : 0;
    }
    let err = 0;
    for (let i = 0; i < n; i++) err += w[from + i]! * (s * trial[i]! + b - x[from + i]!) ** 2;
    return [s, b, s >= 0 ? err : Number.POSITIVE_INFINITY];
  };
  const codesFor = (inv: number, off: number) => {
    for (let i = 0; i < n; i++) trial[i] = clamp(Math.round(inv * (x[from + i]! - off)), 0, nmax);
  };
  // The plain min/max fit is the baseline every candidate must beat.
  let scale = (hi - lo) / nmax;
  let bias = lo;
  codesFor(1 / scale, lo);
  L.set(trial, from);
  let best = 0;
  for (let i = 0; i < n; i++) best += w[from + i]! * (scale * trial[i]! + bias - x[from + i]!) ** 2;
  for (let k = 0; k <= 36; k++) {
    codesFor((nmax - 0.9 + 0.05 * k) / (hi - lo), lo);
    const [s, b, err] = leastSquares();
    if (err < best) {
      [best, scale, bias] = [err, s, b];
      L.set(trial, from);
    }
  }
  for (let iter = 0; iter < 8 && scale > 0; iter++) {
    codesFor(1 / scale, bias);
    const [s, b, err] = leastSquares();
    if (!(err < best)) break;
    [best, scale, bias] = [err, s, b];
    L.set(trial, from);
  }
  return [scale, -bias];
}

/**
 * Each value's weight in the squared error of the super-block at x[from, from + 256): with an
 * importance vector, llama.cpp's imatrix weighting importance · sqrt(σ² + x²), where σ² is `c` times
 * the block's mean square (c = 1 for Q2_K, 2 for Q3_K); without one, `plain(x)`: llama.cpp's own
 * default, |x| for Q2_K and x² for Q3_K, which favours the large values that dominate a dot product.
 */
function blockWeights(
  x: Float32Array,
  from: number,
  importance: Float32Array | undefined,
  c: number,
  plain: (v: number) => number,
  out: Float64Array,
): void {
  if (importance === undefined) {
    for (let i = 0; i < QK; i++) out[i] = plain(x[from + i]!);
    return;
  }
  let sumx2 = 0;
  for (let i = 0; i < QK; i++) sumx2 += x[from + i]! ** 2;
  const sigma2 = (c * sumx2) / QK;
  for (let i = 0; i < QK; i++) {
    const v = x[from + i]!;
    out[i] = importance[(from + i) % importance.length]! * Math.sqrt(sigma2 + v * v);
  }
}

/** Rounds a super-block scale to f16 bits, refusing one that overflows it. */
function f16Scale(type: string, block: number, field: string, v: number): number {
  const bits = f32ToF16Bits(v);
  if ((bits & 0x7c00) === 0x7c00)
    throw new InvalidInputError(`quantize ${type}: block ${block} needs ${field} = ${v}, beyond f16`);
  return bits;
}

/** `v` then its neighbours within [lo, hi]: `v` first, so it wins a tie. */
function around(v: number, lo: number, hi: number): number[] {
  return [v, v - 1, v + 1].filter((c) => c >= lo && c <= hi);
}

/** Sets the 2 low bits of each code (value order) into qs at `qs`, as both block types lay them out. */
function packLow(out: Uint8Array, qs: number, codes: ArrayLike<number>): void {
  for (let e = 0; e < QK; e++) {
    const [byte, shift] = lowAt(e);
    out[qs + byte]! |= (codes[e]! & 3) << shift;
  }
}

/**
 * Encodes one Q2_K super-block of x[from, from + 256) into out[at, at + 84): fits each sub-block's
 * scale and min (`fitAffine`), fits d and dmin to the 16 of each as 4-bit multiples (`fitScale`,
 * a scale weighed by Σ w·code², a min by Σ w: what an error in it costs the sub-block), rounds d and
 * dmin to f16, then for each sub-block tries its 4-bit scale and min and their neighbours against
 * the stored d and dmin with nearest codes, keeping the pair of least weighted error.
 */
function quantizeQ2KBlock(
  x: Float32Array,
  from: number,
  importance: Float32Array | undefined,
  out: Uint8Array,
  at: number,
  block: number,
): void {
  const w = new Float64Array(QK);
  blockWeights(x, from, importance, 1, Math.abs, w);
  const xs = x.subarray(from, from + QK);
  const L = new Int8Array(QK);
  const scales = new Float64Array(16);
  const mins = new Float64Array(16);
  const wScale = new Float64Array(16);
  const wMin = new Float64Array(16);
  for (let s = 0; s < 16; s++) {
    [scales[s], mins[s]] = fitAffine(xs, w, 16 * s, 16, 3, L);
    let wl2 = 0;
    let wsum = 0;
    for (let l = 16 * s; l < 16 * s + 16; l++) {
      wl2 += w[l]! * L[l]! * L[l]!;
      wsum += w[l]!;
    }
    wScale[s] = wl2;
    wMin[s] = wsum;
  }
  const Ls = new Int8Array(16);
  const Lm = new Int8Array(16);
  const dBits = f16Scale('Q2_K', block, 'd', fitScale(scales, wScale, 0, 16, 0, 15, Ls));
  const mBits = f16Scale('Q2_K', block, 'dmin', fitScale(mins, wMin, 0, 16, 0, 15, Lm));
  const d = f16BitsToF32(dBits);
  const dmin = f16BitsToF32(mBits);
  putF16(out, at + 80, dBits);
  putF16(out, at + 82, mBits);
  const codes = new Uint8Array(QK);
  const trial = new Uint8Array(16);
  for (let s = 0; s < 16; s++) {
    const s0 = d > 0 ? clamp(Math.round(scales[s]! / d), 0, 15) : 0;
    const m0 = dmin > 0 ? clamp(Math.round(mins[s]! / dmin), 0, 15) : 0;
    let best = Number.POSITIVE_INFINITY;
    for (const sc of around(s0, 0, 15))
      for (const m of around(m0, 0, 15)) {
        // The decoder's own values: dl·q − ml.
        const dl = fr(d * sc);
        const ml = fr(dmin * m);
        let err = 0;
        for (let l = 0; l < 16; l++) {
          const v = xs[16 * s + l]!;
          const q = dl > 0 ? clamp(Math.round((v + ml) / dl), 0, 3) : 0;
          trial[l] = q;
          err += w[16 * s + l]! * (fr(dl * q - ml) - v) ** 2;
        }
        if (err < best) {
          best = err;
          out[at + s] = sc | (m << 4);
          codes.set(trial, 16 * s);
        }
      }
  }
  packLow(out, at + 16, codes);
}

/**
 * Encodes one Q3_K super-block of x[from, from + 256) into out[at, at + 110): fits each sub-block's
 * signed scale (`fitScale`, codes −4..3), fits d to the 16 as multiples −32..31 (weighed by
 * Σ w·code²), rounds d to f16, then for each sub-block tries its 6-bit scale and the two beside it
 * against the stored d with nearest codes, keeping the one of least weighted error.
 */
function quantizeQ3KBlock(
  x: Float32Array,
  from: number,
  importance: Float32Array | undefined,
  out: Uint8Array,
  at: number,
  block: number,
): void {
  const w = new Float64Array(QK);
  blockWeights(x, from, importance, 2, (v) => v * v, w);
  const xs = x.subarray(from, from + QK);
  const L = new Int8Array(QK);
  const scales = new Float64Array(16);
  const wScale = new Float64Array(16);
  for (let s = 0; s < 16; s++) {
    scales[s] = fitScale(xs, w, 16 * s, 16, -4, 3, L);
    let wl2 = 0;
    for (let l = 16 * s; l < 16 * s + 16; l++) wl2 += w[l]! * L[l]! * L[l]!;
    wScale[s] = wl2;
  }
  const Ls = new Int8Array(16);
  const dBits = f16Scale('Q3_K', block, 'd', fitScale(scales, wScale, 0, 16, -32, 31, Ls));
  const d = f16BitsToF32(dBits);
  putF16(out, at + 108, dBits);
  const raw = new Uint8Array(QK);
  const trial = new Uint8Array(16);
  const sc = at + 96;
  const hmask = out.subarray(at, at + 32);
  for (let s = 0; s < 16; s++) {
    const s0 = d !== 0 ? clamp(Math.round(scales[s]! / d), -32, 31) : 0;
    let best = Number.POSITIVE_INFINITY;
    let pick = s0;
    for (const c of around(s0, -32, 31)) {
      const dl = fr(d * c);
      let err = 0;
      for (let l = 0; l < 16; l++) {
        const v = xs[16 * s + l]!;
        const q = dl !== 0 ? clamp(Math.round(v / dl), -4, 3) : 0;
        trial[l] = q + 4;
        err += w[16 * s + l]! * (dl * q - v) ** 2;
      }
      if (err < best) {
        best = err;
        pick = c;
        raw.set(trial, 16 * s);
      }
    }
    const field = pick + 32;
    out[s < 8 ? sc + s : sc + s - 8]! |= (field & 15) << (s < 8 ? 0 : 4);
    out[sc + 8 + (s & 3)]! |= (field >> 4) << (2 * (s >> 2));
  }
  packLow(out, at + 32, raw);
  for (let e = 0; e < QK; e++) hmask[e & 31] = hmask[e & 31]! | ((raw[e]! >> 2) << ((e >> 5) & 7));
}

/** Checks x and importance for `quantize` of `type` (whole blocks, finite, importance rows). */
function checkQuantizeInput(type: string, x: Float32Array, importance: Float32Array | undefined): void {
  if (x.length % QK !== 0)
    throw new InvalidInputError(`quantize ${type}: x.length ${x.length} is not whole blocks of ${QK}`);
  const bad = x.findIndex((v) => !Number.isFinite(v));
  if (bad >= 0) throw new InvalidInputError(`quantize ${type}: x[${bad}] is ${x[bad]}, not finite`);
  if (importance === undefined) return;
  if (importance.length === 0 || x.length % importance.length !== 0)
    throw new InvalidInputError(
      `quantize ${type}: x.length ${x.length} is not whole rows of importance.length ${importance.length}`,
    );
  const wrong = importance.findIndex((v) => !(v >= 0 && Number.isFinite(v)));
  if (wrong >= 0)
    throw new InvalidInputError(
      `quantize ${type}: importance[${wrong}] is ${importance[wrong]}, not finite and ≥ 0`,
    );
}

/** Checks that `bytes` hold `count` values (whole blocks of `blockBytes`) for `dequantize`. */
function checkDequantizeInput(type: string, bytes: Uint8Array, count: number, blockBytes: number): void {
  if (!Number.isInteger(count) || count < 0 || count % QK !== 0)
    throw new InvalidInputError(`dequantize ${type}: count ${count} is not whole blocks of ${QK}`);
  if (bytes.byteLength < (count / QK) * blockBytes)
    throw new InvalidInputError(
      `dequantize ${type}: ${count} values need ${(count / QK) * blockBytes} bytes, got ${bytes.byteLength}`,
    );
}

/** A codec of a 256-value block type from its block encoder and decoder. */
function codec(
  type: string,
  blockBytes: number,
  decode: (bytes: Uint8Array, count: number) => Float32Array,
  encodeBlock: typeof quantizeQ2KBlock,
): GgmlCodec {
  return {
    dequantize(bytes, count) {
      checkDequantizeInput(type, bytes, count, blockBytes);
      return decode(bytes, count);
    },
    quantize(x, importance) {
      checkQuantizeInput(type, x, importance);
      const out = new Uint8Array((x.length / QK) * blockBytes);
      for (let b = 0; b < x.length / QK; b++) encodeBlock(x, b * QK, importance, out, b * blockBytes, b);
      return out;
    },
  };
}

/** The Q2_K (GGML type 10) and Q3_K (11) codecs, by GGML type id. */
export const KLOW_CODECS: ReadonlyMap<number, GgmlCodec> = /* @__PURE__ */ new Map([
  [10, /* @__PURE__ */ codec('Q2_K', Q2K_BYTES, dequantizeQ2K, quantizeQ2KBlock)],
  [11, /* @__PURE__ */ codec('Q3_K', Q3K_BYTES, dequantizeQ3K, quantizeQ3KBlock)],
]);

/**
 * The Q2_K and Q3_K decoders alone, by GGML type id: what reading a file needs, without the
 * encoders (an app that only reads GGUF files bundles none).
 */
export const KLOW_DECODERS: ReadonlyMap<number, GgmlCodec['dequantize']> = /* @__PURE__ */ new Map([
  [
    10,
    (bytes: Uint8Array, count: number) => {
      checkDequantizeInput('Q2_K', bytes, count, Q2K_BYTES);
      return dequantizeQ2K(bytes, count);
    },
  ],
  [
    11,
    (bytes: Uint8Array, count: number) => {
      checkDequantizeInput('Q3_K', bytes, count, Q3K_BYTES);
      return dequantizeQ3K(bytes, count);
    },
  ],
]);
