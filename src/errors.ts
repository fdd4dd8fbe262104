/**
 * Base class of every error weft throws on purpose. `name` is the subclass name, so an error that
 * crosses a worker boundary as `{ name, message }` can be recognised on the other side.
 */
export class WeftError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** No WebGPU adapter could be obtained (no `navigator.gpu`, no Dawn binary, or no driver). */
export class GpuUnavailableError extends WeftError {}

/** A GPU step (shader compile, pipeline, buffer, dispatch) raised a validation or memory error. */
export class GpuStepError extends WeftError {
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
  constructor(
    /** `"destroyed"` when weft or the user destroyed the device, else `"unknown"`. */
    readonly reason: string,
    message: string,
  ) {
    super(`GPU device lost (${reason}): ${message}`);
  }
}

/** Input to a public function is invalid; the message names the argument and the value. */
export class InvalidInputError extends WeftError {}

/** A request was cancelled through its AbortSignal; the engine stays usable. */
export class AbortError extends WeftError {}

/** The engine was unloaded; create a new one to continue. */
export class EngineClosedError extends WeftError {}
