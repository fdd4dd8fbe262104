// Deterministic random inputs for tests (browser and Node alike): floats from one seeded generator,
// mulberry32 (as src/model/reference-fixtures.ts defines it for the CPU and GPU model tests), and
// bytes from xorshift32.
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
