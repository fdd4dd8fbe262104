import * as Comlink from 'comlink';
import { AbortError } from '../errors.js';
import type { WeftEngine } from './engine.js';
import { type ChatApi, chatApi } from './openai.js';
import type { ChatMessage, ChatTool, GenerateOptions, GenerationChunk, GenerationStats } from './types.js';
import { fromWire } from './worker-errors.js';
import type {
  EngineWorkerApi,
  EngineWorkerCalls,
  EngineWorkerLoadEvent,
  EngineWorkerLoadOptions,
  Reply,
  StreamEvent,
} from './worker-protocol.js';

/** The value of a worker call, or what it threw, built again as the same error class. */
export async function unwrap<T>(reply: Promise<Reply<T>>): Promise<T> {
  const r = await reply;
  if (r.kind === 'threw') throw fromWire(r.thrown);
  return r.value;
}

/** A push-to-pull queue: the worker pushes chunks, the page's `for await` pulls them. */
class ChunkQueue {
  private readonly items: GenerationChunk[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  private error: unknown;

  push(c: GenerationChunk): void {
    this.items.push(c);
    this.wake?.();
  }

  end(error?: unknown): void {
    this.ended = true;
    this.error = error;
    this.wake?.();
  }

  async *drain(): AsyncGenerator<GenerationChunk> {
    for (;;) {
      const next = this.items.shift();
      if (next) {
        yield next;
        continue;
      }
      if (this.ended) {
        if (this.error !== undefined) throw this.error;
        return;
      }
      await new Promise<void>((r) => {
        this.wake = r;
      });
      this.wake = undefined;
    }
  }
}

/**
 * How an engine from createSharedEngine is served: by the SharedWorker every tab of the origin
 * shares, or by a worker of this tab's own, and why (no SharedWorker, no WebGPU in SharedWorkers,
 * or the shared engine holding another model for other tabs).
 */
export type EngineSharing = { readonly shared: true } | { readonly shared: false; readonly reason: string };

/**
 * An engine that runs in a Web Worker, with the same interface as the in-thread engine. Tokens
 * stream to the page as the worker produces them; errors arrive with their weft class.
 */
export class WorkerEngine implements WeftEngine {
  readonly chat: ChatApi;
  lastStats: GenerationStats | undefined;
  private nextId = 1;

  constructor(
    private readonly remote: Comlink.Remote<EngineWorkerCalls>,
    readonly modelId: string,
    private readonly worker: { terminate(): void } | undefined,
    /** Tokens of context every request shares, as the worker's engine reported on load. */
    readonly contextLength: number,
    /**
     * Whether the engine is shared with the origin's other tabs (createSharedEngine), or why this
     * tab has one of its own; undefined for a worker of the page's own (createWorkerEngine).
     */
    readonly sharing?: EngineSharing,
  ) {
    this.chat = chatApi({
      modelId,
      contextLength,
      render: (messages, tools) => this.render(messages, tools),
      generate: (ids, options) => this.generate(ids, options),
      stats: () => this.lastStats,
    });
  }

  /** Token ids of a conversation rendered in the worker with the model's chat template. */
  render(messages: readonly ChatMessage[], tools?: readonly ChatTool[]): Promise<number[]> {
    // Only the fields the template reads cross, so extra properties cannot break postMessage.
    const plain = messages.map((m) => ({
      role: m.role,
      content: m.content,
      ...(m.tool_calls ? { tool_calls: structuredClone(m.tool_calls) } : {}),
      ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    }));
    return unwrap(this.remote.render(plain, tools ? structuredClone([...tools]) : undefined));
  }

  async *generate(
    prompt: string | readonly number[],
    options: GenerateOptions = {},
  ): AsyncGenerator<GenerationChunk> {
    const { signal, ...wire } = options;
    const id = this.nextId++;
    const queue = new ChunkQueue();
    const onAbort = () => void this.remote.abort(id);
    signal?.addEventListener('abort', onAbort);
    const onEvent = (e: StreamEvent) => {
      if (e.kind === 'chunk') queue.push(e.chunk);
      else this.lastStats = e.stats;
    };
    const finished = unwrap(
      this.remote.generate(
        id,
        typeof prompt === 'string' ? prompt : [...prompt],
        wire,
        Comlink.proxy(onEvent),
      ),
    ).then(
      () => queue.end(),
      (err: unknown) => queue.end(err),
    );
    let done = false;
    try {
      for await (const chunk of queue.drain()) {
        // Chunks already in flight when the page aborted are dropped, not shown.
        if (signal?.aborted) throw new AbortError('request aborted');
        yield chunk;
      }
      done = true;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // The page stopped reading early: stop the worker too, and wait so the next request is clean.
      if (!done) {
        await this.remote.abort(id);
        await finished;
      }
    }
  }

  async unload(): Promise<void> {
    await unwrap(this.remote.unload());
    this.worker?.terminate();
  }
}

/**
 * Loads a model in `worker` and returns an engine with the in-thread engine's interface. For weft's
 * own worker (`weft/worker`) the options and progress events are typed as
 * {@link EngineWorkerLoadOptions} and {@link EngineWorkerLoadEvent}; a worker of your own that
 * calls `serveEngine` with another load function names its types:
 * `createWorkerEngine<MyOptions, MyEvent>(worker, options)`.
 */
export function createWorkerEngine<O = EngineWorkerLoadOptions, E = EngineWorkerLoadEvent>(
  worker: Worker,
  options: NoInfer<O>,
  onProgress?: (event: E) => void,
): Promise<WorkerEngine> {
  return loadInWorker<O, E>(worker, options, onProgress, undefined);
}

/** Loads a model in `worker` (see {@link createWorkerEngine}); the engine reports `sharing`. */
export async function loadInWorker<O, E>(
  worker: Worker,
  options: O,
  onProgress: ((event: E) => void) | undefined,
  sharing: EngineSharing | undefined,
): Promise<WorkerEngine> {
  const remote = Comlink.wrap<EngineWorkerApi<O, E>>(worker);
  const { modelId, contextLength } = await unwrap(
    remote.load({ options }, onProgress ? Comlink.proxy(onProgress) : undefined),
  );
  return new WorkerEngine(remote, modelId, worker, contextLength, sharing);
}
