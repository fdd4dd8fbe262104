import * as Comlink from 'comlink';
import { AbortError, EngineClosedError } from '../errors.js';
import type { WeftEngine } from './engine.js';
import type { ChatMessage } from './types.js';
import type { EngineWorkerApi, StreamEvent, WireGenerateOptions } from './worker-protocol.js';

/** An engine a worker can serve: the common interface plus chat rendering. */
export interface ServableEngine extends WeftEngine {
  render(messages: readonly ChatMessage[]): number[];
}

/**
 * Serves an engine from inside a Web Worker (or any comlink endpoint). `load` builds the engine
 * from the options the page passes to `createWorkerEngine`. The worker only transports: every
 * decision is the engine's.
 */
export function serveEngine<O>(
  load: (options: O, onProgress: (event: unknown) => void) => Promise<ServableEngine>,
  endpoint?: Comlink.Endpoint,
): void {
  let engine: ServableEngine | undefined;
  const running = new Map<number, AbortController>();
  const api: EngineWorkerApi<O> = {
    async load(options, onProgress) {
      if (engine) await engine.unload();
      engine = await load(options, (e) => onProgress?.(e));
      return { modelId: engine.modelId };
    },
    async generate(requestId, prompt, options: WireGenerateOptions, onEvent: (e: StreamEvent) => void) {
      if (!engine) throw new EngineClosedError('no model loaded: call load() first');
      const ac = new AbortController();
      running.set(requestId, ac);
      try {
        for await (const chunk of engine.generate(prompt, { ...options, signal: ac.signal })) {
          await onEvent({ kind: 'chunk', chunk });
        }
        await onEvent({ kind: 'done', stats: engine.lastStats });
      } finally {
        running.delete(requestId);
      }
    },
    abort(requestId) {
      running.get(requestId)?.abort(new AbortError('request aborted'));
    },
    async render(messages) {
      if (!engine) throw new EngineClosedError('no model loaded: call load() first');
      return engine.render(messages);
    },
    async unload() {
      for (const ac of running.values()) ac.abort();
      await engine?.unload();
      engine = undefined;
    },
  };
  Comlink.expose(api, endpoint);
}
