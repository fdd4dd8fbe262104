import type { Quant } from '../quant/pack.js';
import type { ModelChoice } from '../store/source.js';
import type { CreateEngineOptions, LoadProgress } from './create.js';
import type { ChoiceLoadEvent, ChoiceLoadOptions } from './sources.js';
import type { ChatMessage, ChatTool, GenerateOptions, GenerationChunk, GenerationStats } from './types.js';
import type { WireThrown } from './worker-errors.js';

/**
 * What weft's engine worker (`weft/worker`) loads, as plain data that crosses `postMessage`:
 * createEngine's options with the model (and a draft model) named as a {@link ModelChoice}, read in
 * place; or a {@link ChoiceLoadOptions} (`choice`), through the weights cache unless `cache: false`.
 */
export type EngineWorkerLoadOptions =
  | (Omit<CreateEngineOptions, 'onProgress' | 'gpu' | 'replaceGpu' | 'model' | 'draft'> & {
      readonly model: ModelChoice;
      readonly draft?:
        | { readonly model: ModelChoice; readonly quant?: Quant }
        | { readonly self: 'int4' | 'int2' }
        | 'assistant'
        | 'mtp';
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

/**
 * The outcome of one call into the worker: the value it returned, or what it threw as plain data
 * ({@link WireThrown}), which the page builds back into the same error class. Errors travel as
 * data in the reply rather than through comlink's throw handler, which is global to a realm and
 * would change every other comlink endpoint of the app.
 */
export type Reply<T> =
  | { readonly kind: 'ok'; readonly value: T }
  | { readonly kind: 'threw'; readonly thrown: WireThrown };

/** The calls a weft engine worker answers once a model is loaded. */
export interface EngineWorkerCalls {
  /** Runs request `requestId`, sending its chunks and then `done` through `onEvent`. */
  generate(
    requestId: number,
    prompt: string | number[],
    options: WireGenerateOptions,
    onEvent: (event: StreamEvent) => void,
  ): Promise<Reply<void>>;
  /** Aborts request `requestId` if it is queued or running. */
  abort(requestId: number): void;
  /** Renders a conversation with the chat template into prompt ids. */
  render(messages: ChatMessage[], tools?: ChatTool[]): Promise<Reply<number[]>>;
  /** Frees the model; later calls answer EngineClosedError until the next `load`. */
  unload(): Promise<Reply<void>>;
}

/**
 * The API a weft engine worker exposes through comlink: {@link EngineWorkerCalls} and `load`.
 * `O` is the load options type and `E` the type of the progress events `load` reports; both
 * default to those of weft's own worker.
 */
export interface EngineWorkerApi<O = EngineWorkerLoadOptions, E = EngineWorkerLoadEvent>
  extends EngineWorkerCalls {
  /**
   * Loads the model named by `request.options`; returns its id and context length. Progress events arrive through
   * `onProgress`. (The options sit in an object because comlink's `Remote` maps each argument
   * through a conditional type, which TypeScript cannot resolve for a bare type parameter.)
   */
  load(
    request: { readonly options: O },
    onProgress?: (event: E) => void,
  ): Promise<Reply<{ modelId: string; contextLength: number }>>;
}

/** What a tab's `load` answers: the engine's id and context, or that another model is in use. */
export type SharedLoadResult =
  | { readonly kind: 'loaded'; readonly modelId: string; readonly contextLength: number }
  /**
   * The shared engine holds (or is loading) other options for `tabs` other tabs: this tab cannot
   * have its own model there without taking theirs away (createSharedEngine then gives it a worker
   * of its own).
   */
  | { readonly kind: 'busy'; readonly modelId: string | undefined; readonly tabs: number };

/** What the shared engine is doing, for an app (or a test) to show: `inspectSharedEngine`. */
export interface SharedEngineState {
  /** Whether WebGPU (`navigator.gpu`) is exposed where the engine runs. */
  readonly gpu: boolean;
  /** The loaded model's id; undefined while none is loaded (or while one is loading). */
  readonly modelId: string | undefined;
  /** Tabs holding the engine (that loaded it and have not gone or unloaded). */
  readonly tabs: number;
  /** Models loaded since the worker started (a second tab's load of the same model is not one). */
  readonly loads: number;
  /** Models freed since the worker started (the last tab gone, or another model asked for). */
  readonly unloads: number;
  /** Requests waiting, over every tab, and whether one is running. */
  readonly queued: number;
  readonly running: boolean;
  /** Requests cancelled because their tab went away (closed, or unloaded the engine). */
  readonly cancelled: number;
}

/**
 * The API weft's worker started as a SharedWorker (serveSharedEngine) exposes on each
 * tab's port: the engine calls, for that tab, once the tab has attached.
 */
export interface SharedEngineWorkerApi<O = EngineWorkerLoadOptions, E = EngineWorkerLoadEvent>
  extends EngineWorkerCalls {
  /**
   * Names this port's tab: `tab` is also the name of a Web Lock the tab holds as long as it lives
   * (after `weft-tab:`), which the worker waits on to learn that the tab has gone.
   */
  attach(tab: string): SharedEngineState;
  /** What the shared engine is doing (no attach needed). */
  state(): SharedEngineState;
  /** Loads the model for this tab, sharing it with the tabs that asked for the same options. */
  load(request: { readonly options: O }, onProgress?: (event: E) => void): Promise<Reply<SharedLoadResult>>;
}
