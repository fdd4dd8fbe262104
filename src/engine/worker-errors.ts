// Errors across a worker boundary. The worker turns whatever a call threw into plain data
// (`toWire`): a weft error becomes its class name, message, stack, its own readonly fields and its
// cause, recursively; any other Error its name, message, stack and cause; anything else its value.
// The page builds the same classes again (`fromWire`), so `instanceof QuotaError`, `err.needed` and
// `err.cause` work there as they do in the worker. One table names every weft error class and how
// its fields cross; it is typed against WeftErrorName, so a class without an entry does not build.
import {
  AbortError,
  type BytesPerFormat,
  ContextLengthError,
  DeviceLimitError,
  DeviceLostError,
  DownloadError,
  EngineClosedError,
  GpuStepError,
  GpuUnavailableError,
  InvalidInputError,
  WeftError,
  type WeftErrorName,
} from '../errors.js';
import { ModelFormatError } from '../formats/errors.js';
import { GrammarError, type GrammarKind } from '../grammar/errors.js';
import { SteerMismatchError } from '../steer/errors.js';
import { IntegrityError, QuotaError } from '../store/errors.js';

/** An error class's own fields as plain data, keyed by property name. */
export type WireFields = Readonly<Record<string, unknown>>;

/** A weft error as plain data: its class by name, and that class's own fields. */
export interface WireWeftError {
  readonly kind: 'weft';
  readonly name: WeftErrorName;
  readonly message: string;
  readonly stack: string | undefined;
  readonly fields: WireFields;
  /** Absent when the error had no cause (or the chain was cut, see {@link MAX_CAUSE_DEPTH}). */
  readonly cause?: WireThrown;
}

/** Any other Error (a TypeError, a DOMException) as plain data; it comes back as an `Error`. */
export interface WireOtherError {
  readonly kind: 'error';
  readonly name: string;
  readonly message: string;
  readonly stack: string | undefined;
  readonly cause?: WireThrown;
}

/** A thrown value that is not an Error, as structured clone copies it (or its `String()`). */
export interface WireValue {
  readonly kind: 'value';
  readonly value: unknown;
}

/** Whatever a call threw, as plain data that survives `postMessage`. */
export type WireThrown = WireWeftError | WireOtherError | WireValue;

/** Causes deeper than this are dropped: a chain that long (or a cycle) says nothing more. */
export const MAX_CAUSE_DEPTH = 8;

/** Options every weft error constructor takes last. */
interface CauseOption {
  cause?: unknown;
}

/** A check that a value read off the wire has a field's type. */
type Guard<T> = (value: unknown) => value is T;

/** Reads field `key` of an error off the wire; throws when `guard` refuses the value. */
type FieldReader<F> = <K extends keyof F & string>(key: K, guard: Guard<F[K]>) => F[K];

/** How one weft error class crosses: its own fields out, and the class built again from them. */
interface ErrorCodec {
  /** The class's own fields, or undefined when `err` is not an instance of the class. */
  fields(err: WeftError): WireFields | undefined;
  /** A new instance from fields read off the wire; the caller then sets message and stack. */
  revive(fields: WireFields, options: CauseOption): WeftError;
}

/**
 * The codec of class `cls`: `pick` names its readonly fields, `build` calls its constructor with
 * them (reading each through a guard) and the cause. The message passed to the constructor does
 * not matter: the one that crossed replaces it.
 */
function codec<E extends WeftError, F extends WireFields>(
  cls: abstract new (...args: never[]) => E,
  pick: (err: E) => F,
  build: (read: FieldReader<F>, options: CauseOption) => E,
): ErrorCodec {
  return {
    fields: (err) => (err instanceof cls ? pick(err) : undefined),
    revive: (fields, options) =>
      build((key, guard) => {
        const value = fields[key];
        if (!guard(value)) throw new TypeError(`field ${key} = ${String(value)} has the wrong type`);
        return value;
      }, options),
  };
}

