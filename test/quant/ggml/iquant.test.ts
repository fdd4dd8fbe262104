// GGML's i-quants (src/quant/ggml/iquant-*.ts): the decoders bit for bit against gguf-py's numpy
// dequantizers on random blocks (test/fixtures/gguf-iquant-golden.json, written by
// scripts/gguf-iquant-golden.py, which also checks numpy against llama.cpp's compiled C decoders),
// the codebooks against gguf-py's independent copy, and the encoders: error against llama.cpp's own
// encoders on the same matrix, the optimality of each group's lattice point, the effect of an
// importance vector, block independence, the re-encoding of decoded blocks, and input checks.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../../src/errors.js';
import { f16BitsToF32 } from '../../../src/gpu/half.js';
import { dequantizeGgml, GGML_BLOCKS, quantizeGgml } from '../../../src/quant/ggml/blocks.js';
import { IQ4NL_VALUES, KSIGNS_IQ2XS } from '../../../src/quant/ggml/iquant-decode.js';
import { IQUANT_CODECS } from '../../../src/quant/ggml/iquant-encode.js';
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from '../../../src/quant/iq-grids.js';
import { randomBytes } from '../../helpers/random.js';

const TYPES = {
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ2_S: 22,
  IQ3_XXS: 18,
  IQ3_S: 21,
  IQ4_NL: 20,
  IQ4_XS: 23,
} as const;
type TypeName = keyof typeof TYPES;
const NAMES = Object.keys(TYPES) as TypeName[];

interface Golden {
  llamaCppCommit: string;
  gridHash: Record<'IQ2_XXS' | 'IQ2_XS' | 'IQ2_S' | 'IQ3_XXS' | 'IQ3_S', number>;
  ksignsHash: number;
  iq4nlValues: number[];
  llamaCppError: { rows: number; cols: number } & Record<TypeName, { none: number; importance: number }>;
}
const golden: Golden & Record<TypeName, { blocks: number; bytes: string; values: string }> = JSON.parse(
  readFileSync(new URL('../../fixtures/gguf-iquant-golden.json', import.meta.url), 'utf8'),
);

function fromBase64(s: string): Uint8Array {
  return new Uint8Array(Buffer.from(s, 'base64'));
}

function bits(x: Float32Array): Uint32Array {
  return new Uint32Array(x.buffer, x.byteOffset, x.length);
}

function codec(name: TypeName) {
  return IQUANT_CODECS.get(TYPES[name])!;
}

function geometry(name: TypeName): { elems: number; bytes: number } {
  return GGML_BLOCKS.get(TYPES[name])!;
}

/** FNV-1a 32, as the golden script hashes the codebooks. */
function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}

/** A grid's coordinates in entry order from its little-endian u32 words (byte j of word w). */
function gridBytes(words: Uint32Array): Uint8Array {
  return Uint8Array.from({ length: 4 * words.length }, (_, b) => (words[b >> 2]! >>> (8 * (b & 3))) & 255);
}

describe('i-quants decode as gguf-py (and ggml) do, bit for bit', () => {
  it.each(NAMES)('%s: random blocks (zero, negative and subnormal d among them)', (name) => {
    const g = golden[name];
    const bytes = fromBase64(g.bytes);
    const want = new Uint32Array(fromBase64(g.values).buffer);
    const count = g.blocks * geometry(name).elems;
    // The fixture holds signed zeros (d = 0 under set sign bits), so the comparison sees signs.
    expect(want.some((v) => v === 0x80000000)).toBe(true);
    const first = (got: Float32Array) => bits(got).findIndex((v, i) => v !== want[i]);
    expect(first(codec(name).dequantize(bytes, count))).toBe(-1);
    // blocks.ts routes its dequantizer to the codec.
    expect(first(dequantizeGgml(TYPES[name], bytes, count))).toBe(-1);
  });

  it('the exported codebooks are the ones gguf-py decodes with (its own copy of ggml-common.h’s)', () => {
    const grids = {
      IQ2_XXS: IQ2XXS_GRID,
      IQ2_XS: IQ2XS_GRID,
      IQ2_S: IQ2S_GRID,
      IQ3_XXS: IQ3XXS_GRID,
      IQ3_S: IQ3S_GRID,
    };
    // Entries × u32 words per entry: 8 coordinates (two words) for IQ2, 4 (one) for IQ3.
    expect([IQ2XXS_GRID, IQ2XS_GRID, IQ2S_GRID, IQ3XXS_GRID, IQ3S_GRID].map((g) => g.length)).toEqual([
      256 * 2,
      512 * 2,
      1024 * 2,
      256,
      512,
    ]);
    for (const [name, words] of Object.entries(grids))
      expect(fnv1a(gridBytes(words)), name).toBe(golden.gridHash[name as keyof typeof grids]);
    expect(fnv1a(KSIGNS_IQ2XS)).toBe(golden.ksignsHash);
    // ksigns: 7 stored bits, the 8th their parity, so every pattern has an even number of bits.
    for (let i = 0; i < 128; i++)
      expect([KSIGNS_IQ2XS[i]! & 127, popcount(KSIGNS_IQ2XS[i]!) % 2]).toEqual([i, 0]);
    expect([...IQ4NL_VALUES]).toEqual(golden.iq4nlValues);
  });
});

