import * as errors from '../errors.js';
import type { Quant } from '../quant/pack.js';
import type { ModelChoice } from '../store/source.js';
import type { CreateEngineOptions, LoadProgress } from './create.js';
import type { ChoiceLoadEvent, ChoiceLoadOptions } from './sources.js';
import type { ChatMessage, GenerateOptions, GenerationChunk, GenerationStats } from './types.js';

/**
 * What weft's engine worker (`weft/worker`) loads, as plain data that crosses `postMessage`:
 * createEngine's options with the model (and a draft model) named as a {@link ModelChoice}, read in
 * place; or a {@link ChoiceLoadOptions} (`choice`), through the weights cache unless `cache: false`.
 */
export type EngineWorkerLoadOptions =
  | (Omit<CreateEngineOptions, 'onProgress' | 'gpu' | 'model' | 'draft'> & {
      readonly model: ModelChoice;
      readonly draft?:
        | { readonly model: ModelChoice; readonly quant?: Quant }
        | { readonly self: 'int4' | 'int2' };
    })
  | ChoiceLoadOptions;

/**
 * Progress events of weft's engine worker while it loads: {@link LoadProgress} for createEngine's
 * options, {@link ChoiceLoadEvent}s for a `choice`.
 */
export type EngineWorkerLoadEvent = LoadProgress | ChoiceLoadEvent;

/** Events of one streamed request, sent from the worker to the page. */
export type StreamEvent =
  | { kind: 'chunk'; chunk: GenerationChunk }
  | { kind: 'done'; stats: GenerationStats | undefined };

/** Generation options that can cross a worker boundary (the signal stays on the page). */
export type WireGenerateOptions = Omit<GenerateOptions, 'signal'>;

/** The API a weft engine worker exposes through comlink. `O` is the load options type. */
export interface EngineWorkerApi<O> {
  /** Loads the model; returns its id. Progress events arrive through `onProgress`. */
  load(options: O, onProgress?: (event: unknown) => void): Promise<{ modelId: string }>;
  /** Runs request `requestId`, sending its chunks and then `done` through `onEvent`. */
  generate(
    requestId: number,
    prompt: string | number[],
    options: WireGenerateOptions,
    onEvent: (event: StreamEvent) => void,
  ): Promise<void>;
  /** Aborts request `requestId` if it is queued or running. */
  abort(requestId: number): void;
  /** Renders a conversation with the chat template into prompt ids. */
  render(messages: ChatMessage[]): Promise<number[]>;
  unload(): Promise<void>;
}

type ErrorClass = new (...args: never[]) => Error;

/** weft's error classes by name, so errors that crossed a worker keep their type. */
const ERROR_CLASSES = new Map<string, ErrorClass>();
for (const [name, value] of Object.entries(errors)) {
  if (typeof value === 'function') ERROR_CLASSES.set(name, value);
}

/**
 * Gives an error that crossed a worker boundary (comlink keeps name and message) its weft class
 * again, so `instanceof AbortError` works on the page.
 */
export function reviveError(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  const cls = ERROR_CLASSES.get(err.name);
  if (!cls || err instanceof cls) return err;
  Object.setPrototypeOf(err, cls.prototype);
  return err;
}
