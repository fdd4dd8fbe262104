import { WeftError } from '../errors.js';

/**
 * A steering file does not belong to the model it is loaded for: `field` is `model_checksum` or
 * `hidden`, with the file's value (`found`) and the model's (`expected`). It lives in its own
 * module, like the other error files, so the page side of a worker can revive it without loading
 * the steering file reader.
 */
export class SteerMismatchError extends WeftError {
  override readonly name = 'SteerMismatchError';

  constructor(
    /** The steering file's name. */
    readonly file: string,
    /** What differs. */
    readonly field: 'model_checksum' | 'hidden',
    /** The file's value. */
    readonly found: string | number,
    /** The model's value. */
    readonly expected: string | number,
    options?: { cause?: unknown },
  ) {
    super(
      `${file}: ${field} = ${found}, but the model has ${expected}: the steering file was measured on another model`,
      options,
    );
  }
}