function popcount(v: number): number {
  let n = 0;
  for (let b = v; b; b &= b - 1) n++;
  return n;
}

/**
 * The matrix and column importance scripts/gguf-iquant-golden.py gave llama.cpp's encoders, drawn
 * the same way from the same LCG (every step exact in float64, so Python and JS agree): per column
 * a scale 2^(−1..1), then an importance 2^(−3..3), then values (Σ of 12 uniforms − 6)·scale.
 */
function llamaMatrix(rows: number, cols: number): { x: Float32Array; importance: Float32Array } {
  let state = 20260822;
  const u = () => {
    state = (state * 1664525 + 1013904223) % 2 ** 32;
    return state / 2 ** 32;
  };
  const scale = Array.from({ length: cols }, () => 2 ** (Math.floor(u() * 3) - 1));
  const importance = Float32Array.from({ length: cols }, () => 2 ** (Math.floor(u() * 7) - 3));
  const x = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      let s = 0;
      for (let k = 0; k < 12; k++) s += u();
      x[r * cols + c] = (s - 6) * scale[c]!;
    }
  return { x, importance };
}

/** √(Σ c·(x − y)² / Σ c·x²) over the columns `keep` selects, c the column weight (1 without). */
function relativeError(
  x: Float32Array,
  y: Float32Array,
  cols: number,
  weight?: Float32Array,
  keep: (col: number) => boolean = () => true,
): number {
  let e = 0;
  let s = 0;
  for (let i = 0; i < x.length; i++) {
    if (!keep(i % cols)) continue;
    const c = weight ? weight[i % cols]! : 1;
    e += c * (x[i]! - y[i]!) ** 2;
    s += c * x[i]! ** 2;
  }
  return Math.sqrt(e / s);
}

