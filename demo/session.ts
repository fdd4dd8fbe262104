// The engine's life on the page: one Web Worker per loaded model. Loading can be cancelled by
// terminating the worker (downloaded chunks stay in the cache, so a later load resumes).
import {
  AbortError,
  type ChoiceLoadEvent,
  type ChoiceLoadOptions,
  createWorkerEngine,
  type WorkerEngine,
} from '../src/index.js';

/** A loaded model: its engine in the worker, and whether prompts are conversations. */
export interface LoadedModel {
  readonly engine: WorkerEngine;
  readonly name: string;
  /** The tokenizer has a chat template: the page sends conversations, not plain text. */
  readonly chat: boolean;
}

function isLoadEvent(e: unknown): e is ChoiceLoadEvent {
  return typeof e === 'object' && e !== null && 'kind' in e;
}

/** Holds at most one loaded model; loading another unloads the first. */
export class Session {
  model: LoadedModel | undefined;
  private cancelLoad: (() => void) | undefined;

  /** Loads `options` in a fresh worker; rejects with {@link AbortError} when {@link cancel} is called. */
  async load(options: ChoiceLoadOptions, onEvent: (e: ChoiceLoadEvent) => void): Promise<LoadedModel> {
    await this.unload();
    const worker = new Worker(new URL('../workers/engine.worker.ts', import.meta.url), { type: 'module' });
    const cancelled = new Promise<never>((_, reject) => {
      this.cancelLoad = () => {
        worker.terminate();
        reject(new AbortError('loading cancelled'));
      };
    });
    // The worker sends `model` just before load returns, but through the callback's own port, so
    // it may arrive after the return: wait for both.
    let modelEvent!: (info: { name: string; chat: boolean }) => void;
    const info = new Promise<{ name: string; chat: boolean }>((r) => {
      modelEvent = r;
    });
    try {
      const engine = await Promise.race([
        createWorkerEngine(worker, options, (e) => {
          if (!isLoadEvent(e)) return;
          if (e.kind === 'model') modelEvent({ name: e.name, chat: e.chat });
          onEvent(e);
        }),
        cancelled,
      ]);
      const { name, chat } = await Promise.race([info, cancelled]);
      this.model = { engine, name, chat };
      return this.model;
    } catch (err) {
      worker.terminate();
      throw err;
    } finally {
      this.cancelLoad = undefined;
    }
  }

  /** Cancels a load in progress (no-op otherwise). */
  cancel(): void {
    this.cancelLoad?.();
  }

  /** Frees the model and its worker. */
  async unload(): Promise<void> {
    const m = this.model;
    this.model = undefined;
    await m?.engine.unload().catch(() => {});
  }
}
