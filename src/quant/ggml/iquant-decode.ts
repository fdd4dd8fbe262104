/**
 * GGML's i-quants, the lattice and non-linear block types of llama.cpp, decoded: the dequantisation
 * references (bit for bit ggml-quants.c's `dequantize_row_iq*`) and the tables a GPU decoder needs.
 * The encoders are apart, so that a reader bundles none: iquant-encode.ts (IQ4_NL, IQ4_XS and the
 * map of all seven), iquant-lattice.ts (the lattice types) and iquant-fit.ts (what both share).
 * Layouts from ggml-common.h (`block_iq*`); multi-byte fields little-endian.
 *
 * The lattice types store each group of 8 (or 4) values as an index into a fixed codebook of
 * non-negative points (src/quant/iq-grids.ts: byte j of an entry is coordinate j), a sign per
 * value and one 4-bit scale s per sub-block under the block's f16 d. ksigns types store 7 sign
 * bits per 8 values; the 8th is their parity (`KSIGNS_IQ2XS`), so a group always has an even
 * number of negative values. A value decodes as (db·g)·±1, db the sub-block's scale, g its grid
 * coordinate.
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
import { f16BitsToF32 } from '../../gpu/half.js';
import { IQ4_VALUES } from '../formats.js';
import { ksign, latticeBlockWords, latticeDequantize } from '../lattice.js';
import { dataWords, type LatticeFormat, scaleWords } from '../layout.js';
import type { GgmlCodec } from './codec.js';

const fr = Math.fround;
const QK = 256;

function f16At(b: Uint8Array, at: number): number {
  return f16BitsToF32(b[at]! | (b[at + 1]! << 8));
}

// --- Small tables ----------------------------------------------------------------------------------

/**
 * The 16 values of IQ4_NL and IQ4_XS codes (ggml-common.h `kvalues_iq4nl`, llama.cpp, MIT): a
 * non-uniform 4-bit grid, denser near 0, that a code q decodes to as d·K[q].
 */
export const IQ4NL_VALUES: Int8Array = Int8Array.from(IQ4_VALUES);

/**
 * The 8 sign bits of a ksigns group from its 7 stored ones: bit 7 is their parity, so the group has
 * an even number of negative values (ggml-common.h `ksigns_iq2xs`, llama.cpp, MIT; entry i is
 * i | parity(i) << 7, computed here). Bit j set: value j of the 8 is negative.
 */
export const KSIGNS_IQ2XS: Uint8Array = Uint8Array.from({ length: 128 }, (_, i) => ksign(i));

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

// --- The decoders -----------------------------------------------------------------------------------

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

/**
 * The i-quant decoders by GGML type id: IQ2_XXS (16), IQ2_XS (17), IQ3_XXS (18), IQ4_NL (20),
 * IQ3_S (21), IQ2_S (22), IQ4_XS (23). Bad sizes throw {@link InvalidInputError}. Kept in a
 * module apart from the encoders (iquant-encode.ts; and every table marked pure) so that an app
 * that only reads GGUF files, the engine worker, bundles no encoder.
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
