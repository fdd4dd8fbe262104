import { WeftError } from '../errors.js';

// The weights cache's own errors. (DownloadError is thrown by formats/ too, a model read in place
// over HTTP, so it lives with the base classes in src/errors.ts.)

/**
 * The browser's storage quota is too small for a download: `needed` bytes are missing from the store
 * but only `available` are free (quota minus usage, as `navigator.storage.estimate()` reports it, or
 * the browser refused a write with `QuotaExceededError`). Thrown before any chunk is written when the
 * estimate already says no, so no partial model is left behind.
 */
export class QuotaError extends WeftError {
  override readonly name = 'QuotaError';

  constructor(
    /** Bytes the download still has to write. */
    readonly needed: number,
    /** Bytes the browser says are free; `NaN` when only a failed write told us. */
    readonly available: number,
    options?: { cause?: unknown },
  ) {
    super(
      `not enough storage for the model: ${needed} bytes needed, ${Number.isNaN(available) ? 'unknown' : available} available`,
      options,
    );
  }
}

/**
 * Bytes did not match their expected hash or size: a chunk whose SHA-256 differs from the one recorded
 * when it was written (and that could not be fetched again), or a whole file whose SHA-256 or size
 * differs from what the server announced. The bad bytes are never handed to the caller.
 */
export class IntegrityError extends WeftError {
  override readonly name = 'IntegrityError';

  constructor(
    /** The file, e.g. `model.safetensors`. */
    readonly file: string,
    /** What was checked: `chunk 3`, `sha256` or `size`. */
    readonly what: string,
    /** The expected hash or size. */
    readonly expected: string,
    /** What the bytes gave. */
    readonly actual: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${what} mismatch: expected ${expected}, got ${actual}`, options);
  }
}
