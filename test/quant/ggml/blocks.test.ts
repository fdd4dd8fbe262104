// GGUF's K-quant and legacy block types placed as stored (Q4_1, Q5_0, Q5_1, Q5_K, Q6_K): the
// dequantisation reference (dequantizeGgml) against a second decoder written straight from the
// block structs of ggml-common.h (fields read by name, each value from its formula in
// ggml-quants.c's dequantize_row_*), the lossless repacking into weft's layouts (repackGgml, then
// the weft reference `dequantize`), and the bytes each layout takes against the file's.
import { describe, expect, it } from 'vitest';
import { fallbackType, mixTypes } from '../../../src/convert/gguf-mix.js';
import { f16BitsToF32 } from '../../../src/gpu/half.js';
import { dequantize, packedBytes, sliceRows } from '../../../src/quant/formats.js';
import { dequantizeGgml, GGML_BLOCKS, GgmlType, quantizeGgml } from '../../../src/quant/ggml/blocks.js';
import { repackGgml, storedWeftFormat } from '../../../src/quant/ggml-repack.js';
import { rng, sameF32 } from '../../fixtures/write.js';

const fr = Math.fround;

/** Little-endian reads of one block's fields, in the order the struct declares them. */
class Fields {
  private at: number;
  constructor(
    private readonly b: Uint8Array,
    at: number,
  ) {
    this.at = at;
  }
  half(): number {
    const v = f16BitsToF32(this.b[this.at]! | (this.b[this.at + 1]! << 8));
    this.at += 2;
    return v;
  }
  u32(): number {
    const v = new DataView(this.b.buffer, this.b.byteOffset + this.at, 4).getUint32(0, true);
    this.at += 4;
    return v;
  }
  u8s(n: number): number[] {
    const v = Array.from(this.b.subarray(this.at, this.at + n));
    this.at += n;
    return v;
  }
  i8s(n: number): number[] {
    return this.u8s(n).map((v) => (v << 24) >> 24);
  }
}

/** get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes. */
function scaleMin(q: number[], j: number): [number, number] {
  if (j < 4) return [q[j]! & 63, q[j + 4]! & 63];
  return [(q[j + 4]! & 0xf) | ((q[j - 4]! >> 6) << 4), (q[j + 4]! >> 4) | ((q[j]! >> 6) << 4)];
}

/**
 * The second decoder: block by block, each struct's fields read in order, then value v of the
 * block from its formula (C's float arithmetic: every product and sum rounded to f32).
 */
function decodeStruct(type: number, bytes: Uint8Array, count: number): Float32Array {
  const { elems, bytes: size } = GGML_BLOCKS.get(type)!;
  const out = new Float32Array(count);
  for (let blk = 0; blk < count / elems; blk++) {
    const f = new Fields(bytes, blk * size);
    const y = out.subarray(blk * elems, (blk + 1) * elems);
    if (type === GgmlType.Q4_1) {
      // block_q4_1 { half d; half m; u8 qs[16] }: value j < 16 the low nibble of qs[j], j + 16 its high.
      const [d, m, qs] = [f.half(), f.half(), f.u8s(16)];
      for (let v = 0; v < 32; v++) y[v] = fr(fr((v < 16 ? qs[v]! & 15 : qs[v - 16]! >> 4) * d) + m);
    } else if (type === GgmlType.Q5_0 || type === GgmlType.Q5_1) {
      // block_q5_0 { half d; u8 qh[4]; u8 qs[16] }, block_q5_1 { half d; half m; u8 qh[4]; u8 qs[16] }:
      // the fifth bit of value v is bit v of qh (a little-endian u32).
      const d = f.half();
      const m = type === GgmlType.Q5_1 ? f.half() : 0;
      const [qh, qs] = [f.u32(), f.u8s(16)];
      for (let v = 0; v < 32; v++) {
        const q = (v < 16 ? qs[v]! & 15 : qs[v - 16]! >> 4) | (((qh >>> v) & 1) << 4);
        y[v] = type === GgmlType.Q5_0 ? fr((q - 16) * d) : fr(fr(q * d) + m);
      }
    } else if (type === GgmlType.Q5_K) {
      // block_q5_K { half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }: value v = 64c +
      // 32h + l is nibble h of qs[32c + l] with bit 2c + h of qh[l] on top, in sub-block 2c + h.
      const [d, dmin, sc, qh, qs] = [f.half(), f.half(), f.u8s(12), f.u8s(32), f.u8s(128)];
      for (let v = 0; v < 256; v++) {
        const [c, h, l] = [v >> 6, (v >> 5) & 1, v & 31];
        const q = ((qs[32 * c + l]! >> (4 * h)) & 15) | (((qh[l]! >> (2 * c + h)) & 1) << 4);
        const [s, mn] = scaleMin(sc, 2 * c + h);
        y[v] = fr(fr(fr(d * s) * q) - fr(dmin * mn));
      }
    } else if (type === GgmlType.Q6_K) {
      // block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; half d }: half n = v >> 7, quarter k =
      // (v >> 5) & 3, l = v & 31: nibble k >> 1 of ql[64n + 32(k & 1) + l], bits 2k of qh[32n + l],
      // scale scales[8n + 2k + l / 16].
      const [ql, qh, scales, d] = [f.u8s(128), f.u8s(64), f.i8s(16), f.half()];
      for (let v = 0; v < 256; v++) {
        const [n, k, l] = [v >> 7, (v >> 5) & 3, v & 31];
        const lo = (ql[64 * n + 32 * (k & 1) + l]! >> (4 * (k >> 1))) & 15;
        const hi = (qh[32 * n + l]! >> (2 * k)) & 3;
        y[v] = fr(fr(d * scales[8 * n + 2 * k + (l >> 4)]!) * ((lo | (hi << 4)) - 32));
      }
    } else throw new Error(`decodeStruct: type ${type}`);
  }
  return out;
}

