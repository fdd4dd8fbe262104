import { describe, expect, it } from 'vitest';
import {
  bitsPerWeight,
  dataWords,
  decode,
  dequantize,
  encode,
  f16BitsToF32,
  f32ToF16Bits,
  gridOf,
  type IntFormat,
  IQ4_VALUES,
  kQuantGrid,
  kQuantParams,
  nearestCode,
  packedBytes,
  type QuantizedMatrix,
  quantize,
  scaleWords,
  type WeightFormat,
} from '../../src/quant/formats.js';
import { randomF32 } from '../helpers/random.js';

const INT_FORMATS: IntFormat[] = [
  'int8',
  'q4_0',
  'q4_1',
  'q5_0',
  'q5_1',
  'int4',
  'q5_k',
  'q6_k',
  'q3_k',
  'iq4_nl',
  'iq4_xs',
  'int2',
];
const FORMATS: WeightFormat[] = ['f32', 'f16', ...INT_FORMATS];
// [rows, cols]: whole super-blocks, and rows·cols not a multiple of 256 (flat padding, blocks
// spanning rows: 688 = 2.6875 super-blocks).
const SHAPES: [number, number][] = [
  [7, 128],
  [3, 688],
  [16, 688],
  [5, 256],
  [1, 16],
];

describe('quantize / dequantize round trip', () => {
  it.each(FORMATS.flatMap((f) => SHAPES.map(([r, c]) => [f, r, c] as const)))(
    '%s [%i, %i]: array sizes, bytes, and every element on its grid nearest the input',
    (format, rows, cols) => {
      const w = randomF32(rows * cols, rows * cols + format.length);
      const q = quantize(w, rows, cols, format);
      const back = dequantize(q);
      const n = rows * cols;
      expect(q.data.length).toBe(dataWords(format, n));
      expect(q.scales?.length ?? 0).toBe(scaleWords(format, n));
      expect(q.data.length * 4 + (q.scales?.length ?? 0) * 4).toBe(packedBytes(format, rows, cols));
      if (format === 'f32') {
        expect(Array.from(back)).toEqual(Array.from(w));
        return;
      }
      if (format === 'f16') {
        for (let i = 0; i < n; i++)
          expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(Math.abs(w[i]!) * 2 ** -11 + 2 ** -25);
        return;
      }
      // Nearest: no other code of the element's grid is closer to the input.
      const { grid, codes } = decode(q);
      for (let i = 0; i < n; i++) {
        const at = (c: number) => Math.fround(grid.scaleAt(i) * c - grid.offsetAt(i));
        expect(back[i]).toBe(at(codes[i]!));
        const err = Math.abs(back[i]! - w[i]!);
        // The neighbouring codes: ±1, or the neighbouring values of the IQ4 table.
        const k = IQ4_VALUES.indexOf(codes[i]!);
        const near =
          format === 'iq4_nl' || format === 'iq4_xs'
            ? [IQ4_VALUES[k - 1], IQ4_VALUES[k + 1]]
            : [codes[i]! - 1, codes[i]! + 1];
        for (const c of near)
          if (c !== undefined && c >= grid.lo && c <= grid.hi)
            expect(err).toBeLessThanOrEqual(Math.abs(at(c) - w[i]!));
      }
    },
  );

  it.each([
    ['int8', 0.0025],
    ['q4_0', 0.042],
    ['q4_1', 0.04],
    ['q5_0', 0.021],
    ['q5_1', 0.02],
    ['int4', 0.034],
    ['q5_k', 0.017],
    ['q6_k', 0.01],
    ['q3_k', 0.09],
    ['iq4_nl', 0.04],
    ['iq4_xs', 0.04],
    ['int2', 0.14],
  ] as const)('%s: RMS error on uniform [-1, 1) weights stays below %f', (format, bound) => {
    const [rows, cols] = [64, 688];
    const w = randomF32(rows * cols, 77);
    const back = dequantize(quantize(w, rows, cols, format));
    let sq = 0;
    for (let i = 0; i < w.length; i++) sq += (back[i]! - w[i]!) ** 2;
    expect(Math.sqrt(sq / w.length)).toBeLessThan(bound);
  });

  it('an all-zero group is exact and a constant one within the f16 rounding of its scale', () => {
    const v = new Float32Array(512);
    v.fill(0.5, 0, 32);
    for (const f of INT_FORMATS) {
      const back = dequantize(quantize(v, 1, 512, f));
      for (let i = 0; i < 32; i++) expect(Math.abs(back[i]! - 0.5)).toBeLessThanOrEqual(0.5 * 2 ** -10);
      for (let i = 32; i < 512; i++) expect(back[i]).toBe(0);
    }
  });

  it('rejects bad shapes', () => {
    expect(() => quantize(new Float32Array(3), 1, 3, 'f16')).toThrow(/even/);
    expect(() => quantize(new Float32Array(10), 1, 64, 'int8')).toThrow(/10 elements/);
    expect(() => quantize(new Float32Array(0), 0, 64, 'int4')).toThrow(/positive/);
    const q = quantize(randomF32(64, 1), 1, 64, 'int4');
    expect(() => dequantize({ ...q, scales: q.scales!.subarray(1) })).toThrow(/scales has 3 words/);
    expect(() => dequantize({ ...q, data: q.data.subarray(1) })).toThrow(/data has 31 words/);
  });
});

