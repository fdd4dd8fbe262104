/**
 * GGML tensor types: block sizes, plain-TS dequantisation references and simple round-to-nearest
 * quantisers for the block formats weft reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K), `dequantizeGgml` and `quantizeGgml` routing Q2_K and Q3_K to klow.ts and the
 * i-quants to iquant-decode.ts and iquant-encode.ts, and the readers of a block's codes in value
 * order that the lossless repacking into weft's layouts (src/quant/ggml-repack.ts) shares. Layouts
 * follow ggml-common.h / ggml-quants.c (`dequantize_row_*`); all multi-byte fields little-endian.
 *
 *  Q8_0 (34 B / 32 values):  f16 d | i8 qs[32]                 w = d * q
 *  Q4_0 (18 B / 32 values):  f16 d | u8 qs[16]                 w = d * (q - 8); value j < 16 is the
 *                            low nibble of qs[j], value j + 16 its high nibble
 *  Q4_1 (20 B / 32 values):  f16 d | f16 m | u8 qs[16]         w = d * q + m; nibbles as Q4_0
 *  Q5_0 (22 B / 32 values):  f16 d | u32 qh | u8 qs[16]        w = d * (q - 16); q = nibble (as Q4_0)
 *                            | bit j of qh << 4 for value j
 *  Q5_1 (24 B / 32 values):  f16 d | f16 m | u32 qh | u8 qs[16] w = d * q + m; q as Q5_0
 *  Q4_K (144 B / 256 values): f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
 *                            8 sub-blocks of 32 with 6-bit scale sc and min m packed in `scales`
 *                            (see scaleMinK4); w = d * sc * q - dmin * m; qs[32c + l] holds value
 *                            64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high, 2c + 1)
 *  Q5_K (176 B / 256 values): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
 *                            scales and nibbles as Q4_K; w = d * sc * q - dmin * m, q = nibble |
 *                            bit (2c + h) of qh[l] << 4 for value 64c + 32h + l
 *  Q6_K (210 B / 256 values): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
 *                            w = d * scales[i / 16] * (q - 32), q = 4 low bits from ql, 2 high from qh
 *                            (per 128-value half n: value 32k + l reads ql[64n + l + 32 (k & 1)] low/high
 *                            nibble (k >> 1) and qh[32n + l] bits 2k..2k+1)
 */
import { InvalidInputError } from '../../errors.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../gpu/half.js';
import { IQUANT_DECODERS } from './iquant-decode.js';
import { IQUANT_ENCODERS } from './iquant-encode.js';
import { KLOW_CODECS, KLOW_DECODERS } from './klow.js';

/** GGML type ids (the `ggml_type` enum) that weft knows the block size of. */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  BF16: 30,
} as const;

/** Name and block geometry of each known type: `elems` values take `bytes` bytes. */
export const GGML_BLOCKS: ReadonlyMap<number, { name: string; elems: number; bytes: number }> = new Map([
  [0, { name: 'F32', elems: 1, bytes: 4 }],
  [1, { name: 'F16', elems: 1, bytes: 2 }],
  [2, { name: 'Q4_0', elems: 32, bytes: 18 }],
  [3, { name: 'Q4_1', elems: 32, bytes: 20 }],
  [6, { name: 'Q5_0', elems: 32, bytes: 22 }],
  [7, { name: 'Q5_1', elems: 32, bytes: 24 }],
  [8, { name: 'Q8_0', elems: 32, bytes: 34 }],
  [9, { name: 'Q8_1', elems: 32, bytes: 36 }],
  [10, { name: 'Q2_K', elems: 256, bytes: 84 }],
  [11, { name: 'Q3_K', elems: 256, bytes: 110 }],
  [12, { name: 'Q4_K', elems: 256, bytes: 144 }],
  [13, { name: 'Q5_K', elems: 256, bytes: 176 }],
  [14, { name: 'Q6_K', elems: 256, bytes: 210 }],
  [15, { name: 'Q8_K', elems: 256, bytes: 292 }],
  [16, { name: 'IQ2_XXS', elems: 256, bytes: 66 }],
  [17, { name: 'IQ2_XS', elems: 256, bytes: 74 }],
  [18, { name: 'IQ3_XXS', elems: 256, bytes: 98 }],
  [20, { name: 'IQ4_NL', elems: 32, bytes: 18 }],
  [21, { name: 'IQ3_S', elems: 256, bytes: 110 }],
  [22, { name: 'IQ2_S', elems: 256, bytes: 82 }],
  [23, { name: 'IQ4_XS', elems: 256, bytes: 136 }],
  [30, { name: 'BF16', elems: 1, bytes: 2 }],
]);

