// The worker side of one engine for every tab (createSharedEngine): in a SharedWorker, each tab's
// port gets the engine calls of SharedEngineWorkerApi, answered by one SharedEngineHost. A tab
// holds a Web Lock named after it for as long as it lives; the worker asks for the same lock, and
// is granted it when the tab has gone (closed, reloaded, crashed), which cancels that tab's requests.
// Transport only: what happens to the tabs' requests is the host's.
import * as Comlink from 'comlink';
import { EngineClosedError } from '../errors.js';
import type { WeftEngine } from './engine.js';
import { SharedEngineHost } from './shared-host.js';
import type { SharedEngineWorkerApi } from './worker-protocol.js';
import { reply } from './worker-server.js';

/** The name of the Web Lock a tab holds while it lives. */
export function tabLockName(tab: string): string {
  return `weft-tab:${tab}`;
}

/** The part of a SharedWorker's global scope this needs: its `connect` events. */
export interface SharedWorkerScope {
  addEventListener(type: 'connect', listener: (event: MessageEvent) => void): void;
  removeEventListener(type: 'connect', listener: (event: MessageEvent) => void): void;
}

/**
 * Serves one engine to every tab connected to this SharedWorker (`weft/worker` calls it with
 * weft's own load function). `load` builds the engine from the options of the first tab that asks;
 * tabs that ask for the same options share it, and its progress events (`E`) reach each of them.
 * Its `signal` aborts when every tab waiting for the load has left (downloads stop there).
 */
export function serveSharedEngine<O, E>(
  load: (options: O, onProgress: (event: E) => void, signal: AbortSignal) => Promise<WeftEngine>,
  scope: SharedWorkerScope = globalThis as unknown as SharedWorkerScope,
  /** Ports of tabs that connected before this was called (a worker that loads this module lazily keeps them). */
  connected: readonly MessagePort[] = [],
): void {
  const host = new SharedEngineHost<O, E>(
    load,
    typeof navigator !== 'undefined' && navigator.gpu !== undefined,
  );
  for (const port of connected) servePort(host, port);
  scope.addEventListener('connect', (event) => {
    const port = event.ports[0];
    if (port) servePort(host, port);
  });
}

/** Answers one tab's port: the engine calls, for that tab once it has attached. */
function servePort<O, E>(host: SharedEngineHost<O, E>, port: MessagePort): void {
  let tab: string | undefined;
  const attached = (): string => {
    if (tab === undefined) throw new EngineClosedError('the tab has not attached to the shared engine');
    return tab;
  };
  const api: SharedEngineWorkerApi<O, E> = {
    attach(id) {
      if (tab === undefined) {
        tab = id;
        // Granted once the tab's own hold on it ends: the tab has gone.
        void navigator.locks.request(tabLockName(id), () => host.leave(id, 'closed'));
      }
      return host.state();
    },
    state: () => host.state(),
    load: ({ options }, onProgress) => reply(() => host.load(attached(), options, onProgress)),
    generate: (id, prompt, options, onEvent) =>
      reply(() => host.generate(attached(), id, prompt, options, onEvent)),
    abort(id) {
      if (tab !== undefined) host.abort(tab, id);
    },
    render: (messages, tools) => reply(() => host.render(attached(), messages, tools)),
    unload: () =>
      reply(async () => {
        if (tab !== undefined) await host.leave(tab, 'unload');
      }),
  };
  Comlink.expose(api, port);
}
