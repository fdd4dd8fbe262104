// A Web Worker that throws every weft error class through the real serveEngine: from `load`, or
// from the engine it loads (`render`, and `generate` after one chunk), as the page asks. No model.
import type { WeftEngine } from '../../../src/engine/engine.js';
import { chatApi } from '../../../src/engine/openai.js';
import type { GenerationChunk } from '../../../src/engine/types.js';
import { serveEngine } from '../../../src/engine/worker-server.js';
import type { WeftErrorName } from '../../../src/errors.js';
import { sampleErrors } from '../../fixtures/weft-errors.js';

/** What the page loads: throw the sample error `name` from `load`, or an engine whose calls throw it. */
export interface ThrowRequest {
  readonly name: WeftErrorName;
  readonly at: 'load' | 'engine';
}

/** An engine whose `render` throws `error`, and whose `generate` throws it after one chunk. */
function throwingEngine(error: Error): WeftEngine {
  const render = async (): Promise<number[]> => {
    throw error;
  };
  async function* generate(): AsyncGenerator<GenerationChunk> {
    yield { ids: [1], text: 'a' };
    throw error;
  }
  return {
    modelId: 'throws',
    contextLength: 64,
    lastStats: undefined,
    generate,
    render,
    chat: chatApi({ modelId: 'throws', contextLength: 64, render, generate, stats: () => undefined }),
    unload: async () => {},
  };
}

serveEngine<ThrowRequest, never>(async ({ name, at }) => {
  const error = sampleErrors()[name];
  if (at === 'load') throw error;
  return throwingEngine(error);
});
