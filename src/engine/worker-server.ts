import * as Comlink from 'comlink';
import { AbortError, EngineClosedError } from '../errors.js';
import type { WeftEngine } from './engine.js';
import { toWire } from './worker-errors.js';
import type { EngineWorkerApi, Reply } from './worker-protocol.js';

/** Runs one call and answers its value, or what it threw as plain data. */
export async function reply<T>(call: () => Promise<T>): Promise<Reply<T>> {
  try {
    return { kind: 'ok', value: await call() };
  } catch (err) {
    return { kind: 'threw', thrown: toWire(err) };
  }
}

/**
 * Serves an engine from inside a Web Worker (or any comlink endpoint). `load` builds the engine
 * from the options the page passes to `createWorkerEngine` and reports progress events of type
 * `E`, which reach the page's `onProgress` as they are. The worker only transports: every
 * decision is the engine's, and whatever a call throws reaches the page as the same error class.
 */
export function serveEngine<O, E>(
  load: (options: O, onProgress: (event: E) => void) => Promise<WeftEngine>,
  endpoint?: Comlink.Endpoint,
): void {
  let engine: WeftEngine | undefined;
  const running = new Map<number, AbortController>();
  const loaded = (): WeftEngine => {
    if (!engine) throw new EngineClosedError('no model loaded: call load() first');
    return engine;
  };
  const api: EngineWorkerApi<O, E> = {
    load: ({ options }, onProgress) =>
      reply(async () => {
        if (engine) await engine.unload();
        engine = await load(options, (e) => onProgress?.(e));
        return { modelId: engine.modelId, contextLength: engine.contextLength };
      }),
    generate: (requestId, prompt, options, onEvent) =>
      reply(async () => {
        const current = loaded();
        const ac = new AbortController();
        running.set(requestId, ac);
        try {
          for await (const chunk of current.generate(prompt, { ...options, signal: ac.signal })) {
            await onEvent({ kind: 'chunk', chunk });
          }
          await onEvent({ kind: 'done', stats: current.lastStats });
        } finally {
          running.delete(requestId);
        }
      }),
    abort(requestId) {
      running.get(requestId)?.abort(new AbortError('request aborted'));
    },
    render: (messages, tools) => reply(() => loaded().render(messages, tools)),
    unload: () =>
      reply(async () => {
        for (const ac of running.values()) ac.abort();
        await engine?.unload();
        engine = undefined;
      }),
  };
  Comlink.expose(api, endpoint);
}
