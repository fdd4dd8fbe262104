// The page side of one engine for every tab: createSharedEngine connects to weft's shared engine
// worker (`weft/worker` started as a SharedWorker), where the tabs of an origin that load the same model share one copy
// of its weights, and falls back to a worker of the tab's own where that cannot serve it.
import * as Comlink from 'comlink';
import { AbortError } from '../errors.js';
import { tabLockName } from './shared-server.js';
import { loadInWorker, unwrap, WorkerEngine } from './worker-client.js';
import type {
  EngineWorkerLoadEvent,
  EngineWorkerLoadOptions,
  SharedEngineState,
  SharedEngineWorkerApi,
  SharedLoadResult,
} from './worker-protocol.js';

/** How createSharedEngine starts its workers (each called at most once). */
export interface SharedEngineWorkers {
  /**
   * Connects to the shared engine worker: weft's worker started as a SharedWorker,
   * `() => new SharedWorker(new URL('weft/worker', import.meta.url), { type: 'module', name: 'weft' })`
   * (every tab of the origin that names the same script and name reaches the same one).
   */
  shared(): SharedWorker;
  /**
   * A worker of this tab's own, for when the shared one cannot serve it: the same script as a Web
   * Worker, `() => new Worker(new URL('weft/worker', import.meta.url), { type: 'module' })`.
   */
  dedicated(): Worker;
}

/** Options of {@link createSharedEngine} besides the load options. */
export interface SharedEngineOptions<E> {
  /** Progress of the load; a tab that joins a load already running first gets the events so far. */
  onProgress?: (event: E) => void;
  /** Cancels the load: this tab leaves (the model is freed if no other tab holds it). */
  signal?: AbortSignal;
}

/** Rejects with AbortError once `signal` aborts, after running `cleanup`. */
function cancelled(signal: AbortSignal | undefined, cleanup: () => void): Promise<never> {
  return new Promise<never>((_, reject) => {
    const stop = () => {
      cleanup();
      reject(new AbortError('loading cancelled'));
    };
    if (signal?.aborted) stop();
    else signal?.addEventListener('abort', stop, { once: true });
  });
}

/** Holds the Web Lock `name` until the returned function is called; resolves once it is held. */
async function holdLock(name: string): Promise<() => void> {
  let release!: () => void;
  const held = new Promise<void>((r) => {
    release = r;
  });
  await new Promise<void>((granted) => {
    void navigator.locks.request(name, () => {
      granted();
      return held;
    });
  });
  return release;
}

/** A worker of this tab's own, told why. */
async function ownWorker<O, E>(
  workers: SharedEngineWorkers,
  options: O,
  reason: string,
  { onProgress, signal }: SharedEngineOptions<E>,
): Promise<WorkerEngine> {
  const worker = workers.dedicated();
  try {
    return await Promise.race([
      loadInWorker<O, E>(worker, options, onProgress, { shared: false, reason }),
      cancelled(signal, () => worker.terminate()),
    ]);
  } catch (err) {
    worker.terminate();
    throw err;
  }
}

/**
 * Loads a model in the engine that every tab of this origin shares (a SharedWorker), so a second tab
 * with the same load options uses the weights already placed instead of loading a second copy; the
 * engine's interface is the in-thread engine's. Requests from the tabs run one at a time, taken from
 * the tabs in turn; a closed tab's requests are cancelled; the weights are freed when the last tab
 * unloads or goes. Where the shared worker cannot serve this tab (no SharedWorker or Web Locks in
 * this browser, no WebGPU in its SharedWorkers, or the shared engine holding another model for other
 * tabs), the tab gets a worker of its own: `engine.sharing` says which, and why.
 */
export async function createSharedEngine<O = EngineWorkerLoadOptions, E = EngineWorkerLoadEvent>(
  workers: SharedEngineWorkers,
  options: NoInfer<O>,
  opts: SharedEngineOptions<E> = {},
): Promise<WorkerEngine> {
  if (typeof SharedWorker === 'undefined')
    return ownWorker(workers, options, 'this browser has no SharedWorker', opts);
  if (typeof navigator === 'undefined' || !navigator.locks)
    return ownWorker(workers, options, 'this browser has no Web Locks', opts);
  const shared = workers.shared();
  const remote = Comlink.wrap<SharedEngineWorkerApi<O, E>>(shared.port);
  const failed = new Promise<never>((_, reject) => {
    shared.addEventListener('error', () => reject(new Error('the shared engine worker failed to start')), {
      once: true,
    });
  });
  const tab = crypto.randomUUID();
  const release = await holdLock(tabLockName(tab));
  const close = () => {
    release();
    remote[Comlink.releaseProxy]();
    shared.port.close();
  };
  let state: SharedEngineState;
  try {
    state = await Promise.race([remote.attach(tab), failed]);
  } catch (err) {
    close();
    return ownWorker(workers, options, `the shared engine worker did not start (${String(err)})`, opts);
  }
  if (!state.gpu) {
    close();
    return ownWorker(workers, options, 'WebGPU is not exposed in SharedWorkers in this browser', opts);
  }
  const { onProgress, signal } = opts;
  const leave = () => {
    void remote.unload().finally(close);
  };
  let loaded: SharedLoadResult;
  try {
    loaded = await Promise.race([
      unwrap(remote.load({ options }, onProgress ? Comlink.proxy(onProgress) : undefined)),
      cancelled(signal, leave),
    ]);
  } catch (err) {
    if (!signal?.aborted) close();
    throw err;
  }
  if (loaded.kind === 'busy') {
    close();
    const held = loaded.modelId ?? 'another model';
    return ownWorker(
      workers,
      options,
      `the shared engine holds ${held} for ${loaded.tabs} other tab(s)`,
      opts,
    );
  }
  return new WorkerEngine(remote, loaded.modelId, { terminate: close }, loaded.contextLength, {
    shared: true,
  });
}

/** What the shared engine worker is doing (which model, how many tabs, loads and frees so far). */
export async function inspectSharedEngine(shared: SharedWorker): Promise<SharedEngineState> {
  const remote = Comlink.wrap<SharedEngineWorkerApi>(shared.port);
  try {
    return await remote.state();
  } finally {
    remote[Comlink.releaseProxy]();
    shared.port.close();
  }
}