/** f16 bit patterns a scale field takes in turn: zeros of both signs, subnormals, normals of both signs. */
const SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0xbc00, 0x7bff, 0xfbff, 0x1234, 0x9234];

/**
 * `blocks` random blocks of `type` whose f16 fields (at `fields` in each block) are finite (an
 * Inf/NaN pattern loses its top exponent bit); the first field takes every {@link SPECIAL_F16}
 * in turn, the others do from the second block on.
 */
function randomBlocks(type: number, blocks: number, fields: readonly number[], seed: number): Uint8Array {
  const size = GGML_BLOCKS.get(type)!.bytes;
  const r = rng(seed);
  const b = Uint8Array.from({ length: blocks * size }, () => Math.floor(r() * 256));
  for (let k = 0; k < blocks; k++)
    fields.forEach((f, i) => {
      const at = k * size + f;
      const special = SPECIAL_F16[(k + i) % SPECIAL_F16.length]!;
      if (k < SPECIAL_F16.length && (i === 0 || k > 0)) {
        b[at] = special & 0xff;
        b[at + 1] = special >> 8;
      } else if ((b[at + 1]! & 0x7c) === 0x7c) b[at + 1]! &= ~0x40;
    });
  return b;
}

// Each type, its weft format and its f16 fields' offsets in a block.
const TYPES = [
  ['Q4_1', GgmlType.Q4_1, 'q4_1', [0, 2]],
  ['Q5_0', GgmlType.Q5_0, 'q5_0', [0]],
  ['Q5_1', GgmlType.Q5_1, 'q5_1', [0, 2]],
  ['Q5_K', GgmlType.Q5_K, 'q5_k', [0, 2]],
  ['Q6_K', GgmlType.Q6_K, 'q6_k', [208]],
] as const;

// The types whose references are tested against llama.cpp's in their own modules' tests
// (gguf-klow.test.ts, gguf-iquant.test.ts), placed here as stored: Q2_K in weft's int2 (the same
// semantics), the others in formats of their own.
const PLACED = [
  ...TYPES,
  ['Q2_K', GgmlType.Q2_K, 'int2', [80, 82]],
  ['Q3_K', GgmlType.Q3_K, 'q3_k', [108]],
  ['IQ4_NL', GgmlType.IQ4_NL, 'iq4_nl', [0]],
  ['IQ4_XS', GgmlType.IQ4_XS, 'iq4_xs', [0]],
  ['IQ2_XXS', GgmlType.IQ2_XXS, 'iq2_xxs', [0]],
  ['IQ2_XS', GgmlType.IQ2_XS, 'iq2_xs', [0]],
  ['IQ2_S', GgmlType.IQ2_S, 'iq2_s', [0]],
  ['IQ3_XXS', GgmlType.IQ3_XXS, 'iq3_xxs', [0]],
  ['IQ3_S', GgmlType.IQ3_S, 'iq3_s', [0]],
] as const;

