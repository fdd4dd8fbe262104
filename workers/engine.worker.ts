// The engine's worker: loads a model and serves it through comlink. Transport only. Started as a
// Web Worker it serves one page (createWorkerEngine); started as a SharedWorker it serves one engine
// to every tab of the origin (createSharedEngine: tabs with the same load options share the
// weights). Two load shapes: the CLI host passes createEngine's options (`model` as a URL or hub
// id); the demo page passes a serializable model choice (`choice`), which goes through the weights
// cache (see src/engine/sources.ts) and reports `ChoiceLoadEvent`s.

// The public types name WebGPU's (GPUBuffer, GPUDevice): an app's type-check finds them here.
/// <reference types="@webgpu/types" preserve="true" />

import { createEngine } from '../src/engine/create.js';
import type { WeftEngine } from '../src/engine/engine.js';
import type { SharedWorkerScope } from '../src/engine/shared-server.js';
import { loadChoice } from '../src/engine/sources.js';
import type { EngineWorkerLoadEvent, EngineWorkerLoadOptions } from '../src/engine/worker-protocol.js';
import { serveEngine } from '../src/engine/worker-server.js';

/** What `createWorkerEngine(worker, options)` and `createSharedEngine` may pass to this worker. */
export type { EngineWorkerLoadOptions };

/**
 * Loads the engine; `signal` (the shared worker's, when every tab waiting for the load has left)
 * stops a model choice's downloads (placing the weights runs to its end).
 */
function load(
  options: EngineWorkerLoadOptions,
  onProgress: (event: EngineWorkerLoadEvent) => void,
  signal?: AbortSignal,
): Promise<WeftEngine> {
  return 'choice' in options
    ? loadChoice(options, onProgress, signal ? { signal } : {})
    : createEngine({ ...options, onProgress });
}

// A SharedWorker's global scope is the one with `onconnect`. Its serving code loads on demand (a
// Web Worker never needs it); tabs that connect meanwhile are kept, not lost.
if ('onconnect' in globalThis) {
  const scope = globalThis as unknown as SharedWorkerScope;
  const connected: MessagePort[] = [];
  const keep = (e: MessageEvent) => {
    if (e.ports[0]) connected.push(e.ports[0]);
  };
  scope.addEventListener('connect', keep);
  void import('../src/engine/shared-server.js').then(({ serveSharedEngine }) => {
    scope.removeEventListener('connect', keep);
    serveSharedEngine(load, scope, connected);
  });
} else serveEngine(load);
