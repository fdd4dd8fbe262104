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
  | 'ContextLengthError'
  | 'DeviceLimitError'
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

/**
 * The GPU device was lost (driver reset, `device.destroy()`, the browser reclaiming memory). The
 * engine recovers from a loss on a new device by itself; this reaches the caller when it cannot: a
 * second loss soon after a recovery (the message says so, `cause` is the loss), a loss while
 * loading the retry, or an app's own context without `replaceGpu`.
 */
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

/**
 * A prompt does not fit the engine's context: `promptTokens` tokens, and the KV cache holds
 * `contextLength` (so at most `contextLength - 1` prompt tokens leave room for one generated token).
 * `modelContext` is the longest context the model was trained for (`max_position_embeddings`), up to
 * which `createEngine({ contextLength })` can raise the cache. A completion that merely reaches the
 * context is not an error: it ends with `finishReason: 'length'`.
 */
export class ContextLengthError extends WeftError {
  override readonly name = 'ContextLengthError';

  constructor(
    /** Tokens of the prompt as rendered (chat template included). */
    readonly promptTokens: number,
    /** Tokens the engine's KV cache holds: the context of every request. */
    readonly contextLength: number,
    /** The model's own context (`max_position_embeddings`). */
    readonly modelContext: number,
    options?: { cause?: unknown },
  ) {
    const raise =
      modelContext > contextLength
        ? `; the model allows up to ${modelContext}: createEngine({ contextLength }) can raise it`
        : '';
    super(
      `prompt of ${promptTokens} tokens does not fit the context of ${contextLength} tokens (at most ${contextLength - 1} prompt tokens leave room for one generated token${raise}; chat can drop the oldest turns with truncate: 'oldest')`,
      options,
    );
  }
}

/** Weight formats by the bytes a whole model takes in each (see `DeviceLimitError`). */
export type BytesPerFormat = Readonly<Record<'f32' | 'f16' | 'int8' | 'int4' | 'int2', number>>;

/**
 * A model cannot be placed on this GPU: one buffer it needs, or all of them together, exceeds a
 * limit of the adapter. Thrown before anything is allocated. `limit` names which one
 * (`maxBufferSize`, `maxStorageBufferBindingSize`, or `device memory`, an estimate), `needed` and
 * `available` are bytes, `bytesPerFormat` what the whole model (weights, KV cache and activations)
 * would take in each weight format, and `fits` the most precise smaller format that would fit, if
 * any (else a smaller `contextLength` or another device is needed).
 */
export class DeviceLimitError extends WeftError {
  override readonly name = 'DeviceLimitError';

  constructor(
    /** The limit exceeded: `maxBufferSize`, `maxStorageBufferBindingSize` or `device memory`. */
    readonly limit: string,
    /** What exceeds it, e.g. `model.layers.0.k_cache` or `the whole model at f16`. */
    readonly what: string,
    /** Bytes needed. */
    readonly needed: number,
    /** Bytes the limit allows. */
    readonly available: number,
    /** Bytes of the whole model in each weight format. */
    readonly bytesPerFormat: BytesPerFormat,
    /** A smaller weight format that fits, or undefined when none does. */
    readonly fits: string | undefined,
    /** `also`: another way to fit, said after the formats (a mixture's expert budget). */
    options?: { cause?: unknown; also?: string },
  ) {
    const mb = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;
    const formats = Object.entries(bytesPerFormat)
      .map(([f, n]) => `${f} ${mb(n)}`)
      .join(', ');
    const hint = fits
      ? `quant: '${fits}' would fit`
      : 'no weight format fits: use a smaller contextLength, a smaller model, or another device';
    super(
      `${what} needs ${mb(needed)} (${needed} bytes), over the adapter's ${limit} of ${mb(available)} (${available} bytes); the model takes ${formats}; ${hint}${options?.also ? `; or ${options.also}` : ''}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
  }
}

/**
 * A request for a model's file failed: an HTTP status that retrying cannot fix (404, 403, a server
 * that ignores `Range`), an HTML page where a model file was expected (a wrong path under a server
 * that answers every path with its index.html), or a network failure (a closed port, an unknown
 * host, no connection, a server that refuses this origin) that outlasted every retry. `url` is the
 * URL requested, `status` the HTTP status (0 for a network failure), and the message says what to
 * check.
 */
export class DownloadError extends WeftError {
  override readonly name = 'DownloadError';

  constructor(
    /** The URL requested. */
    readonly url: string,
    /** The HTTP status, or 0 for a network failure. */
    readonly status: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${url}: ${message}`, options);
  }
}