describe('dequantizeGgml equals a decoder written from the block structs', () => {
  it.each(TYPES)('%s: 40 random blocks bit for bit', (_name, type, _format, fields) => {
    const { elems } = GGML_BLOCKS.get(type)!;
    for (let seed = 1; seed <= 3; seed++) {
      const bytes = randomBlocks(type, 40, fields, seed);
      const got = dequantizeGgml(type, bytes, 40 * elems);
      expect(sameF32(got, decodeStruct(type, bytes, 40 * elems))).toBeUndefined();
    }
  });
});

describe('GGUF blocks placed as stored in weft layouts', () => {
  it('each type has its own weft format', () => {
    for (const [, type, format] of PLACED) expect(storedWeftFormat(type)).toBe(format);
  });

  // Rows of an odd number of groups or super-blocks, so a chunk of 128 codes (q5_0, q5_1), a scale
  // word (q5_0: two d's) or a pair of super-blocks (q6_k: d's two to a word) spans rows, and the
  // last super-block of a q6_k matrix is unpaired.
  it.each([
    ['Q4_1', 5, 96],
    ['Q5_0', 5, 160],
    ['Q5_0', 3, 32],
    ['Q5_1', 7, 96],
    ['Q5_K', 3, 256],
    ['Q5_K', 2, 768],
    ['Q6_K', 3, 256],
    ['Q6_K', 2, 768],
    ['Q2_K', 3, 256],
    ['Q3_K', 3, 256],
    ['Q3_K', 2, 768],
    ['IQ4_NL', 5, 96],
    ['IQ4_NL', 3, 32],
    ['IQ4_XS', 3, 256],
    ['IQ2_XXS', 3, 256],
    ['IQ2_XS', 3, 256],
    ['IQ2_S', 2, 768],
    ['IQ3_XXS', 3, 256],
    ['IQ3_S', 3, 256],
  ] as const)('%s [%i, %i]: dequantize(repacked) equals dequantizeGgml bit for bit', (name, rows, cols) => {
    const [, type, format, fields] = PLACED.find(([n]) => n === name)!;
    const { elems } = GGML_BLOCKS.get(type)!;
    for (let seed = 1; seed <= 4; seed++) {
      const bytes = randomBlocks(type, (rows * cols) / elems, fields, seed);
      const q = repackGgml(type, bytes, rows, cols);
      expect(q.format).toBe(format);
      expect(sameF32(dequantize(q), dequantizeGgml(type, bytes, rows * cols))).toBeUndefined();
    }
  });

  it('a range of rows repacks to the words of the whole (slices start on a block)', () => {
    // q6_k [4, 512]: rows 2..3 start a pair of super-blocks.
    const bytes = randomBlocks(GgmlType.Q6_K, 8, [208], 5);
    const whole = repackGgml(GgmlType.Q6_K, bytes, 4, 512);
    const part = repackGgml(GgmlType.Q6_K, bytes.subarray(2 * 420), 2, 512);
    expect(Array.from(part.data)).toEqual(Array.from(sliceRows(whole, 2, 2).data));
    expect(Array.from(part.scales!)).toEqual(Array.from(sliceRows(whole, 2, 2).scales!));
  });

  // The GPU reads what `packedBytes` counts: the file's bytes exactly when the matrix is whole
  // chunks (q5_0, q5_1: 128 values) and pairs of super-blocks (q6_k), else a few bytes of padding.
  it.each([
    ['Q4_1', 2048, 2048, 0],
    ['Q4_1', 3, 96, 0],
    ['Q5_0', 896, 4864, 0],
    ['Q5_0', 3, 96, 66], // 288 values padded to a third chunk of 128: 96 more values' 5.5 bits
    ['Q5_1', 896, 4864, 0],
    ['Q5_K', 1024, 3072, 0],
    ['Q5_K', 3, 256, 0],
    ['Q6_K', 151936, 1024, 0],
    ['Q6_K', 3, 256, 2], // 3 super-blocks: the last d has a word to itself
    ['Q2_K', 896, 4864, 0],
    ['Q3_K', 1024, 3072, 0],
    ['Q3_K', 3, 256, 2], // as Q6_K
    ['IQ4_NL', 896, 4864, 0],
    ['IQ4_NL', 3, 96, 2], // 9 groups: the last d has a word to itself (as Q4_0's)
    ['IQ4_XS', 1024, 3072, 0],
    ['IQ2_XXS', 896, 4864, 0],
    ['IQ2_XS', 1024, 3072, 0],
    ['IQ2_S', 1024, 3072, 0],
    ['IQ3_XXS', 896, 4864, 0],
    ['IQ3_S', 1024, 3072, 0],
    ['IQ3_S', 3, 256, 2], // as Q6_K
  ] as const)('%s [%i, %i]: GPU bytes = file bytes + %i', (name, rows, cols, extra) => {
    const [, type, format] = PLACED.find(([n]) => n === name)!;
    const { elems, bytes } = GGML_BLOCKS.get(type)!;
    expect(packedBytes(format, rows, cols)).toBe((rows * cols * bytes) / elems + extra);
  });
});

