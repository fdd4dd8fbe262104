// The engine's Web Worker: loads a model with createEngine and serves it through comlink.
// Transport only; pages reach it with createWorkerEngine.
import { type CreateEngineOptions, createEngine } from '../src/engine/create.js';
import { serveEngine } from '../src/engine/worker-server.js';

serveEngine<Omit<CreateEngineOptions, 'onProgress' | 'gpu'>>((options, onProgress) =>
  createEngine({ ...options, onProgress }),
);
