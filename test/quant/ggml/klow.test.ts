// GGML's Q2_K and Q3_K (src/quant/ggml/klow.ts): the decoders bit for bit against gguf-py's numpy
// dequantizers on random blocks (test/fixtures/gguf-klow-golden.json, written by
// scripts/gguf-klow-golden.py, which also checks that numpy rounds where ggml's C code does), the
// field readers a GPU repack uses against the same values, and the encoders: error against
// llama.cpp's own encoders on the same data, the effect of an importance vector, block
// independence, and the checks on their inputs.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../../src/errors.js';
import { f16BitsToF32 } from '../../../src/gpu/half.js';
import { dequantizeGgml, GgmlType, quantizeGgml } from '../../../src/quant/ggml/blocks.js';
import { KLOW_CODECS, q2kCodes, q3kCodes, q3kScales } from '../../../src/quant/ggml/klow.js';
import { rng } from '../../helpers/random.js';

const fr = Math.fround;
const Q2K = KLOW_CODECS.get(10)!;
const Q3K = KLOW_CODECS.get(11)!;

interface Golden {
  blocks: number;
  bytes: string;
  values: string;
}
const golden: Record<'Q2_K' | 'Q3_K', Golden> = JSON.parse(
  readFileSync(new URL('../../fixtures/gguf-klow-golden.json', import.meta.url), 'utf8'),
);

function fromBase64(s: string): Uint8Array {
  return new Uint8Array(Buffer.from(s, 'base64'));
}

/** The golden blocks' bytes and gguf-py's values, as f32 bit patterns (so −0 and +0 differ). */
function goldenOf(type: 'Q2_K' | 'Q3_K'): { bytes: Uint8Array; count: number; want: Uint32Array } {
  const g = golden[type];
  const values = fromBase64(g.values);
  return { bytes: fromBase64(g.bytes), count: 256 * g.blocks, want: new Uint32Array(values.buffer) };
}

function bits(x: Float32Array): Uint32Array {
  return new Uint32Array(x.buffer, x.byteOffset, x.length);
}

/** The first index where two bit patterns differ, or −1. */
function firstDiff(got: Uint32Array, want: Uint32Array): number {
  expect(got.length).toBe(want.length);
  return got.findIndex((v, i) => v !== want[i]);
}

describe('Q2_K and Q3_K decode as gguf-py (and ggml) do, bit for bit', () => {
  it.each([
    ['Q2_K', Q2K, GgmlType.Q2_K],
    ['Q3_K', Q3K, GgmlType.Q3_K],
  ] as const)('%s: 12 random blocks (zero, negative and subnormal d among them)', (type, codec, id) => {
    const { bytes, count, want } = goldenOf(type);
    // The fixture holds signed zeros, so the comparison sees signs.
    expect(want.some((v) => v === 0x80000000)).toBe(true);
    expect(firstDiff(bits(codec.dequantize(bytes, count)), want)).toBe(-1);
    // blocks.ts routes its dequantizer to the codec.
    expect(firstDiff(bits(dequantizeGgml(id, bytes, count)), want)).toBe(-1);
  });

  it('the repack readers give the same values: Q2_K dl·code − ml from q2kCodes and the scale bytes', () => {
    const { bytes, count, want } = goldenOf('Q2_K');
    const codes = new Uint8Array(256);
    const got = new Float32Array(count);
    for (let b = 0; b < count / 256; b++) {
      const at = 84 * b;
      q2kCodes(bytes, at, codes);
      expect(Math.max(...codes)).toBeLessThanOrEqual(3);
      const d = f16BitsToF32(bytes[at + 80]! | (bytes[at + 81]! << 8));
      const dmin = f16BitsToF32(bytes[at + 82]! | (bytes[at + 83]! << 8));
      for (let e = 0; e < 256; e++) {
        const sm = bytes[at + (e >> 4)]!;
        got[256 * b + e] = fr(fr(fr(d * (sm & 15)) * codes[e]!) - fr(dmin * (sm >> 4)));
      }
    }
    expect(firstDiff(bits(got), want)).toBe(-1);
  });

  it('the repack readers give the same values: Q3_K (d·scale)·(raw − 4) from q3kScales and q3kCodes', () => {
    const { bytes, count, want } = goldenOf('Q3_K');
    const raw = new Uint8Array(256);
    const got = new Float32Array(count);
    for (let b = 0; b < count / 256; b++) {
      const at = 110 * b;
      q3kCodes(bytes, at, raw);
      const scales = q3kScales(bytes, at);
      expect(Math.max(...raw)).toBeLessThanOrEqual(7);
      for (const s of scales) expect(s >= -32 && s <= 31).toBe(true);
      const d = f16BitsToF32(bytes[at + 108]! | (bytes[at + 109]! << 8));
      for (let e = 0; e < 256; e++) got[256 * b + e] = fr(fr(d * scales[e >> 4]!) * (raw[e]! - 4));
    }
    expect(firstDiff(bits(got), want)).toBe(-1);
    // Golden block 1 sets every 6-bit field to 32 (low nibbles 0, high pairs 0b10): scale 0.
    expect([...q3kScales(bytes, 110)]).toEqual(new Array(16).fill(0));
  });

  it('q3kCodes reads the hmask bit as bit 2: all-ones hmask and qs give 7 (q = 3), all-zero 0 (q = −4)', () => {
    const block = new Uint8Array(110);
    const raw = new Uint8Array(256);
    block.fill(0xff, 0, 96);
    q3kCodes(block, 0, raw);
    expect(raw.every((v) => v === 7)).toBe(true);
    block.fill(0, 0, 32); // hmask clear: 3 − 4 = −1, raw 3
    q3kCodes(block, 0, raw);
    expect(raw.every((v) => v === 3)).toBe(true);
    // One bit: hmask[5] bit 6 is value 128·1 + 32·2 + 5 = 197 (n = 1, j = 2, l = 5).
    block.fill(0, 0, 96);
    block[5] = 1 << 6;
    q3kCodes(block, 0, raw);
    expect([...raw.keys()].filter((e) => raw[e] !== 0)).toEqual([197]);
  });
});