describe('GGML quantisers of the placed types', () => {
  // Error bounds per block: Q4_1 / Q5_1 half a step of the range (plus the f16 rounding of d and
  // m), Q5_0 one step of max/16; Q5_K half a 5-bit step plus the 6-bit scale and min rounding;
  // Q6_K as gguf.test.ts's.
  const r = rng(9);
  const x = Float32Array.from({ length: 4096 }, () => (r() - 0.5) * (r() < 0.02 ? 20 : 2));
  it.each(TYPES)('%s: dequant(quant(x)) is within its block error', (_name, type) => {
    const { elems } = GGML_BLOCKS.get(type)!;
    const y = dequantizeGgml(type, quantizeGgml(type, x), x.length);
    for (let b = 0; b < x.length / elems; b++) {
      const xs = x.subarray(b * elems, (b + 1) * elems);
      const amax = Math.max(...xs.map(Math.abs));
      const range = Math.max(...xs) - Math.min(...xs);
      const kRange = Math.max(0, ...xs) - Math.min(0, ...xs);
      const bound =
        type === GgmlType.Q4_1
          ? range / 15 / 2 + amax * 2 ** -10 + 1e-6
          : type === GgmlType.Q5_1
            ? range / 31 / 2 + amax * 2 ** -10 + 1e-6
            : type === GgmlType.Q5_0
              ? (amax / 16) * 1.01
              : type === GgmlType.Q5_K
                ? (kRange / 31) * 0.5 + 16 * (kRange / 31 / 63) + (amax / 63) * 0.5 + 1e-6
                : amax / 32 + 32 * (amax / 32 / 128) + 1e-6;
      for (let i = 0; i < elems; i++) expect(Math.abs(y[b * elems + i]! - xs[i]!)).toBeLessThanOrEqual(bound);
    }
  });
});