/** The codec of a class with no fields of its own (constructor `(message, options)`). */
function plain<E extends WeftError>(cls: new (message: string, options?: CauseOption) => E): ErrorCodec {
  return codec(
    cls,
    () => ({}),
    (_, options) => new cls('', options),
  );
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number';
const isStringOrNumber = (v: unknown): v is string | number => isString(v) || isNumber(v);
const isAnything = (_: unknown): _ is unknown => true;
const isOptionalString = (v: unknown): v is string | undefined => v === undefined || isString(v);
const FORMATS = ['f32', 'f16', 'int8', 'int4', 'int2'] as const;
const isBytesPerFormat = (v: unknown): v is BytesPerFormat =>
  typeof v === 'object' && v !== null && FORMATS.every((f) => isNumber(Reflect.get(v, f)));
const isGrammarKind = (v: unknown): v is GrammarKind =>
  v === 'json_schema' || v === 'grammar' || v === 'regex';
const isSteerField = (v: unknown): v is 'model_checksum' | 'hidden' =>
  v === 'model_checksum' || v === 'hidden';

/** Every weft error class by name, with the fields that cross with it. */
const WEFT_ERRORS = {
  WeftError: plain(WeftError),
  GpuUnavailableError: plain(GpuUnavailableError),
  GpuStepError: codec(
    GpuStepError,
    (e) => ({ step: e.step }),
    (read, o) => new GpuStepError(read('step', isString), '', o),
  ),
  DeviceLostError: codec(
    DeviceLostError,
    (e) => ({ reason: e.reason }),
    (read, o) => new DeviceLostError(read('reason', isString), '', o),
  ),
  InvalidInputError: plain(InvalidInputError),
  AbortError: plain(AbortError),
  EngineClosedError: plain(EngineClosedError),
  ModelFormatError: codec(
    ModelFormatError,
    (e) => ({ file: e.file, field: e.field, value: e.value, problem: e.problem }),
    (read, o) =>
      new ModelFormatError(
        read('file', isString),
        read('field', isString),
        read('value', isAnything),
        read('problem', isString),
        o,
      ),
  ),
  QuotaError: codec(
    QuotaError,
    (e) => ({ needed: e.needed, available: e.available }),
    (read, o) => new QuotaError(read('needed', isNumber), read('available', isNumber), o),
  ),
  IntegrityError: codec(
    IntegrityError,
    (e) => ({ file: e.file, what: e.what, expected: e.expected, actual: e.actual }),
    (read, o) =>
      new IntegrityError(
        read('file', isString),
        read('what', isString),
        read('expected', isString),
        read('actual', isString),
        o,
      ),
  ),
  DownloadError: codec(
    DownloadError,
    (e) => ({ url: e.url, status: e.status }),
    (read, o) => new DownloadError(read('url', isString), read('status', isNumber), '', o),
  ),
  SteerMismatchError: codec(
    SteerMismatchError,
    (e) => ({ file: e.file, field: e.field, found: e.found, expected: e.expected }),
    (read, o) =>
      new SteerMismatchError(
        read('file', isString),
        read('field', isSteerField),
        read('found', isStringOrNumber),
        read('expected', isStringOrNumber),
        o,
      ),
  ),
  ContextLengthError: codec(
    ContextLengthError,
    (e) => ({ promptTokens: e.promptTokens, contextLength: e.contextLength, modelContext: e.modelContext }),
    (read, o) =>
      new ContextLengthError(
        read('promptTokens', isNumber),
        read('contextLength', isNumber),
        read('modelContext', isNumber),
        o,
      ),
  ),
  DeviceLimitError: codec(
    DeviceLimitError,
    (e) => ({
      limit: e.limit,
      what: e.what,
      needed: e.needed,
      available: e.available,
      bytesPerFormat: e.bytesPerFormat,
      fits: e.fits,
    }),
    (read, o) =>
      new DeviceLimitError(
        read('limit', isString),
        read('what', isString),
        read('needed', isNumber),
        read('available', isNumber),
        read('bytesPerFormat', isBytesPerFormat),
        read('fits', isOptionalString),
        o,
      ),
  ),
  GrammarError: codec(
    GrammarError,
    (e) => ({ kind: e.kind, problem: e.problem }),
    (read, o) => new GrammarError(read('kind', isGrammarKind), read('problem', isString), o),
  ),
} satisfies Record<WeftErrorName, ErrorCodec>;

/**
 * A value as structured clone will copy it: primitives as they are, objects cloned now (so a field
 * or cause holding a function cannot make the whole error fail to cross) or else their `String()`.
 */
function cloneable(value: unknown): unknown {
  if (typeof value !== 'object' && typeof value !== 'function') return value;
  if (value === null) return value;
  try {
    return structuredClone(value);
  } catch {
    return String(value);
  }
}

/** The `cause` part of an error's wire form: absent without a cause or past the depth limit. */
function wireCause(err: Error, depth: number): { cause?: WireThrown } {
  if (!('cause' in err) || depth >= MAX_CAUSE_DEPTH) return {};
  return { cause: toWire(err.cause, depth + 1) };
}

/**
 * Turns whatever a worker call threw into plain data for `postMessage`: a weft error with its
 * class name and own fields, any other Error with its name, both with message, stack and cause
 * (recursively, {@link MAX_CAUSE_DEPTH} deep at most); any other value as structured clone
 * copies it.
 */
export function toWire(thrown: unknown, depth = 0): WireThrown {
  if (thrown instanceof WeftError) {
    const fields = WEFT_ERRORS[thrown.name].fields(thrown);
    if (fields) {
      return {
        kind: 'weft',
        name: thrown.name,
        message: thrown.message,
        stack: thrown.stack,
        fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, cloneable(v)])),
        ...wireCause(thrown, depth),
      };
    }
  }
  if (thrown instanceof Error) {
    return {
      kind: 'error',
      name: thrown.name,
      message: thrown.message,
      stack: thrown.stack,
      ...wireCause(thrown, depth),
    };
  }
  return { kind: 'value', value: cloneable(thrown) };
}

/** The error's message and stack as they were where it was thrown. */
function restore<E extends Error>(err: E, wire: WireWeftError | WireOtherError): E {
  err.message = wire.message;
  if (wire.stack !== undefined) err.stack = wire.stack;
  return err;
}

/** A plain Error named as the one that was thrown (for classes this side does not know). */
function otherError(wire: WireWeftError | WireOtherError, options: CauseOption): Error {
  const err = new Error(wire.message, options);
  err.name = wire.name;
  return restore(err, wire);
}

/**
 * Builds the thrown value again from {@link toWire}'s data: a weft error as an instance of its
 * class, with the same message, fields, stack and cause; any other Error as an `Error` with the
 * same name; any other value as it was sent. A weft error this side cannot build (a name it does
 * not know, or fields that do not fit its class: page and worker built from different weft
 * versions) comes back as a plain `Error` of that name.
 */
export function fromWire(wire: WireThrown): unknown {
  if (wire.kind === 'value') return wire.value;
  const options: CauseOption = wire.cause === undefined ? {} : { cause: fromWire(wire.cause) };
  if (wire.kind === 'error') return otherError(wire, options);
  let err: WeftError;
  try {
    // An unknown name makes the lookup undefined, and a bad field makes the guard throw.
    err = WEFT_ERRORS[wire.name].revive(wire.fields, options);
  } catch {
    return otherError(wire, options);
  }
  return restore(err, wire);
}
