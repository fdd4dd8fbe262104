// The engine's Web Worker: loads a model and serves it through comlink. Transport only; pages reach
// it with createWorkerEngine. Two load shapes: the CLI host passes createEngine's options (`model`
// as a URL or hub id); the demo page passes a serializable model choice (`choice`), which goes
// through the weights cache (see src/engine/sources.ts) and reports `ChoiceLoadEvent`s.

// The public types name WebGPU's (GPUBuffer, GPUDevice): an app's type-check finds them here.
/// <reference types="@webgpu/types" preserve="true" />

import { createEngine } from '../src/engine/create.js';
import { loadChoice } from '../src/engine/sources.js';
import type { EngineWorkerLoadEvent, EngineWorkerLoadOptions } from '../src/engine/worker-protocol.js';
import { serveEngine } from '../src/engine/worker-server.js';

/** What `createWorkerEngine(worker, options)` may pass to this worker. */
export type { EngineWorkerLoadOptions };

serveEngine<EngineWorkerLoadOptions, EngineWorkerLoadEvent>((options, onProgress) =>
  'choice' in options ? loadChoice(options, onProgress) : createEngine({ ...options, onProgress }),
);