describe("llama-quantize's Q4_K_M and Q5_K_M recipes (mixTypes)", () => {
  // A 16-layer model with an untied head, rows of 2048 (whole super-blocks) and a down_proj of 5632.
  const layers = 16;
  const weights = [
    { name: 'token_embd.weight', ne: [2048, 32000] },
    { name: 'output.weight', ne: [2048, 32000] },
    ...Array.from({ length: layers }, (_, l) =>
      ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'].map((t) => ({
        name: `blk.${l}.${t}.weight`,
        ne: t === 'ffn_down' ? [5632, 2048] : [2048, t === 'ffn_gate' || t === 'ffn_up' ? 5632 : 2048],
      })),
    ).flat(),
  ];
  // use_more_bits(i, 16): i < 2, i >= 14, or (i - 2) % 3 == 2.
  const more = [0, 1, 4, 7, 10, 13, 14, 15];

  it.each([
    ['Q4_K_M', GgmlType.Q4_K],
    ['Q5_K_M', GgmlType.Q5_K],
  ] as const)(
    '%s: Q6_K for the head and the attn_v and ffn_down of the layers use_more_bits picks',
    (mix, base) => {
      const types = mixTypes(mix, weights, layers);
      expect(types.get('output.weight')).toBe(GgmlType.Q6_K);
      expect(types.get('token_embd.weight')).toBe(base);
      for (let l = 0; l < layers; l++) {
        const want = more.includes(l) ? GgmlType.Q6_K : base;
        expect(types.get(`blk.${l}.attn_v.weight`), `layer ${l} attn_v`).toBe(want);
        expect(types.get(`blk.${l}.ffn_down.weight`), `layer ${l} ffn_down`).toBe(want);
        for (const t of ['attn_q', 'attn_k', 'attn_output', 'ffn_gate', 'ffn_up'])
          expect(types.get(`blk.${l}.${t}.weight`)).toBe(base);
      }
    },
  );

  it('a tied head is the embedding, and rows of no whole super-block fall back (Q4_K → Q5_0, Q6_K → Q8_0)', () => {
    const tied = mixTypes(
      'Q4_K_M',
      [
        { name: 'token_embd.weight', ne: [896, 1000] },
        { name: 'blk.0.attn_v.weight', ne: [896, 128] },
        { name: 'blk.0.ffn_down.weight', ne: [4864, 896] },
        { name: 'blk.1.attn_v.weight', ne: [896, 128] },
        { name: 'blk.1.attn_q.weight', ne: [896, 896] },
        { name: 'blk.1.ffn_down.weight', ne: [4864, 896] },
      ],
      2,
    );
    expect(Object.fromEntries(tied)).toEqual({
      'token_embd.weight': GgmlType.Q8_0, // 896 % 256 != 0: the head's rule gives Q8_0
      'blk.0.attn_v.weight': GgmlType.Q5_0, // Q4_K, no whole super-block: Q5_0
      'blk.0.ffn_down.weight': GgmlType.Q4_K, // 4864 = 19 super-blocks
      'blk.1.attn_v.weight': GgmlType.Q8_0, // Q6_K (layer 1 of 2): Q8_0
      'blk.1.attn_q.weight': GgmlType.Q5_0,
      'blk.1.ffn_down.weight': GgmlType.Q6_K,
    });
  });
});

