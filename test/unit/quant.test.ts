import { describe, expect, it } from 'vitest';
import {
  dequantize,
  f16BitsToF32,
  f32ToF16Bits,
  packedBytes,
  quantize,
  type WeightFormat,
} from '../../src/kernels/matmul/quant.js';
import { randomF32 } from '../helpers/random.js';

describe('quantize / dequantize round trip', () => {
  const rows = 7;
  const cols = 128;
  const w = randomF32(rows * cols, 1);
  // Worst-case error per element: half a step for round-to-nearest formats.
  const cases: [WeightFormat, number | undefined, (q: ReturnType<typeof quantize>, i: number) => number][] = [
    ['f32', undefined, () => 0],
    ['f16', undefined, (_q, i) => Math.abs(w[i]!) * 2 ** -11 + 2 ** -25],
    ['int8', undefined, (q, i) => q.scales![Math.floor(i / cols)]! / 2],
    ['int8', 32, (q, i) => q.scales![Math.floor(i / 32)]! / 2],
    ['int4', 32, (q, i) => q.scales![Math.floor(i / 32)]! / 2],
    ['int4', 128, (q, i) => q.scales![Math.floor(i / 128)]! / 2],
    ['int2', 16, (q, i) => q.scales![Math.floor(i / 16)]! / 2],
    ['int2', 64, (q, i) => q.scales![Math.floor(i / 64)]! / 2],
  ];
  it.each(cases)('%s group %s stays within half a step', (format, group, bound) => {
    const q = quantize(w, rows, cols, format, group);
    const back = dequantize(q);
    let worst = 0;
    for (let i = 0; i < w.length; i++) {
      const err = Math.abs(back[i]! - w[i]!);
      worst = Math.max(worst, err / (bound(q, i) * (1 + 1e-6) + 1e-12));
    }
    if (format === 'f32') expect(Array.from(back)).toEqual(Array.from(w));
    expect(worst).toBeLessThanOrEqual(1);
    expect(q.data.length * 4 + (q.scales?.length ?? 0) * 4 + (q.zeros?.length ?? 0) * 4).toBe(
      packedBytes(format, rows, cols, q.group),
    );
  });

  it('a constant group and an all-zero group survive', () => {
    const v = new Float32Array(64);
    v.fill(0.5, 0, 32);
    for (const f of ['int8', 'int4', 'int2'] as const) {
      const back = dequantize(quantize(v, 1, 64, f, 32));
      expect(Array.from(back)).toEqual(Array.from(v));
    }
  });

  it('rejects bad shapes', () => {
    expect(() => quantize(new Float32Array(40), 1, 40, 'int4', 40)).toThrow(/multiple of 16/);
    expect(() => quantize(new Float32Array(128), 1, 128, 'int2', 128)).toThrow(/group <= 64/);
    expect(() => quantize(new Float32Array(3), 1, 3, 'f16')).toThrow(/even/);
    expect(() => quantize(new Float32Array(10), 1, 64, 'int8')).toThrow(/10 elements/);
  });
});

describe('bit layout on hand examples', () => {
  it('int8: element j in byte j%4, two’s complement, scale max/127', () => {
    const w = new Float32Array(16);
    w.set([127, -1, 2, -127, 0, 5]);
    const q = quantize(w, 1, 16, 'int8');
    expect(q.scales![0]).toBe(1);
    expect(q.data[0]).toBe(0x81_02_ff_7f);
    expect(q.data[1]).toBe(0x00_00_05_00);
  });

  it('int4: element j in nibble j%8, zero point', () => {
    // range [-1, 14] → scale 1, zero 1: codes = w + 1.
    const w = new Float32Array(16);
    for (let j = 0; j < 16; j++) w[j] = (j % 16) - 1;
    const q = quantize(w, 1, 16, 'int4', 16);
    expect(q.scales![0]).toBe(1);
    expect(q.zeros![0]).toBe(1);
    expect(q.data[0]).toBe(0x76543210);
    expect(q.data[1]).toBe(0xfedcba98);
  });

  it('int2: element j in bits 2*(j%16)', () => {
    // range [-1, 2] → scale 1, zero 1: codes = w + 1 → 0,1,2,3,0,1,...
    const w = new Float32Array(16);
    for (let j = 0; j < 16; j++) w[j] = (j % 4) - 1;
    const q = quantize(w, 1, 16, 'int2', 16);
    expect(q.zeros![0]).toBe(1);
    expect(q.data[0]).toBe(0xe4e4e4e4);
  });

  it('f16: element 2j in the low half, round to nearest even', () => {
    const q = quantize(new Float32Array([1, -2, 65504, 1 + 2 ** -11]), 1, 4, 'f16');
    expect(q.data[0]).toBe(0xc000_3c00);
    expect(q.data[1]).toBe(0x3c00_7bff); // 1 + 2^-11 is a tie → even (1.0)
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie → even (up)
    expect(f32ToF16Bits(2 ** -24)).toBe(1); // smallest subnormal
    expect(f32ToF16Bits(2 ** -25)).toBe(0); // tie with zero → even (zero)
    expect(f32ToF16Bits(1e6)).toBe(0x7c00);
    expect(f16BitsToF32(0x0001)).toBe(2 ** -24);
    for (let h = 0; h < 0x7c00; h += 37) expect(f32ToF16Bits(f16BitsToF32(h))).toBe(h);
  });
});