describe('i-quant encoders', () => {
  it.each(NAMES)(
    '%s: no more error than llama.cpp’s own encoder on the same matrix, with and without importance',
    (name) => {
      const { rows, cols, [name]: theirs } = golden.llamaCppError;
      const { x, importance } = llamaMatrix(rows, cols);
      const c = codec(name);
      const plain = relativeError(x, c.dequantize(c.quantize(x), x.length), cols);
      const weighted = relativeError(x, c.dequantize(c.quantize(x, importance), x.length), cols, importance);
      console.log(
        `[${name}] relative error weft / llama.cpp: ${plain.toFixed(4)} / ${theirs.none.toFixed(4)} unweighted, ${weighted.toFixed(4)} / ${theirs.importance.toFixed(4)} with importance`,
      );
      expect(plain).toBeLessThanOrEqual(theirs.none);
      expect(weighted).toBeLessThanOrEqual(theirs.importance);
      // The format's floor: 2-bit lattices keep a fifth of the signal's rms at best, 4-bit ones a tenth.
      expect(weighted).toBeLessThan(name.startsWith('IQ4') ? 0.1 : name.startsWith('IQ3') ? 0.2 : 0.35);
    },
    30_000,
  );

  it.each(['IQ2_XS', 'IQ3_XXS', 'IQ2_S'] as const)(
    '%s: every group of 8 is the best point the codebook and sign rule allow at its stored scale',
    (name) => {
      // Brute force over every sign pattern (for ksigns types the even ones) and, per grid group,
      // every entry, with the weights the encoder documents: √(σ² + x²) without importance, σ² the
      // block's mean square (doubled but for IQ2_XXS and IQ2_XS).
      const { x } = llamaMatrix(1, 512);
      const bytes = codec(name).quantize(x);
      const y = codec(name).dequantize(bytes, x.length);
      const { grid, dim, parity } = {
        IQ2_XS: { grid: gridBytes(IQ2XS_GRID), dim: 8, parity: true },
        IQ3_XXS: { grid: gridBytes(IQ3XXS_GRID), dim: 4, parity: true },
        IQ2_S: { grid: gridBytes(IQ2S_GRID), dim: 8, parity: false },
      }[name];
      const entries = grid.length / dim;
      const sigmaFactor = name === 'IQ2_XS' ? 1 : 2;
      // errs[e·8 + j]: weighted squared error of value j as coordinate j mod dim of entry e, positive
      // (pos) or negative (neg); the entry of the grid group holding value j.
      const pos = new Float64Array(entries * 8);
      const neg = new Float64Array(entries * 8);
      for (let b = 0; b < x.length / 256; b++) {
        let sumX2 = 0;
        for (let i = 0; i < 256; i++) sumX2 += x[256 * b + i]! ** 2;
        const sigma2 = (sigmaFactor * sumX2) / 256;
        for (let g = 0; g < 32; g++) {
          const at = 256 * b + 8 * g;
          const db = groupScale(name, bytes, b, g);
          for (let e = 0; e < entries; e++)
            for (let j = 0; j < 8; j++) {
              const w = Math.sqrt(sigma2 + x[at + j]! ** 2);
              const v = Math.fround(db * grid[e * dim + (j % dim)]!);
              pos[e * 8 + j] = w * (x[at + j]! - v) ** 2;
              neg[e * 8 + j] = w * (x[at + j]! + v) ** 2;
            }
          let best = Infinity;
          for (let signs = 0; signs < 256; signs++) {
            if (parity && popcount(signs) % 2 === 1) continue;
            let total = 0;
            for (let j0 = 0; j0 < 8; j0 += dim) {
              let part = Infinity;
              for (let e = 0; e < entries; e++) {
                let s = 0;
                for (let j = j0; j < j0 + dim; j++) s += (signs >> j) & 1 ? neg[e * 8 + j]! : pos[e * 8 + j]!;
                part = Math.min(part, s);
              }
              total += part;
            }
            best = Math.min(best, total);
          }
          let stored = 0;
          for (let j = 0; j < 8; j++)
            stored += Math.sqrt(sigma2 + x[at + j]! ** 2) * (x[at + j]! - y[at + j]!) ** 2;
          // (The encoder searches with unrounded db·g: a tie within f32 rounding may go either way.)
          expect(stored, `block ${b} group ${g}`).toBeLessThanOrEqual(best * (1 + 1e-6));
        }
      }
    },
    60_000,
  );

  it.each(NAMES)('%s: importance decides which columns come out more accurate', (name) => {
    const cols = 512;
    const { x } = llamaMatrix(8, cols);
    // Alternating stripes of 16 columns, so both kinds share every sub-block.
    const stripe = (c: number) => ((c >> 4) & 1) === 0;
    const favour = (first: boolean) =>
      Float32Array.from({ length: cols }, (_, c) => (stripe(c) === first ? 16 : 1));
    const c = codec(name);
    const a = c.dequantize(c.quantize(x, favour(true)), x.length);
    const b = c.dequantize(c.quantize(x, favour(false)), x.length);
    const onStripe = (y: Float32Array) => relativeError(x, y, cols, undefined, stripe);
    const offStripe = (y: Float32Array) => relativeError(x, y, cols, undefined, (col) => !stripe(col));
    expect(onStripe(a)).toBeLessThan(onStripe(b));
    expect(offStripe(b)).toBeLessThan(offStripe(a));
  });

  it.each(NAMES)('%s: blocks are independent and importance is indexed by column', (name) => {
    const cols = 512;
    const rows = 3;
    const { x, importance } = llamaMatrix(rows, cols);
    const { bytes } = geometry(name);
    const whole = codec(name).quantize(x, importance);
    expect(whole.length).toBe(((rows * cols) / geometry(name).elems) * bytes);
    for (let r = 0; r < rows; r++) {
      const row = codec(name).quantize(x.subarray(r * cols, (r + 1) * cols), importance);
      expect(whole.subarray(r * row.length, (r + 1) * row.length)).toEqual(row);
    }
    // quantizeGgml routes to the codec.
    expect(quantizeGgml(TYPES[name], x, importance)).toEqual(whole);
  });

  it.each(NAMES)('%s: re-encoding decoded random blocks gives the same values back', (name) => {
    const { elems, bytes: size } = geometry(name);
    const n = 24;
    const blocks = randomBytes(n * size, 1000 + TYPES[name]);
    // d a normal positive f16 around 1/128 (a subnormal d would make the values’ scales collide).
    for (let k = 0; k < n; k++) {
      blocks[k * size] = blocks[k * size]! & 0xff;
      blocks[k * size + 1] = 0x1e + (k % 4);
    }
    const y = codec(name).dequantize(blocks, n * elems);
    const again = codec(name).dequantize(codec(name).quantize(y), y.length);
    // Every decoded block is an exact lattice point, so the best encoding has zero error.
    expect(relativeError(y, again, y.length)).toBeLessThan(1e-6);
  });

  it('an all-zero input encodes to zeros', () => {
    for (const name of NAMES) {
      const x = new Float32Array(512);
      const y = codec(name).dequantize(codec(name).quantize(x), x.length);
      expect(
        y.every((v) => v === 0),
        name,
      ).toBe(true);
    }
  });
});