describe("llama-quantize's Q3_K_M recipe and its fallbacks (mixTypes, fallbackType)", () => {
  it('Q3_K_M of a 32-layer model: Q5_K for the first two attn_v and the ffn_down of layers < 32/16, Q4_K for the other attn_v, ffn_down and every attn_output', () => {
    // llama_tensor_get_type_impl for LLAMA_FTYPE_MOSTLY_Q3_K_M, dense and not Falcon: attn_v-like
    // → i_attention_wv < 2 ? Q5_K : Q4_K; ffn_down → i_layer < n_layer/16 ? Q5_K : Q4_K;
    // attn_output → Q4_K; the head → Q6_K; everything else the base Q3_K.
    const layers = 32;
    const weights = [
      { name: 'token_embd.weight', ne: [2048, 32000] },
      { name: 'output.weight', ne: [2048, 32000] },
      ...Array.from({ length: layers }, (_, l) =>
        ['attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'].map((t) => ({
          name: `blk.${l}.${t}.weight`,
          ne: t === 'ffn_down' ? [5632, 2048] : [2048, t === 'ffn_gate' || t === 'ffn_up' ? 5632 : 2048],
        })),
      ).flat(),
    ];
    const types = mixTypes('Q3_K_M', weights, layers);
    expect(types.get('output.weight')).toBe(GgmlType.Q6_K);
    expect(types.get('token_embd.weight')).toBe(GgmlType.Q3_K);
    for (let l = 0; l < layers; l++) {
      const early = l < 2 ? GgmlType.Q5_K : GgmlType.Q4_K;
      expect(types.get(`blk.${l}.attn_v.weight`), `layer ${l} attn_v`).toBe(early);
      expect(types.get(`blk.${l}.ffn_down.weight`), `layer ${l} ffn_down`).toBe(early);
      expect(types.get(`blk.${l}.attn_output.weight`)).toBe(GgmlType.Q4_K);
      for (const t of ['attn_q', 'attn_k', 'ffn_gate', 'ffn_up'])
        expect(types.get(`blk.${l}.${t}.weight`)).toBe(GgmlType.Q3_K);
    }
    // Below 16 layers n_layer/16 is 0: no ffn_down gets Q5_K; attn_v still counts to 2.
    const small = mixTypes(
      'Q3_K_M',
      weights.filter((w) => /^blk\.[0-7]\./.test(w.name)),
      8,
    );
    expect([0, 1, 2].map((l) => small.get(`blk.${l}.ffn_down.weight`))).toEqual([
      GgmlType.Q4_K,
      GgmlType.Q4_K,
      GgmlType.Q4_K,
    ]);
    expect([0, 1, 2].map((l) => small.get(`blk.${l}.attn_v.weight`))).toEqual([
      GgmlType.Q5_K,
      GgmlType.Q5_K,
      GgmlType.Q4_K,
    ]);
  });

  it('Q3_K_M, tied head, rows of 896: Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, the head Q8_0', () => {
    const tied = mixTypes(
      'Q3_K_M',
      [
        { name: 'token_embd.weight', ne: [896, 1000] },
        { name: 'blk.0.attn_q.weight', ne: [896, 896] },
        { name: 'blk.0.attn_v.weight', ne: [896, 128] },
        { name: 'blk.0.attn_output.weight', ne: [896, 896] },
        { name: 'blk.0.ffn_down.weight', ne: [4864, 896] },
        { name: 'blk.1.attn_qkv.weight', ne: [896, 1152] },
        { name: 'blk.1.attn_v.weight', ne: [896, 128] },
      ],
      2,
    );
    expect(Object.fromEntries(tied)).toEqual({
      'token_embd.weight': GgmlType.Q8_0, // the head's rule: 896 % 256 != 0 gives Q8_0
      'blk.0.attn_q.weight': GgmlType.Q4_0, // Q3_K falls back to Q4_0 (llama.cpp since #19770)
      'blk.0.attn_v.weight': GgmlType.Q5_1, // first attn_v-like: Q5_K, falls back to Q5_1
      'blk.0.attn_output.weight': GgmlType.Q5_0, // Q4_K falls back to Q5_0
      'blk.0.ffn_down.weight': GgmlType.Q4_K, // 4864 = 19 super-blocks; 2/16 = 0 layers of Q5_K
      'blk.1.attn_qkv.weight': GgmlType.Q5_1, // attn_qkv is attn_v-like: the second, Q5_K
      'blk.1.attn_v.weight': GgmlType.Q5_0, // the third: Q4_K
    });
  });

  // tensor_type_fallback: i-quants → IQ4_NL; Q2_K, Q3_K → Q4_0; Q4_K → Q5_0; Q5_K → Q5_1;
  // Q6_K → Q8_0; F16 when 32 does not divide the row either.
  it.each([
    ['IQ2_XXS', 'IQ4_NL'],
    ['IQ2_XS', 'IQ4_NL'],
    ['IQ2_S', 'IQ4_NL'],
    ['IQ3_XXS', 'IQ4_NL'],
    ['IQ3_S', 'IQ4_NL'],
    ['IQ4_XS', 'IQ4_NL'],
    ['Q2_K', 'Q4_0'],
    ['Q3_K', 'Q4_0'],
    ['Q4_K', 'Q5_0'],
    ['Q5_K', 'Q5_1'],
    ['Q6_K', 'Q8_0'],
  ] as const)('fallbackType: %s keeps rows of 1024, gives %s for 896 and F16 for 100', (from, to) => {
    expect(fallbackType(GgmlType[from], 1024)).toBe(GgmlType[from]);
    expect(fallbackType(GgmlType[from], 896)).toBe(GgmlType[to]);
    expect(fallbackType(GgmlType[from], 100)).toBe(GgmlType.F16);
  });

  it('fallbackType: a block of 32 has no fallback in llama.cpp; weft keeps it where it divides, else F16', () => {
    expect(fallbackType(GgmlType.Q8_0, 96)).toBe(GgmlType.Q8_0);
    expect(fallbackType(GgmlType.Q8_0, 100)).toBe(GgmlType.F16);
    expect(fallbackType(GgmlType.IQ4_NL, 100)).toBe(GgmlType.F16);
    expect(fallbackType(GgmlType.F32, 7)).toBe(GgmlType.F32);
  });
});
