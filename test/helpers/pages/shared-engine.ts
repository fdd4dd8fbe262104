// A tab of an app that shares weft's engine with its other tabs (createSharedEngine): the test
// opens several of these pages in one browser context and drives them through `window.weft`.
import { createSharedEngine, inspectSharedEngine } from '../../../src/engine/shared-client.js';
import type { EngineSharing, WorkerEngine } from '../../../src/engine/worker-client.js';
import type { SharedEngineState } from '../../../src/engine/worker-protocol.js';

const workers = {
  shared: () =>
    new SharedWorker(new URL('../../../workers/engine.worker.ts', import.meta.url), {
      type: 'module',
      name: 'weft-test',
    }),
  dedicated: () =>
    new Worker(new URL('../../../workers/engine.worker.ts', import.meta.url), { type: 'module' }),
};

let engine: WorkerEngine | undefined;
let progress = 0;
/** The request started by `start`: its ids so far, and how it ended. */
const background = { ids: [] as number[], chunks: 0, ended: '' };

/** What the test calls in the page. */
export interface SharedEnginePage {
  load(model: string, contextLength?: number): Promise<EngineSharing | undefined>;
  /** Progress events of the load received so far (they travel apart from load's answer). */
  progress(): number;
  generate(prompt: number[], maxTokens: number): Promise<number[]>;
  start(prompt: number[], maxTokens: number): void;
  background(): typeof background;
  state(): Promise<SharedEngineState>;
}

const page: SharedEnginePage = {
  async load(model, contextLength = 128) {
    engine = await createSharedEngine(
      workers,
      { model, quant: 'f32', contextLength },
      {
        onProgress: () => {
          progress++;
        },
      },
    );
    return engine.sharing;
  },
  progress: () => progress,
  async generate(prompt, maxTokens) {
    const ids: number[] = [];
    for await (const c of engine!.generate(prompt, { maxTokens })) ids.push(...c.ids);
    return ids;
  },
  start(prompt, maxTokens) {
    void (async () => {
      try {
        for await (const c of engine!.generate(prompt, { maxTokens, temperature: 1, seed: 3 })) {
          background.ids.push(...c.ids);
          background.chunks++;
        }
        background.ended = 'done';
      } catch (e) {
        background.ended = e instanceof Error ? e.name : String(e);
      }
    })();
  },
  background: () => background,
  state: () => inspectSharedEngine(workers.shared()),
};
Object.assign(globalThis, { weft: page });
