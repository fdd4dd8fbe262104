// Deterministic random inputs for kernel tests (browser and Node alike).

/** `n` values uniform in [-1, 1) from a seeded mulberry32 generator, as f32. */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = ((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}
