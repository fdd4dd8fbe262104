// createWorkerEngine's types: checked by `tsc` (npm test type-checks the tests), so a call a web app
// could get wrong fails the build here. The function below is never run; the calls marked as
// expected errors must not compile.
import { describe, expect, expectTypeOf, it } from 'vitest';
import type { WeftEngine } from '../../src/engine/engine.js';
import type { ChoiceLoadEvent } from '../../src/engine/sources.js';
import type { ChatMessage, ChatTool } from '../../src/engine/types.js';
import { createWorkerEngine, type WorkerEngine } from '../../src/engine/worker-client.js';
import type { EngineWorkerLoadEvent } from '../../src/engine/worker-protocol.js';
import { serveEngine } from '../../src/engine/worker-server.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';

function calls(worker: Worker): void {
  void createWorkerEngine(worker, { model: '/models/kjv-target/', quant: 'int4', kvCache: 'f16' });
  void createWorkerEngine(
    worker,
    { choice: { kind: 'hub', id: 'org/name-GGUF', file: 'name-q8_0.gguf' }, quant: 'int8' },
    (e) => {
      expectTypeOf(e).toEqualTypeOf<EngineWorkerLoadEvent>();
      if ('kind' in e && e.kind === 'download') expectTypeOf(e.progress.bytesDone).toBeNumber();
    },
  );
  // The README's example, as written there.
  void createWorkerEngine(worker, { choice: { kind: 'hub', id: 'Qwen/Qwen3-0.6B' }, quant: 'int4' }, (e) => {
    if ('kind' in e && e.kind === 'download')
      console.log(`${e.progress.bytesDone} / ${e.progress.bytesTotal} bytes`);
  });
  // @ts-expect-error: not a quant
  void createWorkerEngine(worker, { model: '/m/', quant: 'int3' });
  // @ts-expect-error: files in memory cannot cross postMessage; name the model by URL
  void createWorkerEngine(worker, { model: memoryModelFiles('m', new Map()) });
  // @ts-expect-error: a GPU context's replacement cannot cross postMessage (the worker's engine makes its own)
  void createWorkerEngine(worker, { model: '/m/', replaceGpu: () => Promise.reject(new Error('none')) });
  // @ts-expect-error: a choice kind that does not exist
  void createWorkerEngine(worker, { choice: { kind: 'ftp', url: 'x' } });
  // A worker of one's own names its option and event types...
  void createWorkerEngine<{ custom: number }, string>(worker, { custom: 1 }, (e) => e.length);
  // @ts-expect-error: a progress callback for another event type
  void createWorkerEngine<{ custom: number }, string>(worker, { custom: 1 }, (e: number) => e);
  // ...and its serveEngine's load function reports that same event type.
  serveEngine<{ custom: number }, string>(async (options, onProgress) => {
    expectTypeOf(options).toEqualTypeOf<{ custom: number }>();
    expectTypeOf(onProgress).toEqualTypeOf<(event: string) => void>();
    // @ts-expect-error: not this worker's event type
    onProgress(1);
    throw new Error('types only');
  });
}

describe('createWorkerEngine types', () => {
  it("default to weft's worker: its load options and progress events", () => {
    expectTypeOf(calls).toBeFunction();
    expectTypeOf(createWorkerEngine).returns.resolves.toEqualTypeOf<WorkerEngine>();
    expectTypeOf<ChoiceLoadEvent>().toMatchTypeOf<EngineWorkerLoadEvent>();
    expectTypeOf<WorkerEngine>().toMatchTypeOf<WeftEngine>();
    expectTypeOf<WeftEngine['render']>().toEqualTypeOf<
      (messages: readonly ChatMessage[], tools?: readonly ChatTool[]) => Promise<number[]>
    >();
    expect(typeof calls).toBe('function');
  });
});
