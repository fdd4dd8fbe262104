// Deno's node:worker_threads lacks parentPort.removeAllListeners (ERR_NOT_IMPLEMENTED), which
// vitest's thread pool calls when a test file's worker is torn down; without it every file ends
// with an unhandled rejection that fails the run. The worker exits right after the call, taking
// its listeners with it, so here the call does nothing. Test infrastructure only: the engine never
// uses worker_threads.
import { parentPort } from 'node:worker_threads';

if (parentPort && 'Deno' in globalThis) {
  const port = parentPort as unknown as { removeAllListeners(event?: string | symbol): unknown };
  port.removeAllListeners = () => port;
}