describe('bits per weight, from the bytes', () => {
  const nominal: Record<string, number> = {
    int8: 8.5,
    q4_0: 4.5,
    q4_1: 5,
    q5_0: 5.5,
    q5_1: 6,
    int4: 4.5,
    q5_k: 5.5,
    q6_k: 6.5625,
    q3_k: 3.4375,
    iq4_nl: 4.5,
    iq4_xs: 4.25,
    int2: 2.625,
  };
  // The demo target's shapes: K = 688 (down_proj) and K = 256 (the others).
  it.each(
    INT_FORMATS.flatMap((f) =>
      [
        [256, 688],
        [688, 256],
        [16, 688],
        [32, 256],
      ].map(([r, c]) => [f, r!, c!] as const),
    ),
  )('%s [%i, %i]', (format, rows, cols) => {
    const q = quantize(randomF32(rows * cols, 5), rows, cols, format);
    const bits = ((q.data.length + q.scales!.length) * 32) / (rows * cols);
    expect(bits).toBe(bitsPerWeight(format, rows, cols));
    // q6_k keeps its f16 d's two to a word: an odd count of super-blocks leaves 2 bytes unpaired.
    const unpaired =
      (format === 'q6_k' || format === 'q3_k') && (rows * cols) % 512 !== 0 ? 16 / (rows * cols) : 0;
    expect(bits).toBeLessThanOrEqual(nominal[format]! + unpaired);
    if (format === 'q4_0') expect(bits).toBe(4.5);
  });

  it('padding of a last partial block costs a little more than nominal, floats nothing', () => {
    expect(bitsPerWeight('int2', 3, 688)).toBeGreaterThan(2.625);
    expect(bitsPerWeight('f16', 3, 688)).toBe(16);
    expect(bitsPerWeight('f32', 3, 688)).toBe(32);
  });
});

