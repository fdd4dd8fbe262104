/**
 * The name of every weft error class, one per class. Each class declares its own as a literal
 * `name`, so a new class must be added here, and then to the table in
 * `engine/worker-errors.ts` that carries errors across a worker, or the build fails.
 */
export type WeftErrorName =
  | 'WeftError'
  | 'GpuUnavailableError'
  | 'GpuStepError'
  | 'DeviceLostError'
  | 'InvalidInputError'
  | 'AbortError'
  | 'EngineClosedError'
  | 'ModelFormatError'
  | 'QuotaError'
  | 'IntegrityError'
  | 'DownloadError'
  | 'SteerMismatchError'
  | 'GrammarError';

/**
 * Base class of every error weft throws on purpose. Each subclass declares its `name` as a literal
 * (not `constructor.name`, which a minifier renames), and its own fields as readonly properties,
 * so an error that crosses a worker boundary is rebuilt on the other side with its class, fields
 * and `cause`.
 */
export class WeftError extends Error {
  override readonly name: WeftErrorName = 'WeftError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** No WebGPU adapter could be obtained (no `navigator.gpu`, no Dawn binary, or no driver). */
export class GpuUnavailableError extends WeftError {
  override readonly name = 'GpuUnavailableError';
}

/** A GPU step (shader compile, pipeline, buffer, dispatch) raised a validation or memory error. */
export class GpuStepError extends WeftError {
  override readonly name = 'GpuStepError';

  constructor(
    /** The step that failed, e.g. `pipeline matmul_q4:m8`. */
    readonly step: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${step}: ${message}`, options);
  }
}

/** The GPU device was lost (driver reset, `device.destroy()`); create a new engine to continue. */
export class DeviceLostError extends WeftError {
  override readonly name = 'DeviceLostError';

  constructor(
    /** `"destroyed"` when weft or the user destroyed the device, else `"unknown"`. */
    readonly reason: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`GPU device lost (${reason}): ${message}`, options);
  }
}

/** Input to a public function is invalid; the message names the argument and the value. */
export class InvalidInputError extends WeftError {
  override readonly name = 'InvalidInputError';
}

/** A request was cancelled through its AbortSignal; the engine stays usable. */
export class AbortError extends WeftError {
  override readonly name = 'AbortError';
}

/** The engine was unloaded; create a new one to continue. */
export class EngineClosedError extends WeftError {
  override readonly name = 'EngineClosedError';
}
