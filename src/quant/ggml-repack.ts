/**
 * GGML blocks repacked into weft's own layouts (layout.ts, `QuantizedMatrix`), losslessly: the
 * weft format that holds each GGML type as stored ({@link storedWeftFormat}), and the move of whole
 * rows of blocks into it ({@link repackRows}, {@link repackGgml}), codes from the blocks'
 * interleaved orders to weft's flat ones and each block's d (and min, and sub-scales) to the scale
 * words. The GGML codec itself (block table, layouts, quantize and dequantize) is in ggml/; this
 * module reads its blocks and writes weft's layouts, so it lives beside the layouts it targets.
 */
import { InvalidInputError } from '../errors.js';
import {
  CODE_BITS,
  checkShape,
  dataWords,
  lowPlaneBits,
  type QuantizedMatrix,
  scaleWords,
  type WeightFormat,
} from './formats.js';
import { GGML_BLOCKS, GgmlType, legacyCodes, q5kCodes, q6kCodes, scaleMinK4 } from './ggml/blocks.js';

/**
 * The weft weight format that holds GGML `type` exactly as stored, so a tensor of it is repacked
 * ({@link repackRows}) rather than dequantized and rounded again: F32 → f32, F16 → f16 (both
 * byte for byte), Q8_0 → int8, Q4_0 → q4_0, Q4_1 → q4_1, Q5_0 → q5_0, Q5_1 → q5_1, Q4_K → int4,
 * Q5_K → q5_k, Q6_K → q6_k, Q2_K → int2, Q3_K → q3_k, IQ4_NL → iq4_nl, IQ4_XS → iq4_xs (the same
 * codes, scales and formulas in weft's flat layouts, as many bytes: see `QuantizedMatrix`), and
 * the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S → iq2_xxs, iq2_xs, iq2_s, iq3_xxs,
 * iq3_s (each block as it is, its d moved to the scales). Undefined for the others (BF16 has
 * exponents f16 lacks).
 */
export function storedWeftFormat(type: number): WeightFormat | undefined {
  switch (type) {
    case GgmlType.F32:
      return 'f32';
    case GgmlType.F16:
      return 'f16';
    case GgmlType.Q8_0:
      return 'int8';
    case GgmlType.Q4_0:
      return 'q4_0';
    case GgmlType.Q4_1:
      return 'q4_1';
    case GgmlType.Q5_0:
      return 'q5_0';
    case GgmlType.Q5_1:
      return 'q5_1';
    case GgmlType.Q4_K:
      return 'int4';
    case GgmlType.Q5_K:
      return 'q5_k';
    case GgmlType.Q6_K:
      return 'q6_k';
    case GgmlType.Q2_K:
      return 'int2';
    case GgmlType.Q3_K:
      return 'q3_k';
    case GgmlType.IQ4_NL:
      return 'iq4_nl';
    case GgmlType.IQ4_XS:
      return 'iq4_xs';
    case GgmlType.IQ2_XXS:
      return 'iq2_xxs';
    case GgmlType.IQ2_XS:
      return 'iq2_xs';
    case GgmlType.IQ2_S:
      return 'iq2_s';
    case GgmlType.IQ3_XXS:
      return 'iq3_xxs';
    case GgmlType.IQ3_S:
      return 'iq3_s';
    default:
      return undefined;
  }
}

/** An all-zero matrix [rows, cols] of `format`, its arrays sized as `QuantizedMatrix` says. */
export function emptyMatrix(format: WeightFormat, rows: number, cols: number): QuantizedMatrix {
  checkShape(format, rows, cols);
  const n = rows * cols;
  const words = scaleWords(format, n);
  return {
    format,
    rows,
    cols,
    data: new Uint32Array(dataWords(format, n)),
    ...(words > 0 ? { scales: new Uint32Array(words) } : {}),
  };
}

/**
 * Repacks whole rows of GGML `type` blocks into rows of `out` (of format
 * `storedWeftFormat(type)`): source row r (bytes [r·rowBytes, (r + 1)·rowBytes) of `bytes`) becomes
 * row `to(r)` of `out`, so a row permutation costs nothing extra. Lossless: each row is a whole
 * number of blocks (GGUF requires `cols` % block == 0), so it starts a group or super-block of the
 * flat layout, and codes and scales move together. The f16 d (and m) of a legacy block go to its
 * half (word) of the scales; for Q4_K and Q5_K, d and dmin become D and M and the 12 packed bytes of
 * `get_scale_min_k4` become the 96-bit field array of 6-bit sub-scales and sub-mins; Q6_K's d and
 * int8 sub-scales are copied to their words. Codes are moved from the blocks' interleaved orders
 * (see the layouts atop ggml/blocks.ts) to weft's flat order: nibbles in order, and for 5- and 6-bit codes the nibble
 * and high planes of each 128-element chunk.
 *
 * `dequantize(out)` then equals `dequantizeGgml` of the rows bit for bit, except that a q4_0 zero
 * may differ in sign: llama.cpp computes d·(q − 8), weft d·q − 8d, so q = 8 under a negative d gives
 * −0 there and +0 here. Assumes a little-endian host (every browser and Node platform).
 */
