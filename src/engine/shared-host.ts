// One engine for every tab of an origin: what a SharedWorker (shared-server.ts) does with the tabs
// connected to it, apart from the ports themselves, so it reads (and is tested) without a browser.
// Tabs load the same model once and share it; their requests run one at a time, taken from the tabs
// in turn (round robin), so a tab that queues many requests cannot starve the others; a tab that
// goes away has its requests cancelled, and the weights are freed when the last tab goes.
import { AbortError, EngineClosedError } from '../errors.js';
import type { WeftEngine } from './engine.js';
import type { ChatMessage, ChatTool } from './types.js';
import type {
  SharedEngineState,
  SharedLoadResult,
  StreamEvent,
  WireGenerateOptions,
} from './worker-protocol.js';

/** One request as the host keeps it until it ends. */
interface Request {
  readonly tab: string;
  readonly id: number;
  readonly prompt: string | number[];
  readonly options: WireGenerateOptions;
  readonly onEvent: (event: StreamEvent) => unknown;
  readonly ac: AbortController;
  readonly settle: { resolve(): void; reject(err: unknown): void };
}

/** The model in the engine (or being loaded into it), and the tabs that hold it. */
interface Held<E> {
  /** The load options, as a canonical string: tabs asking for the same share it. */
  readonly key: string;
  readonly ready: Promise<WeftEngine>;
  /** Aborts the load when every tab left before it ended. */
  readonly cancel: AbortController;
  engine: WeftEngine | undefined;
  readonly holders: Set<string>;
  /** Tabs waiting for the load, each with its progress callback. */
  readonly listeners: Map<string, (event: E) => unknown>;
  /** The load's progress so far, replayed to a tab that joins while (or after) it runs. */
  readonly events: E[];
}