/**
 * Types with a dequantiser here (and a quantiser, for the writer and tests): those of this module,
 * Q2_K (10) and Q3_K (11) in klow.ts and the i-quants (16–18, 20–23) in iquant-decode.ts and
 * iquant-encode.ts.
 */
export const DEQUANTIZABLE: ReadonlySet<number> = new Set([
  0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 18, 20, 21, 22, 23, 30,
]);

function f16At(b: Uint8Array, at: number): number {
  return f16BitsToF32(b[at]! | (b[at + 1]! << 8));
}

function putF16(b: Uint8Array, at: number, x: number): void {
  const h = f32ToF16Bits(x);
  b[at] = h & 0xff;
  b[at + 1] = h >> 8;
}

/**
 * Q4_K's (and Q5_K's) 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at `s`
 * (ggml's get_scale_min_k4), for the dequantiser and the repacking into weft's layouts.
 */
export function scaleMinK4(b: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [b[s + j]! & 63, b[s + j + 4]! & 63];
  return [
    (b[s + j + 4]! & 0xf) | ((b[s + j - 4]! >> 6) << 4),
    (b[s + j + 4]! >> 4) | ((b[s + j]! >> 6) << 4),
  ];
}

/**
 * Dequantises `count` values of GGML `type` from `bytes` (f32 semantics: each product rounded to
 * f32 as ggml's C code does). `count` must be a whole number of blocks.
 */
