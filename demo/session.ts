// The engine's life on the page: the engine every tab of the site shares (a SharedWorker; a second
// tab with the same model uses the weights already placed), or a Web Worker of this tab's own where
// the shared one cannot serve it. Cancelling a load leaves it (downloaded chunks stay in the cache,
// so a later load resumes; the shared worker stops downloading once no tab waits for the model).
import {
  AbortError,
  type ChoiceLoadEvent,
  type ChoiceLoadOptions,
  createSharedEngine,
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

/** The engine workers: the site's shared one, and this tab's own where that cannot serve it. */
const WORKERS = {
  shared: () =>
    new SharedWorker(new URL('../workers/engine.worker.ts', import.meta.url), {
      type: 'module',
      name: 'weft-engine',
    }),
  dedicated: () => new Worker(new URL('../workers/engine.worker.ts', import.meta.url), { type: 'module' }),
};

/** Holds at most one loaded model; loading another unloads the first. */
export class Session {
  model: LoadedModel | undefined;
  private cancelLoad: (() => void) | undefined;

  /** Loads `options`; rejects with {@link AbortError} when {@link cancel} is called. */
  async load(options: ChoiceLoadOptions, onEvent: (e: ChoiceLoadEvent) => void): Promise<LoadedModel> {
    await this.unload();
    const ac = new AbortController();
    this.cancelLoad = () => ac.abort(new AbortError('loading cancelled'));
    const cancelled = new Promise<never>((_, reject) => {
      ac.signal.addEventListener('abort', () => reject(new AbortError('loading cancelled')), { once: true });
    });
    // The worker sends `model` just before load returns, but through the callback's own port, so
    // it may arrive after the return: wait for both.
    let modelEvent!: (info: { name: string; chat: boolean }) => void;
    const info = new Promise<{ name: string; chat: boolean }>((r) => {
      modelEvent = r;
    });
    let engine: WorkerEngine | undefined;
    try {
      engine = await createSharedEngine(WORKERS, options, {
        signal: ac.signal,
        onProgress: (e) => {
          if (!isLoadEvent(e)) return;
          if (e.kind === 'model') modelEvent({ name: e.name, chat: e.chat });
          onEvent(e);
        },
      });
      if (engine.sharing?.shared === false)
        console.info(`weft: this tab has its own engine: ${engine.sharing.reason}`);
      const { name, chat } = await Promise.race([info, cancelled]);
      this.model = { engine, name, chat };
      return this.model;
    } catch (err) {
      await engine?.unload().catch(() => {});
      throw err;
    } finally {
      this.cancelLoad = undefined;
    }
  }

  /** Cancels a load in progress (no-op otherwise). */
  cancel(): void {
    this.cancelLoad?.();
  }

  /** Frees the model (the shared one when this was the last tab holding it) and its worker. */
  async unload(): Promise<void> {
    const m = this.model;
    this.model = undefined;
    await m?.engine.unload().catch(() => {});
  }
}
