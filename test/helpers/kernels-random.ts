// Deterministic random inputs for tests (browser and Node alike), all from one seeded generator:
// mulberry32, as src/model/reference-fixtures.ts defines it for the CPU and GPU model tests.
import { seededRandom } from '../../src/model/reference-fixtures.js';

/** A seeded mulberry32 generator: uniform floats in [0, 1). */
export const rng = seededRandom;

/** `n` values uniform in [-1, 1) from {@link rng}(seed), times `scale`, as f32. */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() * 2 - 1) * scale;
  return out;
}