/**
 * The decoded scale db of group g (8 values) of block b, from the stored d and 4-bit scale code,
 * by the formulas of the module header.
 */
function groupScale(name: 'IQ2_XS' | 'IQ3_XXS' | 'IQ2_S', bytes: Uint8Array, b: number, g: number): number {
  const fr = Math.fround;
  const size = geometry(name).bytes;
  const at = b * size;
  const d = f16BitsToF32(bytes[at]! | (bytes[at + 1]! << 8));
  const i = g >> 2;
  if (name === 'IQ3_XXS') {
    const s = bytes[at + 66 + 4 * i + 3]! >> 4;
    return fr(fr(d * (0.5 + s)) * 0.5);
  }
  const sc = bytes[at + (name === 'IQ2_XS' ? 66 : 74) + i]!;
  const s = (g & 3) < 2 ? sc & 15 : sc >> 4;
  return fr(fr(d * (0.5 + s)) * 0.25);
}

describe('i-quant input checks', () => {
  it.each(NAMES)('%s: bad sizes, non-finite values and bad importance throw InvalidInputError', (name) => {
    const { elems, bytes } = geometry(name);
    const c = codec(name);
    const block = new Uint8Array(bytes);
    expect(() => c.dequantize(block, elems + 1)).toThrow(InvalidInputError);
    expect(() => c.dequantize(block, 2 * elems)).toThrow(InvalidInputError);
    expect(() => dequantizeGgml(TYPES[name], block, 2 * elems)).toThrow(InvalidInputError);
    expect(() => c.quantize(new Float32Array(elems + 16))).toThrow(InvalidInputError);
    expect(() => quantizeGgml(TYPES[name], new Float32Array(elems + 16))).toThrow(InvalidInputError);
    const x = new Float32Array(2 * elems);
    expect(() => c.quantize(x, new Float32Array(3))).toThrow(/importance/);
    expect(() => c.quantize(x, new Float32Array(elems).fill(-1))).toThrow(/importance\[0\] = -1/);
    // A block scale past f16's largest, 65504, cannot be stored.
    expect(() => c.quantize(new Float32Array(elems).fill(1e9))).toThrow(/block 0's scale .*overflows f16/);
    x[5] = Number.NaN;
    expect(() => c.quantize(x)).toThrow(/x\[5\] = NaN/);
  });
});
