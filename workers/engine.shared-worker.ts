// The engine's SharedWorker: one engine for every tab of an origin (createSharedEngine), loaded
// with the same two load shapes as weft's engine worker (engine.worker.ts). Transport only.

/// <reference types="@webgpu/types" preserve="true" />

import { createEngine } from '../src/engine/create.js';
import { serveSharedEngine } from '../src/engine/shared-server.js';
import { loadChoice } from '../src/engine/sources.js';
import type { EngineWorkerLoadEvent, EngineWorkerLoadOptions } from '../src/engine/worker-protocol.js';

/** What `createSharedEngine(workers, options)` may pass to this worker. */
export type { EngineWorkerLoadOptions };

serveSharedEngine<EngineWorkerLoadOptions, EngineWorkerLoadEvent>((options, onProgress) =>
  'choice' in options ? loadChoice(options, onProgress) : createEngine({ ...options, onProgress }),
);
