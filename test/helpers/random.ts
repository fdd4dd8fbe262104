// Deterministic random inputs for tests (browser and Node alike): floats from one seeded generator,
// mulberry32 (as src/model/reference-fixtures.ts defines it for the CPU and GPU model tests), and
// bytes from xorshift32.
import {
  dataWords,
  f32ToF16Bits,
  latticeFormat,
  type QuantizedMatrix,
  quantize,
  scaleWords,
  type WeightFormat,
} from '../../src/quant/formats.js';
import { seededRandom } from '../fixtures/reference.js';

/** A seeded mulberry32 generator: uniform floats in [0, 1). */
export const rng = seededRandom;

/** `n` values uniform in [-1, 1) from {@link rng}(seed), times `scale`, as f32. */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() * 2 - 1) * scale;
  return out;
}

/** `n` deterministic bytes (xorshift32 from `seed`), so a failure can be replayed. */
export function randomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/**
 * A [rows, cols] matrix of `format` with random weights: `quantize` of uniform [-1, 1) values, or
 * for a lattice format (which weft does not quantize to) random code words, every one a valid
 * block (any index, sign and sub-scale bits are), and super-block scales d uniform in ±1/64 as f16,
 * so the weights stay within about ±2.
 */
export function randomMatrix(
  format: WeightFormat,
  rows: number,
  cols: number,
  seed: number,
): QuantizedMatrix {
  if (!latticeFormat(format)) return quantize(randomF32(rows * cols, seed), rows, cols, format);
  const n = rows * cols;
  const bytes = randomBytes(4 * dataWords(format, n), seed);
  const data = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
  const d = randomF32(2 * scaleWords(format, n), seed + 1, 1 / 64);
  const scales = Uint32Array.from({ length: scaleWords(format, n) }, (_, i) => {
    return (f32ToF16Bits(d[2 * i]!) | (f32ToF16Bits(d[2 * i + 1]!) << 16)) >>> 0;
  });
  return { format, rows, cols, data, scales };
}
