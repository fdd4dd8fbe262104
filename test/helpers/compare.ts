import { ModelFormatError } from '../../src/formats/errors.js';

/**
 * Largest |a − b| relative to the largest |b|: how the forward tests compare GPU logits with the
 * reference (an error relative to the scale of the logits, not to each one).
 */
export function relErr(a: Float32Array, b: Float32Array): number {
  let err = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    err = Math.max(err, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return err / scale;
}

/** The ModelFormatError `fn` throws (anything else thrown is rethrown; nothing thrown fails). */
export function formatError(fn: () => unknown): ModelFormatError {
  try {
    fn();
  } catch (e) {
    if (e instanceof ModelFormatError) return e;
    throw e;
  }
  throw new Error('expected a ModelFormatError');
}