describe('bit layout on hand examples', () => {
  it('int8 (Q8_0): element i in byte i % 4, two’s complement; f16 d per 32, even group low half', () => {
    const w = new Float32Array(64);
    w.set([127, -1, 2, -127, 0, 5]);
    w[32] = -254; // group 1: d = 2
    w[33] = 3; // 1.5 → 2 (half away from zero)
    const q = quantize(w, 1, 64, 'int8');
    expect(q.scales![0]).toBe(0x4000_3c00);
    expect(q.data[0]).toBe(0x81_02_ff_7f);
    expect(q.data[1]).toBe(0x00_00_05_00);
    expect(q.data[8]).toBe(0x00_00_02_81);
    expect(Array.from(dequantize(q).subarray(32, 34))).toEqual([-254, 4]);
  });

  it('q4_0: nibble i % 8, d = max / -8 with max the signed extreme, w = d·(q - 8)', () => {
    const w = new Float32Array(32);
    for (let j = 0; j < 16; j++) w[j] = j - 8; // max = -8 → d = 1, q = w + 8
    const q = quantize(w, 1, 32, 'q4_0');
    expect(q.scales![0]! & 0xffff).toBe(0x3c00);
    expect(q.data[0]).toBe(0x76543210);
    expect(q.data[1]).toBe(0xfedcba98);
    expect(q.data[2]).toBe(0x88888888); // zeros: q = 8
    expect(Array.from(dequantize(q))).toEqual(Array.from(w));
    // A positive extreme gives a negative d: 16 → d = -2, and -16 would need q = 16 (clamped).
    const v = new Float32Array(32);
    v[0] = 16;
    v[1] = -16;
    const p = quantize(v, 1, 32, 'q4_0');
    expect(f16BitsToF32(p.scales![0]! & 0xffff)).toBe(-2);
    expect(Array.from(dequantize(p).subarray(0, 2))).toEqual([16, -14]);
  });

  // scales words built by hand from the field positions of the doc comment.
  const fields = (entries: [pos: number, width: number, value: number][], words: number) => {
    let big = 0n;
    for (const [pos, width, value] of entries)
      big |= (BigInt(value) & ((1n << BigInt(width)) - 1n)) << BigInt(pos);
    return Array.from({ length: words }, (_, k) => Number((big >> BigInt(32 * k)) & 0xffffffffn));
  };

  it('int4 (Q4_K): 6-bit sc_j at bit 6j, mn_j at 6(8 + j) (straddling words), D | M << 16', () => {
    const D = 0x3c00; // 1
    const M = 0x3800; // 0.5
    const sc = [1, 2, 3, 4, 5, 63, 7, 8];
    const mn = [0, 2, 4, 6, 8, 10, 12, 63];
    const words = fields(
      sc.flatMap((s, j) => [
        [6 * j, 6, s],
        [6 * (8 + j), 6, mn[j]!],
      ]) as [number, number, number][],
      3,
    );
    const scales = Uint32Array.from([...words, D | (M << 16)]);
    const data = new Uint32Array(32);
    for (let k = 0; k < 32; k++) data[k] = 0x76543210 + (k & 1) * 0x88888888;
    const q: QuantizedMatrix = { format: 'int4', rows: 1, cols: 256, data, scales };
    const got = dequantize(q);
    for (let i = 0; i < 256; i++) {
      const j = i >> 5;
      expect(got[i]).toBe(sc[j]! * (i & 15) - 0.5 * mn[j]!);
    }
    const { grid, codes } = decode(q);
    expect(grid.scaleAt(5 * 32)).toBe(63);
    expect(grid.offsetAt(7 * 32 + 31)).toBe(31.5);
    expect(encode(grid, codes)).toEqual(q);
  });

  it('int2 (Q2_K): bits 2·(i % 16); byte j of the first four words = sc_j | mn_j << 4', () => {
    const sc = Array.from({ length: 16 }, (_, j) => 15 - j);
    const mn = Array.from({ length: 16 }, (_, j) => j);
    const scales = new Uint32Array(5);
    for (let j = 0; j < 16; j++) scales[j >> 2]! |= (sc[j]! | (mn[j]! << 4)) << (8 * (j & 3));
    scales[4] = 0x3400 | (0x3c00 << 16); // D = 0.25, M = 1
    const data = new Uint32Array(16).fill(0xe4e4e4e4); // codes 0, 1, 2, 3, 0, ...
    const q: QuantizedMatrix = { format: 'int2', rows: 2, cols: 128, data, scales };
    const got = dequantize(q);
    for (let i = 0; i < 256; i++) {
      const j = i >> 4;
      expect(got[i]).toBe(0.25 * sc[j]! * (i & 3) - mn[j]!);
    }
    const { grid, codes } = decode(q);
    expect(encode(grid, codes)).toEqual(q);
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

describe('grid and codes apart (for calibrated rounding)', () => {
  it.each(['int4', 'int2'] as const)(
    '%s: importance-weighted scales lower the weighted error; equal importance changes nothing',
    (format) => {
      const [rows, cols] = [4, 256];
      const w = randomF32(rows * cols, 12);
      const importance = Float32Array.from({ length: cols }, (_, k) => (k % 8 === 0 ? 50 : 1));
      const weightedError = (q: QuantizedMatrix) => {
        const d = dequantize(q);
        let e = 0;
        for (let i = 0; i < w.length; i++) e += importance[i % cols]! * (d[i]! - w[i]!) ** 2;
        return e;
      };
      const nearestOn = (grid: ReturnType<typeof gridOf>) =>
        encode(
          grid,
          Int32Array.from(w, (v, i) => nearestCode(grid, i, v)),
        );
      const plain = quantize(w, rows, cols, format);
      const weighted = nearestOn(gridOf(w, rows, cols, format, importance));
      expect(weightedError(weighted)).toBeLessThan(weightedError(plain));
      expect(nearestOn(gridOf(w, rows, cols, format, new Float32Array(cols).fill(1)))).toEqual(plain);
      expect(() => gridOf(w, rows, cols, format, new Float32Array(cols - 1))).toThrow(/importance has 255/);
    },
  );

  it.each(INT_FORMATS)(
    '%s: quantize = encode(gridOf, nearest codes); other codes encode and decode',
    (format) => {
      const [rows, cols] = [3, 688];
      const w = randomF32(rows * cols, 9);
      const grid = gridOf(w, rows, cols, format);
      const nearest = Int32Array.from(w, (v, i) => nearestCode(grid, i, v));
      expect(encode(grid, nearest)).toEqual(quantize(w, rows, cols, format));
      // Any codes in [lo, hi] survive the packing (the IQ4 formats' codes: any of the table's values).
      const iq4 = format === 'iq4_nl' || format === 'iq4_xs';
      const codes = Int32Array.from(w, (_, i) =>
        iq4 ? IQ4_VALUES[(i * 7) % 16]! : grid.lo + ((i * 7) % (grid.hi - grid.lo + 1)),
      );
      const back = decode(encode(grid, codes));
      expect(back.codes).toEqual(codes);
      expect(back.grid.scales).toEqual(grid.scales);
      expect(() =>
        encode(
          grid,
          codes.map((c, i) => (i === 5 ? grid.hi + 1 : c)),
        ),
      ).toThrow(/outside/);
      expect(() => encode(grid, codes.subarray(1))).toThrow(/codes for/);
      if (iq4)
        expect(() =>
          encode(
            grid,
            codes.map((c, i) => (i === 5 ? 0 : c)),
          ),
        ).toThrow(/IQ4 values/);
    },
  );

  it.each(['int4', 'int2'] as const)(
    '%s: kQuantParams reads D, M, sc, mn as the layout stores them, and kQuantGrid packs them back',
    (format) => {
      const [rows, cols] = [3, 688]; // flat padding: 2064 elements in 9 super-blocks
      const w = randomF32(rows * cols, 21);
      const grid = gridOf(w, rows, cols, format);
      const p = kQuantParams(grid);
      const sub = format === 'int4' ? 32 : 16;
      expect([p.sub, p.maxScale, p.D.length, p.sc.length]).toEqual([
        sub,
        format === 'int4' ? 63 : 15,
        9,
        (9 * 256) / sub,
      ]);
      // Each unit's (scale, offset) is f32(D)·sc and f32(M)·mn, as the kernel computes them.
      for (let i = 0; i < rows * cols; i += 37) {
        const u = Math.floor(i / sub);
        const s = Math.floor(i / 256);
        expect(grid.scaleAt(i)).toBe(Math.fround(f16BitsToF32(p.D[s]!) * p.sc[u]!));
        expect(grid.offsetAt(i)).toBe(Math.fround(f16BitsToF32(p.M[s]!) * p.mn[u]!));
      }
      expect(kQuantGrid(p).scales).toEqual(grid.scales);
      // Changed parameters land in their fields and nowhere else.
      const sc = Uint8Array.from(p.sc, (v, u) => (u === 5 ? p.maxScale - v : v));
      const changed = kQuantGrid({ ...p, sc, D: Uint16Array.from(p.D, (d, s) => (s === 0 ? 0x3c00 : d)) });
      const back = kQuantParams(changed);
      expect(Array.from(back.sc)).toEqual(Array.from(sc));
      expect(Array.from(back.mn)).toEqual(Array.from(p.mn));
      expect(back.D[0]).toBe(0x3c00);
      expect(Array.from(back.M)).toEqual(Array.from(p.M));
      expect(() => kQuantGrid({ ...p, mn: p.mn.map((v, u) => (u === 0 ? p.maxScale + 1 : v)) })).toThrow(
        /sub-block 0/,
      );
      expect(() => kQuantParams(gridOf(w, rows, cols, 'int8'))).toThrow(/not a K-quant/);
    },
  );

  it('grid ranges and offsets: int8 symmetric, q4_0 offset 8d', () => {
    const w = randomF32(64, 3);
    const g8 = gridOf(w, 1, 64, 'int8');
    expect([g8.lo, g8.hi, g8.offsetAt(40)]).toEqual([-127, 127, 0]);
    const g4 = gridOf(w, 1, 64, 'q4_0');
    expect([g4.lo, g4.hi, g4.offsetAt(40)]).toEqual([0, 15, 8 * g4.scaleAt(40)]);
    expect([gridOf(w, 1, 64, 'int4').hi, gridOf(w, 1, 64, 'int2').hi]).toEqual([15, 3]);
  });
});