export function repackRows(
  type: number,
  bytes: Uint8Array,
  out: QuantizedMatrix,
  to: (row: number) => number,
): void {
  const block = GGML_BLOCKS.get(type);
  const format = storedWeftFormat(type);
  if (block === undefined || format === undefined || format !== out.format)
    throw new InvalidInputError(
      `repackRows: GGML type ${block?.name ?? type} does not repack into ${out.format}`,
    );
  const K = out.cols;
  if (K % block.elems !== 0)
    throw new InvalidInputError(`repackRows: ${K} columns are not whole ${block.name} blocks`);
  const perRow = K / block.elems;
  const rowBytes = perRow * block.bytes;
  if (bytes.byteLength % rowBytes !== 0)
    throw new InvalidInputError(`repackRows: ${bytes.byteLength} bytes are not whole rows of ${rowBytes}`);
  const data = new Uint8Array(out.data.buffer, out.data.byteOffset, out.data.byteLength);
  const scales =
    out.scales && new Uint16Array(out.scales.buffer, out.scales.byteOffset, out.scales.length * 2);
  const scaleBytes =
    out.scales && new Uint8Array(out.scales.buffer, out.scales.byteOffset, out.scales.byteLength);
  const raw = new Uint8Array(block.elems);
  for (let r = 0; r < bytes.byteLength / rowBytes; r++) {
    const dest = to(r);
    if (!(Number.isInteger(dest) && dest >= 0 && dest < out.rows))
      throw new InvalidInputError(`repackRows: row ${r} goes to ${dest}, outside [0, ${out.rows})`);
    const src = r * rowBytes;
    const e0 = dest * K; // first flat element of the row: a multiple of the block
    switch (type) {
      case GgmlType.F32:
      case GgmlType.F16:
        data.set(bytes.subarray(src, src + rowBytes), e0 * block.bytes);
        break;
      case GgmlType.Q8_0:
        for (let b = 0; b < perRow; b++) {
          const at = src + 34 * b;
          scales![e0 / 32 + b] = bytes[at]! | (bytes[at + 1]! << 8);
          data.set(bytes.subarray(at + 2, at + 34), e0 + 32 * b);
        }
        break;
      case GgmlType.Q4_0:
      case GgmlType.IQ4_NL:
        for (let b = 0; b < perRow; b++) {
          const at = src + 18 * b;
          scales![e0 / 32 + b] = bytes[at]! | (bytes[at + 1]! << 8);
          // weft byte m holds elements 2m, 2m + 1; element e < 16 is qs[e] low, else qs[e − 16] high.
          const qs = at + 2;
          const base = (e0 + 32 * b) / 2;
          for (let m = 0; m < 8; m++)
            data[base + m] = (bytes[qs + 2 * m]! & 15) | ((bytes[qs + 2 * m + 1]! & 15) << 4);
          for (let m = 8; m < 16; m++)
            data[base + m] = (bytes[qs + 2 * m - 16]! >> 4) | (bytes[qs + 2 * m - 15]! & 0xf0);
        }
        break;
      case GgmlType.Q4_1:
      case GgmlType.Q5_0:
      case GgmlType.Q5_1:
        for (let b = 0; b < perRow; b++) {
          const at = src + block.bytes * b;
          const g = e0 / 32 + b;
          // Q5_0: d in half g & 1 of word g >> 1; Q4_1, Q5_1: d | m << 16 in word g (two halves).
          if (type === GgmlType.Q5_0) scales![g] = bytes[at]! | (bytes[at + 1]! << 8);
          else scaleBytes!.set(bytes.subarray(at, at + 4), 4 * g);
          legacyCodes(type, bytes, at, raw);
          writeCodes(out, e0 + 32 * b, raw);
        }
        break;
      case GgmlType.Q4_K:
      case GgmlType.Q5_K:
        for (let b = 0; b < perRow; b++) {
          const at = src + block.bytes * b;
          const s = e0 / 256 + b;
          const w = out.scales!.subarray(4 * s, 4 * s + 4);
          w.fill(0);
          for (let j = 0; j < 8; j++) {
            const [sc, mn] = scaleMinK4(bytes, at + 4, j);
            putBits(w, 6 * j, sc);
            putBits(w, 6 * (8 + j), mn);
          }
          w[3] = (bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16) | (bytes[at + 3]! << 24)) >>> 0;
          if (type === GgmlType.Q5_K) {
            q5kCodes(bytes, at, raw);
            writeCodes(out, 256 * s, raw);
            continue;
          }
          // Flat element e = 64c + 32h + l is nibble h of qs[32c + l].
          const qs = at + 16;
          const base = 128 * s;
          for (let c = 0; c < 4; c++)
            for (let h = 0; h < 2; h++)
              for (let l = 0; l < 32; l += 2) {
                const lo = (bytes[qs + 32 * c + l]! >> (4 * h)) & 15;
                const hi = (bytes[qs + 32 * c + l + 1]! >> (4 * h)) & 15;
                data[base + (64 * c + 32 * h + l) / 2] = lo | (hi << 4);
              }
        }
        break;
      case GgmlType.IQ4_XS:
        for (let b = 0; b < perRow; b++) {
          const at = src + 136 * b;
          const s = e0 / 256 + b;
          // d | scales_h, scales_l: the layout's two words are the block's first 8 bytes.
          scaleBytes!.set(bytes.subarray(at, at + 8), 8 * s);
          // Sub-block ib's 32 codes: nibbles of qs[16·ib ..] as Q4_0's block.
          for (let ib = 0; ib < 8; ib++)
            for (let j = 0; j < 16; j++) {
              raw[32 * ib + j] = bytes[at + 8 + 16 * ib + j]! & 15;
              raw[32 * ib + 16 + j] = bytes[at + 8 + 16 * ib + j]! >> 4;
            }
          writeCodes(out, 256 * s, raw);
        }
        break;
      case GgmlType.Q2_K:
        for (let b = 0; b < perRow; b++) {
          const at = src + 84 * b;
          const s = e0 / 256 + b;
          // scales[16] (sc | mn << 4) and then d | dmin: words 0–3 and 4 of the super-block's five.
          scaleBytes!.set(bytes.subarray(at, at + 16), 20 * s);
          scaleBytes!.set(bytes.subarray(at + 80, at + 84), 20 * s + 16);
          // Value e reads bits 2·((e >> 5) & 3) of qs[32·(e >> 7) + (e & 31)].
          for (let e = 0; e < 256; e++)
            raw[e] = (bytes[at + 16 + 32 * (e >> 7) + (e & 31)]! >> (2 * ((e >> 5) & 3))) & 3;
          writeCodes(out, 256 * s, raw);
        }
        break;
      case GgmlType.Q3_K:
        for (let b = 0; b < perRow; b++) {
          const at = src + 110 * b;
          const s = e0 / 256 + b;
          // Pair t = s >> 1: word 7t holds both d's (this one in half s & 1), then 3 words of
          // 6-bit sub-scale fields per super-block.
          const t = 7 * (s >> 1);
          scales![2 * t + (s & 1)] = bytes[at + 108]! | (bytes[at + 109]! << 8);
          const fields = out.scales!.subarray(t + 1 + 3 * (s & 1), t + 4 + 3 * (s & 1));
          fields.fill(0);
          for (let j = 0; j < 16; j++) putBits(fields, 6 * j, q3kScale(bytes, at + 96, j));
          // Value e: 2 bits of qs[32·(e >> 7) + (e & 31)] at 2·((e >> 5) & 3), and bit (e >> 5) of
          // hmask[e & 31] (set: q = low, clear: low − 4; raw = low | bit << 2, q = raw − 4).
          for (let e = 0; e < 256; e++) {
            const low = (bytes[at + 32 + 32 * (e >> 7) + (e & 31)]! >> (2 * ((e >> 5) & 3))) & 3;
            raw[e] = low | (((bytes[at + (e & 31)]! >> (e >> 5)) & 1) << 2);
          }
          writeCodes(out, 256 * s, raw);
        }
        break;
      case GgmlType.IQ2_XXS:
      case GgmlType.IQ2_XS:
      case GgmlType.IQ2_S:
      case GgmlType.IQ3_XXS:
      case GgmlType.IQ3_S:
        for (let b = 0; b < perRow; b++) {
          const at = src + block.bytes * b;
          const s = e0 / 256 + b;
          // d in half s & 1 of word s >> 1; the rest of the block, byte for byte, is the codes.
          scales![s] = bytes[at]! | (bytes[at + 1]! << 8);
          data.set(bytes.subarray(at + 2, at + block.bytes), (block.bytes - 2) * s);
        }
        break;
      case GgmlType.Q6_K:
        for (let b = 0; b < perRow; b++) {
          const at = src + 210 * b;
          const s = e0 / 256 + b;
          // Pair t = s >> 1: word 9t holds both d's (this one in half s & 1), then 4 words of
          // int8 sub-scales per super-block.
          const t = 9 * (s >> 1);
          scales![2 * t + (s & 1)] = bytes[at + 208]! | (bytes[at + 209]! << 8);
          scaleBytes!.set(bytes.subarray(at + 192, at + 208), 4 * (t + 1 + 4 * (s & 1)));
          q6kCodes(bytes, at, raw);
          writeCodes(out, 256 * s, raw);
        }
        break;
    }
  }
}

