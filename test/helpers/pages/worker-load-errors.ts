// Loads models that cannot be fetched through weft's real engine worker, as a web app would, and
// reports what reached the page: the test calls `window.loadError(options)` once per failure.
import { createWorkerEngine } from '../../../src/engine/worker-client.js';
import type { EngineWorkerLoadOptions } from '../../../src/engine/worker-protocol.js';
import { DownloadError, WeftError } from '../../../src/errors.js';

/** What a failed load threw, as the page sees it. */
export interface LoadFailure {
  readonly name: string;
  readonly message: string;
  /** Whether it is a weft error (`instanceof WeftError`) and a `DownloadError`. */
  readonly weft: boolean;
  readonly download: boolean;
  readonly url?: string;
  readonly status?: number;
}

declare global {
  interface Window {
    loadError(options: EngineWorkerLoadOptions): Promise<LoadFailure | 'loaded'>;
  }
}

const worker = new Worker(new URL('../../../workers/engine.worker.ts', import.meta.url), { type: 'module' });

window.loadError = async (options) => {
  try {
    const engine = await createWorkerEngine(worker, options);
    await engine.unload();
    return 'loaded';
  } catch (e) {
    if (!(e instanceof Error)) return { name: typeof e, message: String(e), weft: false, download: false };
    const failure = { name: e.name, message: e.message, weft: e instanceof WeftError };
    return e instanceof DownloadError
      ? { ...failure, download: true, url: e.url, status: e.status }
      : { ...failure, download: false };
  }
};
document.querySelector('[data-testid="status"]')!.textContent = 'ready';