export function dequantizeGgml(type: number, bytes: Uint8Array, count: number): Float32Array {
  const block = GGML_BLOCKS.get(type);
  if (block === undefined || !DEQUANTIZABLE.has(type)) {
    throw new InvalidInputError(`dequantizeGgml: unsupported GGML type ${block?.name ?? type}`);
  }
  if (count % block.elems !== 0 || bytes.byteLength < (count / block.elems) * block.bytes) {
    throw new InvalidInputError(
      `dequantizeGgml: ${count} ${block.name} values need ${(count / block.elems) * block.bytes} bytes in whole blocks, got ${bytes.byteLength}`,
    );
  }
  const decode = KLOW_DECODERS.get(type) ?? IQUANT_DECODERS.get(type);
  if (decode) return decode(bytes, count);
  const out = new Float32Array(count);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const fr = Math.fround;
  const blocks = count / block.elems;
  switch (type) {
    case GgmlType.F32:
      for (let i = 0; i < count; i++) out[i] = dv.getFloat32(4 * i, true);
      break;
    case GgmlType.F16:
      for (let i = 0; i < count; i++) out[i] = f16At(bytes, 2 * i);
      break;
    case GgmlType.BF16:
      for (let i = 0; i < count; i++) out[i] = bf16BitsToF32(dv.getUint16(2 * i, true));
      break;
    case GgmlType.Q8_0:
      for (let b = 0; b < blocks; b++) {
        const at = b * 34;
        const d = f16At(bytes, at);
        for (let j = 0; j < 32; j++) out[b * 32 + j] = fr(d * dv.getInt8(at + 2 + j));
      }
      break;
    case GgmlType.Q4_0:
      for (let b = 0; b < blocks; b++) {
        const at = b * 18;
        const d = f16At(bytes, at);
        for (let j = 0; j < 16; j++) {
          const q = bytes[at + 2 + j]!;
          out[b * 32 + j] = fr(d * ((q & 0xf) - 8));
          out[b * 32 + j + 16] = fr(d * ((q >> 4) - 8));
        }
      }
      break;
    case GgmlType.Q4_1:
    case GgmlType.Q5_0:
    case GgmlType.Q5_1: {
      // w = d·q + m (Q4_1, Q5_1) or d·(q − 16) (Q5_0): d·q is exact, one rounding.
      const raw = new Uint8Array(32);
      for (let b = 0; b < blocks; b++) {
        const at = b * block.bytes;
        legacyCodes(type, bytes, at, raw);
        const d = f16At(bytes, at);
        if (type === GgmlType.Q5_0) for (let j = 0; j < 32; j++) out[b * 32 + j] = fr(d * (raw[j]! - 16));
        else {
          const m = f16At(bytes, at + 2);
          for (let j = 0; j < 32; j++) out[b * 32 + j] = fr(d * raw[j]! + m);
        }
      }
      break;
    }
    case GgmlType.Q5_K: {
      const raw = new Uint8Array(256);
      for (let b = 0; b < blocks; b++) {
        const at = b * 176;
        q5kCodes(bytes, at, raw);
        const d = f16At(bytes, at);
        const dmin = f16At(bytes, at + 2);
        for (let j = 0; j < 8; j++) {
          const [sc, m] = scaleMinK4(bytes, at + 4, j);
          const d1 = fr(d * sc);
          const m1 = fr(dmin * m);
          for (let l = 0; l < 32; l++) out[b * 256 + 32 * j + l] = fr(fr(d1 * raw[32 * j + l]!) - m1);
        }
      }
      break;
    }
    case GgmlType.Q4_K:
      for (let b = 0; b < blocks; b++) {
        const at = b * 144;
        const d = f16At(bytes, at);
        const dmin = f16At(bytes, at + 2);
        for (let c = 0; c < 4; c++) {
          const [sc1, m1] = scaleMinK4(bytes, at + 4, 2 * c);
          const [sc2, m2] = scaleMinK4(bytes, at + 4, 2 * c + 1);
          const d1 = fr(d * sc1);
          const mm1 = fr(dmin * m1);
          const d2 = fr(d * sc2);
          const mm2 = fr(dmin * m2);
          for (let l = 0; l < 32; l++) {
            const q = bytes[at + 16 + 32 * c + l]!;
            out[b * 256 + 64 * c + l] = fr(fr(d1 * (q & 0xf)) - mm1);
            out[b * 256 + 64 * c + 32 + l] = fr(fr(d2 * (q >> 4)) - mm2);
          }
        }
      }
      break;
    case GgmlType.Q6_K:
      for (let b = 0; b < blocks; b++) {
        const at = b * 210;
        const d = f16At(bytes, at + 208);
        for (let n = 0; n < 2; n++) {
          const ql = at + 64 * n;
          const qh = at + 128 + 32 * n;
          const sc = at + 192 + 8 * n;
          for (let l = 0; l < 32; l++) {
            const is = l >> 4;
            const h = bytes[qh + l]!;
            const q1 = ((bytes[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
            const q2 = ((bytes[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
            const q3 = ((bytes[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
            const q4 = ((bytes[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
            const y = b * 256 + 128 * n + l;
            out[y] = fr(fr(d * dv.getInt8(sc + is)) * q1);
            out[y + 32] = fr(fr(d * dv.getInt8(sc + is + 2)) * q2);
            out[y + 64] = fr(fr(d * dv.getInt8(sc + is + 4)) * q3);
            out[y + 96] = fr(fr(d * dv.getInt8(sc + is + 6)) * q4);
          }
        }
      }
      break;
  }
  return out;
}

/** Largest |x| over `x[from, to)`. */
function absMax(x: Float32Array, from: number, to: number): number {
  let m = 0;
  for (let i = from; i < to; i++) m = Math.max(m, Math.abs(x[i]!));
  return m;
}

/**
 * Quantises f32 values to GGML `type` with plain round-to-nearest (llama.cpp's reference formulas
 * for Q8_0/Q4_0; min/max scales for the K-quants rather than its iterative search, so files are
 * valid but slightly less accurate than llama-quantize's); Q2_K, Q3_K and the i-quants by their
 * modules' quantisers, which weigh each column's squared error by `importance` where given (rows of
 * `importance.length` values; see `GgmlCodec`; the other types ignore it). Used by the GGUF writer
 * and tests. `x.length` must be a whole number of blocks.
 */
export function quantizeGgml(type: number, x: Float32Array, importance?: Float32Array): Uint8Array {
  const block = GGML_BLOCKS.get(type);
  if (block === undefined || !DEQUANTIZABLE.has(type)) {
    throw new InvalidInputError(`quantizeGgml: unsupported GGML type ${block?.name ?? type}`);
  }
  if (x.length % block.elems !== 0) {
    throw new InvalidInputError(
      `quantizeGgml: ${x.length} values are not whole ${block.name} blocks of ${block.elems}`,
    );
  }
  if (importance !== undefined && (importance.length === 0 || x.length % importance.length !== 0))
    throw new InvalidInputError(
      `quantizeGgml: ${x.length} values are not whole rows of the ${importance.length} importance weights`,
    );
  const encode = KLOW_CODECS.get(type)?.quantize ?? IQUANT_ENCODERS.get(type);
  if (encode) return encode(x, importance);
  const blocks = x.length / block.elems;
  const out = new Uint8Array(blocks * block.bytes);
  const dv = new DataView(out.buffer);
  switch (type) {
    case GgmlType.F32:
      for (let i = 0; i < x.length; i++) dv.setFloat32(4 * i, x[i]!, true);
      break;
    case GgmlType.F16:
      for (let i = 0; i < x.length; i++) putF16(out, 2 * i, x[i]!);
      break;
    case GgmlType.BF16:
      for (let i = 0; i < x.length; i++) dv.setUint16(2 * i, f32ToBf16Bits(x[i]!), true);
      break;
    case GgmlType.Q8_0:
      for (let b = 0; b < blocks; b++) {
        const d = absMax(x, b * 32, b * 32 + 32) / 127;
        const id = d ? 1 / d : 0;
        putF16(out, b * 34, d);
        for (let j = 0; j < 32; j++) dv.setInt8(b * 34 + 2 + j, Math.round(x[b * 32 + j]! * id));
      }
      break;
    case GgmlType.Q4_0:
      for (let b = 0; b < blocks; b++) {
        // The value of largest magnitude maps to -8 exactly (ggml: d = max / -8).
        let max = 0;
        for (let j = 0; j < 32; j++) if (Math.abs(x[b * 32 + j]!) > Math.abs(max)) max = x[b * 32 + j]!;
        const d = max / -8;
        const id = d ? 1 / d : 0;
        putF16(out, b * 18, d);
        for (let j = 0; j < 16; j++) {
          const lo = Math.min(15, Math.trunc(x[b * 32 + j]! * id + 8.5));
          const hi = Math.min(15, Math.trunc(x[b * 32 + j + 16]! * id + 8.5));
          out[b * 18 + 2 + j] = lo | (hi << 4);
        }
      }
      break;
    case GgmlType.Q4_1:
    case GgmlType.Q5_0:
    case GgmlType.Q5_1:
      for (let b = 0; b < blocks; b++) quantizeLegacyBlock(type, x, b * 32, out, b * block.bytes);
      break;
    case GgmlType.Q4_K:
      for (let b = 0; b < blocks; b++) quantizeQ4KBlock(x, b * 256, out, b * 144);
      break;
    case GgmlType.Q5_K:
      for (let b = 0; b < blocks; b++) quantizeQ5KBlock(x, b * 256, out, b * 176);
      break;
    case GgmlType.Q6_K:
      for (let b = 0; b < blocks; b++) quantizeQ6KBlock(x, b * 256, out, b * 210);
      break;
  }
  return out;
}

/**
 * The scales of one Q4_K or Q5_K super-block (`bits` 4 or 5, L = 2^bits − 1): per sub-block of
 * 32, scale = (max − min) / L and min = −min(0, lo); d, dmin and the 12 packed bytes of
 * `get_scale_min_k4` go to out[at .. at + 16). Returns the 256 codes in value order.
 */
function quantizeKScales(
  x: Float32Array,
  from: number,
  out: Uint8Array,
  at: number,
  bits: number,
): Uint8Array {
  const L = (1 << bits) - 1;
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  for (let s = 0; s < 8; s++) {
    let lo = 0;
    let hi = 0;
    for (let l = 0; l < 32; l++) {
      const v = x[from + 32 * s + l]!;
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
    scales[s] = (hi - lo) / L;
    mins[s] = -lo;
  }
  const maxScale = Math.max(...scales);
  const maxMin = Math.max(...mins);
  // Round d and dmin to f16 first so the 6-bit codes are chosen against the stored values.
  const d = f16BitsToF32(f32ToF16Bits(maxScale / 63));
  const dmin = f16BitsToF32(f32ToF16Bits(maxMin / 63));
  putF16(out, at, d);
  putF16(out, at + 2, dmin);
  const ls = new Uint8Array(8);
  const lm = new Uint8Array(8);
  for (let s = 0; s < 8; s++) {
    ls[s] = d ? Math.min(63, Math.round(scales[s]! / d)) : 0;
    lm[s] = dmin ? Math.min(63, Math.round(mins[s]! / dmin)) : 0;
  }
  // Pack the inverse of scaleMinK4.
  const sc = at + 4;
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      out[sc + j] = ls[j]!;
      out[sc + j + 4] = lm[j]!;
    } else {
      out[sc + j + 4] = (ls[j]! & 0xf) | ((lm[j]! & 0xf) << 4);
      out[sc + j - 4]! |= (ls[j]! >> 4) << 6;
      out[sc + j]! |= (lm[j]! >> 4) << 6;
    }
  }
  const q = new Uint8Array(256);
  for (let s = 0; s < 8; s++) {
    const step = d * ls[s]!;
    const m = dmin * lm[s]!;
    for (let l = 0; l < 32; l++) {
      const v = x[from + 32 * s + l]!;
      q[32 * s + l] = step ? Math.max(0, Math.min(L, Math.round((v + m) / step))) : 0;
    }
  }
  return q;
}

/** One Q4_K super-block (see {@link quantizeKScales}); qs[32c + l] holds values 64c + l and 64c + 32 + l. */
function quantizeQ4KBlock(x: Float32Array, from: number, out: Uint8Array, at: number): void {
  const q = quantizeKScales(x, from, out, at, 4);
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) out[at + 16 + 32 * c + l] = q[64 * c + l]! | (q[64 * c + 32 + l]! << 4);
}

/** One Q5_K super-block: Q4_K's scales and nibbles, the fifth bits in qh (see {@link q5kCodes}). */
function quantizeQ5KBlock(x: Float32Array, from: number, out: Uint8Array, at: number): void {
  const q = quantizeKScales(x, from, out, at, 5);
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) {
      const [lo, hi] = [q[64 * c + l]!, q[64 * c + 32 + l]!];
      out[at + 48 + 32 * c + l] = (lo & 15) | ((hi & 15) << 4);
      out[at + 16 + l]! |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
    }
}

/**
 * One Q4_1, Q5_0 or Q5_1 block of 32 with llama.cpp's reference formulas: Q5_0 d = max / −16 (max
 * the signed value of largest magnitude), q = min(31, trunc(x / d + 16.5)); Q4_1, Q5_1 d = (max −
 * min) / L, m = min, q = min(L, trunc((x − min) / d + 0.5)).
 */
function quantizeLegacyBlock(type: number, x: Float32Array, from: number, out: Uint8Array, at: number): void {
  const q = new Uint8Array(32);
  const fr = Math.fround;
  if (type === GgmlType.Q5_0) {
    let max = 0;
    for (let j = 0; j < 32; j++) if (Math.abs(x[from + j]!) > Math.abs(max)) max = x[from + j]!;
    const d = fr(max / -16);
    const id = d ? fr(1 / d) : 0;
    putF16(out, at, d);
    for (let j = 0; j < 32; j++) q[j] = Math.min(31, Math.trunc(fr(fr(x[from + j]! * id) + 16.5)));
  } else {
    const L = type === GgmlType.Q4_1 ? 15 : 31;
    let [lo, hi] = [x[from]!, x[from]!];
    for (let j = 0; j < 32; j++) [lo, hi] = [Math.min(lo, x[from + j]!), Math.max(hi, x[from + j]!)];
    const d = fr((hi - lo) / L);
    const id = d ? fr(1 / d) : 0;
    putF16(out, at, d);
    putF16(out, at + 2, lo);
    for (let j = 0; j < 32; j++) q[j] = Math.min(L, Math.trunc(fr(fr((x[from + j]! - lo) * id) + 0.5)));
  }
  const qs = type === GgmlType.Q4_1 ? at + 4 : type === GgmlType.Q5_0 ? at + 6 : at + 8;
  for (let j = 0; j < 16; j++) out[qs + j] = (q[j]! & 15) | ((q[j + 16]! & 15) << 4);
  if (type === GgmlType.Q4_1) return;
  let qh = 0;
  for (let j = 0; j < 32; j++) qh |= (q[j]! >> 4) << j;
  new DataView(out.buffer, out.byteOffset).setUint32(qs - 4, qh >>> 0, true);
}

// --- Codes of a block in value order --------------------------------------------------------------
// Read by the dequantiser and by the repacking into weft's layouts (src/quant/ggml-repack.ts).

/** The 32 unsigned codes of a Q4_1, Q5_0 or Q5_1 block at `at`, in value order, into `raw`. */
export function legacyCodes(type: number, b: Uint8Array, at: number, raw: Uint8Array): void {
  const qs = type === GgmlType.Q4_1 ? at + 4 : type === GgmlType.Q5_0 ? at + 6 : at + 8;
  const qh =
    type === GgmlType.Q4_1
      ? 0
      : (b[qs - 4]! | (b[qs - 3]! << 8) | (b[qs - 2]! << 16) | (b[qs - 1]! << 24)) >>> 0;
  for (let j = 0; j < 16; j++) {
    raw[j] = (b[qs + j]! & 15) | (((qh >>> j) & 1) << 4);
    raw[j + 16] = (b[qs + j]! >> 4) | (((qh >>> (j + 16)) & 1) << 4);
  }
}

/** The 256 codes (0..31) of the Q5_K block at `at`, in value order, into `raw`. */
export function q5kCodes(b: Uint8Array, at: number, raw: Uint8Array): void {
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) {
      const q = b[at + 48 + 32 * c + l]!;
      const h = b[at + 16 + l]! >> (2 * c);
      raw[64 * c + l] = (q & 15) | ((h & 1) << 4);
      raw[64 * c + 32 + l] = (q >> 4) | (((h >> 1) & 1) << 4);
    }
}

/** The 256 codes (0..63, before the − 32) of the Q6_K block at `at`, in value order, into `raw`. */
export function q6kCodes(b: Uint8Array, at: number, raw: Uint8Array): void {
  for (let n = 0; n < 2; n++)
    for (let l = 0; l < 32; l++) {
      const h = b[at + 128 + 32 * n + l]!;
      const [l0, l1] = [b[at + 64 * n + l]!, b[at + 64 * n + l + 32]!];
      const y = 128 * n + l;
      raw[y] = (l0 & 15) | ((h & 3) << 4);
      raw[y + 32] = (l1 & 15) | (((h >> 2) & 3) << 4);
      raw[y + 64] = (l0 >> 4) | (((h >> 4) & 3) << 4);
      raw[y + 96] = (l1 >> 4) | (((h >> 6) & 3) << 4);
    }
}

/** One Q6_K super-block: per sub-block of 16, a signed scale so the largest value maps to -32. */
function quantizeQ6KBlock(x: Float32Array, from: number, out: Uint8Array, at: number): void {
  const sub = new Float32Array(16);
  for (let s = 0; s < 16; s++) {
    let max = 0;
    for (let l = 0; l < 16; l++) {
      const v = x[from + 16 * s + l]!;
      if (Math.abs(v) > Math.abs(max)) max = v;
    }
    sub[s] = max / -32;
  }
  let maxSub = 0;
  for (const s of sub) if (Math.abs(s) > Math.abs(maxSub)) maxSub = s;
  const d = f16BitsToF32(f32ToF16Bits(maxSub / -128));
  putF16(out, at + 208, d);
  const q = new Uint8Array(256);
  for (let s = 0; s < 16; s++) {
    const scale = d ? Math.max(-128, Math.min(127, Math.round(sub[s]! / d))) : 0;
    out[at + 192 + s] = scale & 0xff;
    const step = d * scale;
    for (let l = 0; l < 16; l++) {
      const v = x[from + 16 * s + l]!;
      q[16 * s + l] = (step ? Math.max(-32, Math.min(31, Math.round(v / step))) : 0) + 32;
    }
  }
  for (let n = 0; n < 2; n++) {
    for (let l = 0; l < 32; l++) {
      const v = (k: number) => q[128 * n + 32 * k + l]!;
      out[at + 64 * n + l] = (v(0) & 0xf) | ((v(2) & 0xf) << 4);
      out[at + 64 * n + l + 32] = (v(1) & 0xf) | ((v(3) & 0xf) << 4);
      out[at + 128 + 32 * n + l] = (v(0) >> 4) | ((v(1) >> 4) << 2) | ((v(2) >> 4) << 4) | ((v(3) >> 4) << 6);
    }
  }
}