// Weight-like test data: rows of 512 Gaussians, the row scale growing from 0.5 to 1.5, and 1 %
// outliers six times as large; an importance vector per column, log-normal.
const COLS = 512;
const ROWS = 32;

function gaussians(seed: number, n: number): Float32Array {
  const r = rng(seed);
  return Float32Array.from(
    { length: n },
    () => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r()),
  );
}

function weightsLike(seed: number): Float32Array {
  const g = gaussians(seed, COLS * ROWS);
  const r = rng(seed + 1);
  return g.map((v, i) => v * (0.5 + Math.trunc(i / COLS) / ROWS) * (r() < 0.01 ? 6 : 1));
}

/** sqrt(Σ w·(y − x)² / Σ w), w(i) the weight of element i. */
function weightedRms(x: Float32Array, y: Float32Array, w: (i: number) => number): number {
  let s = 0;
  let sw = 0;
  for (let i = 0; i < x.length; i++) {
    s += w(i) * (y[i]! - x[i]!) ** 2;
    sw += w(i);
  }
  return Math.sqrt(s / sw);
}

describe('Q2_K and Q3_K encoders', () => {
  const x = weightsLike(5);
  const importance = gaussians(7, COLS).map((v) => Math.exp(1.5 * v));
  const one = () => 1;

  // llama.cpp's own encoders on this same x (ggml-quants.c at 3f545bec compiled as is:
  // quantize_q2_K / quantize_q3_K, without and with `importance` as quant_weights), measured
  // once: the RMS error, and the error each encoder minimises. Without importance llama.cpp
  // weighs Q2_K's errors by |x| and Q3_K's by x², with importance by importance·sqrt(σ² + x²).
  it.each([
    ['Q2_K', false, 0.38377, 0.37331, Q2K],
    ['Q3_K', false, 0.21275, 0.23716, Q3K],
    ['Q2_K', true, 0.37728, 0.27325, Q2K],
    ['Q3_K', true, 0.22022, 0.1781, Q3K],
  ] as const)(
    '%s (importance: %s): RMS error at most %s·1.02, weighted error at most %s (llama.cpp’s)',
    (_type, withImportance, llamaRms, llamaWeighted, codec) => {
      const y = codec.dequantize(codec.quantize(x, withImportance ? importance : undefined), x.length);
      const objective = withImportance
        ? (i: number) => importance[i % COLS]!
        : codec === Q2K
          ? (i: number) => Math.abs(x[i]!)
          : (i: number) => x[i]! ** 2;
      expect(weightedRms(x, y, objective)).toBeLessThanOrEqual(llamaWeighted);
      expect(weightedRms(x, y, one)).toBeLessThanOrEqual(llamaRms * 1.02);
    },
  );

  it.each([
    ['Q2_K', 0.4, Q2K],
    ['Q3_K', 0.25, Q3K],
  ] as const)('%s: no value off by more than %s of its block’s largest |x|', (_type, bound, codec) => {
    const y = codec.dequantize(codec.quantize(x), x.length);
    for (let b = 0; b < x.length / 256; b++) {
      const xs = x.subarray(256 * b, 256 * b + 256);
      const amax = Math.max(...xs.map(Math.abs));
      for (let i = 0; i < 256; i++)
        expect(Math.abs(y[256 * b + i]! - xs[i]!)).toBeLessThanOrEqual(bound * amax);
    }
  });

  it.each([
    ['Q2_K', Q2K],
    ['Q3_K', Q3K],
  ] as const)(
    '%s: columns of 100× importance get at most 0.8× the error, the others more',
    (_type, codec) => {
      // Element i weighs importance[i % 512]: the first 4 columns of every 16 count 100×.
      const heavy = (c: number) => c % 16 < 4;
      const emphasis = Float32Array.from({ length: COLS }, (_, c) => (heavy(c) ? 100 : 1));
      const plain = codec.dequantize(codec.quantize(x), x.length);
      const weighted = codec.dequantize(codec.quantize(x, emphasis), x.length);
      const on = (i: number) => (heavy(i % COLS) ? 1 : 0);
      const off = (i: number) => 1 - on(i);
      expect(weightedRms(x, weighted, on)).toBeLessThan(0.8 * weightedRms(x, plain, on));
      expect(weightedRms(x, weighted, off)).toBeGreaterThan(weightedRms(x, plain, off));
    },
  );

  it.each([
    ['Q2_K', Q2K, 84],
    ['Q3_K', Q3K, 110],
  ] as const)(
    '%s: blocks encode independently, and only relative importance counts',
    (_type, codec, size) => {
      const all = codec.quantize(x, importance);
      const rowBytes = (COLS / 256) * size;
      for (const r of [0, 13, ROWS - 1]) {
        const row = codec.quantize(x.subarray(r * COLS, (r + 1) * COLS), importance);
        expect(all.subarray(r * rowBytes, (r + 1) * rowBytes)).toEqual(row);
      }
      // ×4 is exact in binary floating point, so every comparison the search makes is unchanged.
      expect(
        codec.quantize(
          x,
          importance.map((v) => 4 * v),
        ),
      ).toEqual(all);
      expect(codec.quantize(x)).toEqual(
        Uint8Array.from(
          Array.from({ length: ROWS }, (_, r) => [
            ...codec.quantize(x.subarray(r * COLS, (r + 1) * COLS)),
          ]).flat(),
        ),
      );
    },
  );

  it.each([
    ['Q2_K', Q2K],
    ['Q3_K', Q3K],
  ] as const)('%s: zeros decode to +0, a constant block to within f16 rounding', (_type, codec) => {
    const zeros = codec.dequantize(codec.quantize(new Float32Array(512)), 512);
    expect(zeros.every((v) => Object.is(v, 0))).toBe(true);
    for (const c of [-0.3, 0.3, 2.5]) {
      const y = codec.dequantize(codec.quantize(new Float32Array(256).fill(c)), 256);
      for (const v of y) expect(Math.abs(v - c)).toBeLessThanOrEqual(Math.abs(c) * 2 ** -10);
    }
  });

  it('blocks.ts routes quantizeGgml to the codecs', () => {
    expect(quantizeGgml(GgmlType.Q2_K, x, importance)).toEqual(Q2K.quantize(x, importance));
    expect(quantizeGgml(GgmlType.Q3_K, x)).toEqual(Q3K.quantize(x));
  });

  it.each([
    ['Q2_K', Q2K],
    ['Q3_K', Q3K],
  ] as const)('%s: bad sizes and values throw InvalidInputError naming them', (type, codec) => {
    const bad: [() => unknown, RegExp][] = [
      [() => codec.quantize(new Float32Array(300)), /x\.length 300/],
      [() => codec.quantize(new Float32Array(512), new Float32Array(3)), /importance\.length 3/],
      [() => codec.quantize(new Float32Array(512), new Float32Array(0)), /importance\.length 0/],
      [() => codec.quantize(new Float32Array(256), new Float32Array(256).fill(-1)), /importance\[0\] is -1/],
      [() => codec.quantize(Float32Array.of(...new Array(255).fill(0), Number.NaN)), /x\[255\] is NaN/],
      [() => codec.quantize(new Float32Array(256).fill(1e9)), /beyond f16/],
      [() => codec.dequantize(new Uint8Array(1000), 100), /count 100/],
      [() => codec.dequantize(new Uint8Array(80), 256), /need \d+ bytes, got 80/],
    ];
    for (const [call, message] of bad) {
      expect(call).toThrow(InvalidInputError);
      expect(call).toThrow(message);
      expect(call).toThrow(type);
    }
  });
});
