// Typed reads of GGUF metadata keys, each error naming the file's key and value (the families'
// GGUF readers, model/families/, share them).
import { ModelFormatError } from '../errors.js';
import type { GgufFile, GgufValue } from './header.js';

export function meta(g: GgufFile, key: string): GgufValue | undefined {
  return g.metadata.get(key);
}

export function metaCount(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a positive integer',
    );
  }
  return v;
}

/**
 * The shortest decimal that rounds to the same f32 as `v`: GGUF stores `rms_norm_eps` and
 * `rope.freq_base` as f32, and the spec should read 1e-6, not 9.99999997e-7.
 */
function shortestF32(v: number): number {
  for (let p = 1; p < 9; p++) {
    const d = Number(v.toPrecision(p));
    if (Math.fround(d) === Math.fround(v)) return d;
  }
  return v;
}

export function metaNumber(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) {
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a finite number > 0',
    );
  }
  return shortestF32(v);
}

/** An optional count at `key`: an integer ≥ 0, 0 when absent. */
export function metaCountOrZero(g: GgufFile, key: string): number {
  const v = meta(g, key) ?? 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new ModelFormatError(g.bytes.name, key, v, 'must be a non-negative integer');
  return v;
}