/** The options as a string with their keys sorted, so key order does not matter. */
export function canonicalKey(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** Resolves when `p` does, or rejects with the signal's reason once it aborts (a gone tab's port never answers). */
function unlessAborted<T>(p: Promise<T> | T, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve(p).then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/**
 * The tabs of one shared engine. `load` builds the engine from a tab's options (weft's worker:
 * createEngine or a model choice), reporting progress events of type `E`.
 */
export class SharedEngineHost<O, E> {
  private held: Held<E> | undefined;
  /** Each tab's waiting requests, in its order; `turns` lists the tabs with any, by arrival. */
  private readonly waiting = new Map<string, Request[]>();
  private turns: string[] = [];
  /** When each tab's last request started (a serial number): the least recent goes next. */
  private readonly served = new Map<string, number>();
  private serial = 0;
  private running: Request | undefined;
  private loads = 0;
  private unloads = 0;
  private cancelled = 0;

  constructor(
    /** Builds the engine; `signal` aborts when every tab waiting for it has left. */
    private readonly loadEngine: (
      options: O,
      onProgress: (event: E) => void,
      signal: AbortSignal,
    ) => Promise<WeftEngine>,
    /** Whether WebGPU is exposed where the engine runs. */
    private readonly gpu: boolean,
  ) {}

  state(): SharedEngineState {
    let queued = 0;
    for (const q of this.waiting.values()) queued += q.length;
    return {
      gpu: this.gpu,
      modelId: this.held?.engine?.modelId,
      tabs: this.held?.holders.size ?? 0,
      loads: this.loads,
      unloads: this.unloads,
      queued,
      running: this.running !== undefined,
      cancelled: this.cancelled,
    };
  }

  /**
   * Loads `options` for `tab`: the engine already holding them (no second load: the progress so far
   * is replayed), or a new one when none is held or `tab` alone holds another model (which is freed
   * first); `busy` when other tabs hold another model.
   */
  async load(tab: string, options: O, onProgress?: (event: E) => unknown): Promise<SharedLoadResult> {
    const key = canonicalKey(options);
    let held = this.held;
    if (held && held.key !== key) {
      const others = [...held.holders].filter((t) => t !== tab).length;
      if (others > 0) return { kind: 'busy', modelId: held.engine?.modelId, tabs: others };
      await this.free(held);
      held = undefined;
    }
    if (!held) held = this.start(options, key);
    held.holders.add(tab);
    if (onProgress) {
      for (const e of held.events) onProgress(e);
      held.listeners.set(tab, onProgress);
    }
    try {
      const engine = await held.ready;
      // The tab unloaded (or went away) while the model loaded.
      if (!held.holders.has(tab)) throw new AbortError('load cancelled: the tab left the shared engine');
      return { kind: 'loaded', modelId: engine.modelId, contextLength: engine.contextLength };
    } catch (err) {
      held.holders.delete(tab);
      throw err;
    } finally {
      held.listeners.delete(tab);
    }
  }

  /** Starts loading `options`; the entry goes away if the load fails, and the model is freed if every tab left meanwhile. */
  private start(options: O, key: string): Held<E> {
    const events: E[] = [];
    const listeners = new Map<string, (event: E) => unknown>();
    const onProgress = (e: E) => {
      events.push(e);
      for (const l of listeners.values()) l(e);
    };
    const cancel = new AbortController();
    const held: Held<E> = {
      key,
      ready: this.loadEngine(options, onProgress, cancel.signal),
      cancel,
      engine: undefined,
      holders: new Set(),
      listeners,
      events,
    };
    this.held = held;
    held.ready.then(
      (engine) => {
        this.loads++;
        held.engine = engine;
        if (held.holders.size === 0) void this.free(held);
      },
      () => {
        if (this.held === held) this.held = undefined;
      },
    );
    return held;
  }

  /** Frees `held`'s model (cancelling its load if it is still running), and forgets it. */
  private async free(held: Held<E>): Promise<void> {
    if (this.held === held) this.held = undefined;
    if (!held.engine) held.cancel.abort(new AbortError('every tab left the shared engine while it loaded'));
    const engine = await held.ready.catch(() => undefined);
    if (!engine || held.engine === undefined) return;
    held.engine = undefined;
    this.unloads++;
    await engine.unload();
  }

  /** The engine `tab` holds, or EngineClosedError. */
  private engineOf(tab: string): WeftEngine {
    const held = this.held;
    if (!held?.engine || !held.holders.has(tab))
      throw new EngineClosedError('no model loaded for this tab: call load() first');
    return held.engine;
  }

  render(tab: string, messages: ChatMessage[], tools?: ChatTool[]): Promise<number[]> {
    return this.engineOf(tab).render(messages, tools);
  }

  /**
   * Queues request `id` of `tab`; resolves when its `done` event has been sent, rejects with what
   * the engine threw, or with {@link AbortError} when it is aborted or its tab goes.
   */
  generate(
    tab: string,
    id: number,
    prompt: string | number[],
    options: WireGenerateOptions,
    onEvent: (event: StreamEvent) => unknown,
  ): Promise<void> {
    this.engineOf(tab);
    return new Promise<void>((resolve, reject) => {
      const request = {
        tab,
        id,
        prompt,
        options,
        onEvent,
        ac: new AbortController(),
        settle: { resolve, reject },
      };
      const queue = this.waiting.get(tab);
      if (queue) queue.push(request);
      else {
        this.waiting.set(tab, [request]);
        this.turns.push(tab);
      }
      this.pump();
    });
  }

  /**
   * Runs the next request if none is running: the first waiting request of the tab served least
   * recently (a tab that never was, first), so a tab just served waits behind every other tab.
   */
  private pump(): void {
    if (this.running) return;
    let tab: string | undefined;
    for (const t of this.turns)
      if (tab === undefined || (this.served.get(t) ?? -1) < (this.served.get(tab) ?? -1)) tab = t;
    if (tab === undefined) return;
    const queue = this.waiting.get(tab)!;
    const request = queue.shift()!;
    if (queue.length === 0) this.drop(tab);
    this.served.set(tab, ++this.serial);
    this.running = request;
    this.run(request).then(
      () => this.finish(request, undefined),
      (err: unknown) => this.finish(request, err ?? new Error('request failed')),
    );
  }

  /** Ends the running request with its outcome, then starts the next. */
  private finish(request: Request, err: unknown): void {
    this.running = undefined;
    if (err === undefined) request.settle.resolve();
    else request.settle.reject(err);
    this.pump();
  }

  private async run(r: Request): Promise<void> {
    const engine = this.engineOf(r.tab);
    for await (const chunk of engine.generate(r.prompt, { ...r.options, signal: r.ac.signal })) {
      // Waiting for the tab's acknowledgement paces the stream; a gone tab never answers.
      await unlessAborted(r.onEvent({ kind: 'chunk', chunk }), r.ac.signal);
    }
    await unlessAborted(r.onEvent({ kind: 'done', stats: engine.lastStats }), r.ac.signal);
  }

  /** Aborts request `id` of `tab`, waiting or running. */
  abort(tab: string, id: number): void {
    const reason = new AbortError('request aborted');
    if (this.running?.tab === tab && this.running.id === id) {
      this.running.ac.abort(reason);
      return;
    }
    const queue = this.waiting.get(tab);
    const i = queue?.findIndex((r) => r.id === id) ?? -1;
    if (!queue || i < 0) return;
    for (const r of queue.splice(i, 1)) r.settle.reject(reason);
    if (queue.length === 0) this.drop(tab);
  }

  /** Forgets `tab`'s place in the line. */
  private drop(tab: string): void {
    this.waiting.delete(tab);
    this.turns = this.turns.filter((t) => t !== tab);
  }

  /**
   * `tab` leaves: `'closed'` (the page went away) or `'unload'` (it asked). Its requests are
   * cancelled, the others go on; the model is freed when it was the last tab holding it.
   */
  async leave(tab: string, why: 'closed' | 'unload'): Promise<void> {
    const reason = new AbortError(why === 'closed' ? 'the tab was closed' : 'the tab unloaded the engine');
    const queue = this.waiting.get(tab) ?? [];
    this.drop(tab);
    this.served.delete(tab);
    for (const r of queue) r.settle.reject(reason);
    let cancelled = queue.length;
    const running = this.running;
    if (running?.tab === tab) {
      running.ac.abort(reason);
      cancelled++;
    }
    if (why === 'closed') this.cancelled += cancelled;
    const held = this.held;
    if (!held?.holders.delete(tab)) return;
    held.listeners.delete(tab);
    // The last tab: the engine frees its model once the aborted request has let go of it.
    if (held.holders.size === 0) await this.free(held);
  }
}
