// The page the CLI drives in headless Chromium when Node's own WebGPU can't run kernels: it runs
// the engine in its Web Worker and relays every event to Node through functions the CLI exposes.
// It runs as compiled (dist/src/cli/host/page.js, served by chromium-host.ts), never bundled: the
// worker is the compiled dist/workers/engine.worker.js.

import type { ChoiceLoadOptions } from '../../engine/sources.js';
import type { GenerateOptions, GenerationChunk, GenerationStats } from '../../engine/types.js';
import { createWorkerEngine, type WorkerEngine } from '../../engine/worker-client.js';
import type { EngineWorkerLoadEvent, EngineWorkerLoadOptions } from '../../engine/worker-protocol.js';

/** What the CLI asks the page to run. */
export interface HostJob {
  load: Exclude<EngineWorkerLoadOptions, ChoiceLoadOptions>;
  prompt: string | number[];
  generate: Omit<GenerateOptions, 'signal'>;
}

declare global {
  interface Window {
    /** Set by this page: runs one job. */
    weftRun(job: HostJob): Promise<{ stats: GenerationStats | undefined; adapter: string }>;
    /** Exposed by the CLI (playwright's exposeFunction): receives each streamed chunk. */
    weftChunk(chunk: GenerationChunk): Promise<void>;
    /** Exposed by the CLI: receives load progress (and warnings). */
    weftProgress(event: EngineWorkerLoadEvent): Promise<void>;
  }
}
let engine: WorkerEngine | undefined;

window.weftRun = async (job) => {
  const worker = new Worker(new URL('../../../workers/engine.worker.js', import.meta.url), {
    type: 'module',
  });
  engine = await createWorkerEngine(worker, job.load, (e) => void window.weftProgress(e));
  for await (const chunk of engine.generate(job.prompt, job.generate)) await window.weftChunk(chunk);
  const adapter = (await navigator.gpu?.requestAdapter())?.info;
  return {
    stats: engine.lastStats,
    adapter: adapter ? `${adapter.vendor} ${adapter.architecture}`.trim() : 'unknown',
  };
};