/** Q3_K's raw 6-bit sub-scale j (0..15; the scale is raw − 32) from the 12 packed bytes at `s`. */
function q3kScale(b: Uint8Array, s: number, j: number): number {
  const low = j < 8 ? b[s + j]! & 15 : b[s + j - 8]! >> 4;
  return low | (((b[s + 8 + (j & 3)]! >> (2 * (j >> 2))) & 3) << 4);
}

/**
 * Writes unsigned codes `raw` (a multiple of 32, in flat order) of a 2-, 3-, 4-, 5- or 6-bit matrix
 * from flat element e0 (a multiple of 32) into `q.data`, in the layout of `QuantizedMatrix`: 2-bit
 * codes and nibbles in order, and for 3-, 5- and 6-bit codes the low plane (2 or 4 bits) and the
 * high plane of each 128-element chunk. Every 32 codes own whole words, which are overwritten.
 */
function writeCodes(q: QuantizedMatrix, e0: number, raw: Uint8Array): void {
  const bits = CODE_BITS[q.format];
  const data = q.data;
  // The 32 codes from raw[g] as `width`-bit fields (their low bits), into words from `word`.
  const plane = (g: number, word: number, width: number, shift: number) => {
    const per = 32 / width;
    for (let m = 0; m < width; m++) {
      let v = 0;
      for (let k = 0; k < per; k++)
        v |= ((raw[g + per * m + k]! >> shift) & ((1 << width) - 1)) << (width * k);
      data[word + m] = v >>> 0;
    }
  };
  if (bits === 2 || bits === 4) {
    for (let g = 0; g < raw.length; g += 32) plane(g, (e0 + g) / (32 / bits), bits, 0);
    return;
  }
  const lb = lowPlaneBits(q.format);
  const hb = bits - lb;
  for (let g = 0; g < raw.length; g += 32) {
    const e = e0 + g;
    const base = 4 * bits * Math.floor(e / 128);
    const r = e & 127;
    plane(g, base + ((r * lb) >> 5), lb, 0);
    plane(g, base + 4 * lb + ((r * hb) >> 5), hb, lb);
  }
}

/** ORs a 6-bit `value` into bit `pos` of a little-endian field array (a field may straddle words). */
function putBits(words: Uint32Array, pos: number, value: number): void {
  const w = pos >> 5;
  const off = pos & 31;
  words[w] = (words[w]! | (value << off)) >>> 0;
  if (off + 6 > 32) words[w + 1] = (words[w + 1]! | (value >>> (32 - off))) >>> 0;
}

/** A [rows, cols] GGML tensor of `type` (rows in order) repacked into its weft format (see {@link repackRows}). */
export function repackGgml(type: number, bytes: Uint8Array, rows: number, cols: number): QuantizedMatrix {
  const format = storedWeftFormat(type);
  if (format === undefined)
    throw new InvalidInputError(
      `repackGgml: GGML type ${GGML_BLOCKS.get(type)?.name ?? type} has no weft layout`,
    );
  const out = emptyMatrix(format, rows, cols);
  const block = GGML_BLOCKS.get(type)!;
  if (bytes.byteLength !== (rows * cols * block.bytes) / block.elems)
    throw new InvalidInputError(`repackGgml: ${bytes.byteLength} bytes for ${block.name} [${rows}, ${cols}]`);
  repackRows(type, bytes, out, (r) => r);
  return out;
}
