// The shared engine's host (one engine for every tab, src/engine/shared-host.ts) over a stand-in
// engine: one load for tabs that ask for the same options, requests taken from the tabs in turn, a
// gone tab's requests cancelled and the others untouched, the model freed with the last tab.
import { describe, expect, it } from 'vitest';
import type { WeftEngine } from '../../src/engine/engine.js';
import { canonicalKey, SharedEngineHost } from '../../src/engine/shared-host.js';
import type { GenerationChunk } from '../../src/engine/types.js';
import type { StreamEvent } from '../../src/engine/worker-protocol.js';
import { AbortError, EngineClosedError } from '../../src/errors.js';

interface Options {
  model: string;
  quant?: string;
}

/** A stand-in engine: request `p` yields `tokens` chunks [p, i], one per macrotask, in turn. */
class FakeEngine implements WeftEngine {
  readonly contextLength = 64;
  readonly lastStats = undefined;
  readonly chat = undefined as never;
  /** The prompts of the requests, in the order they started. */
  readonly started: string[] = [];
  unloaded = false;
  private busy = false;

  constructor(
    readonly modelId: string,
    private readonly tokens = 3,
  ) {}

  async *generate(prompt: string | readonly number[], options: { signal?: AbortSignal } = {}) {
    if (this.busy) throw new Error('two requests at once');
    this.busy = true;
    try {
      this.started.push(String(prompt));
      for (let i = 0; i < this.tokens; i++) {
        await new Promise((r) => setTimeout(r, 1));
        if (options.signal?.aborted) throw options.signal.reason;
        const chunk: GenerationChunk = { ids: [i], text: `${String(prompt)}${i}` };
        yield chunk;
      }
    } finally {
      this.busy = false;
    }
  }

  render(): Promise<number[]> {
    return Promise.resolve([1, 2]);
  }

  unload(): Promise<void> {
    this.unloaded = true;
    return Promise.resolve();
  }
}

/** A host whose loads make FakeEngines (logged) and report two progress events each. */
function fakeHost() {
  const engines: FakeEngine[] = [];
  const aborted: string[] = [];
  const host = new SharedEngineHost<Options, string>(async (options, onProgress, signal) => {
    onProgress(`open ${options.model}`);
    await new Promise((r) => setTimeout(r, 5));
    // The stand-in's download ends either way; it notes the abort.
    if (signal.aborted) aborted.push(options.model);
    onProgress(`ready ${options.model}`);
    const e = new FakeEngine(options.model);
    engines.push(e);
    return e;
  }, true);
  return { host, engines, aborted };
}

/** Runs a request of `tab` and collects its chunks' texts (and whether it finished). */
function request(host: SharedEngineHost<Options, string>, tab: string, id: number, prompt: string) {
  const texts: string[] = [];
  let done = false;
  const onEvent = (e: StreamEvent) => {
    if (e.kind === 'chunk') texts.push(e.chunk.text);
    else done = true;
  };
  const finished = host.generate(tab, id, prompt, {}, onEvent);
  return { texts, finished, done: () => done };
}

describe('the shared engine host', () => {
  it('loads once for tabs that ask for the same options, and each sees the whole progress', async () => {
    const { host, engines } = fakeHost();
    const seen = { a: [] as string[], b: [] as string[] };
    const [a, b] = await Promise.all([
      host.load('a', { model: 'm', quant: 'f32' }, (e) => seen.a.push(e)),
      // The same options in another key order.
      host.load('b', { quant: 'f32', model: 'm' }, (e) => seen.b.push(e)),
    ]);
    expect(a).toEqual({ kind: 'loaded', modelId: 'm', contextLength: 64 });
    expect(b).toEqual(a);
    expect(engines).toHaveLength(1);
    expect(seen.a).toEqual(['open m', 'ready m']);
    expect(seen.b).toEqual(['open m', 'ready m']);
    // A third tab after the load gets the progress replayed, and no second load happens.
    const late: string[] = [];
    await host.load('c', { model: 'm', quant: 'f32' }, (e) => late.push(e));
    expect(late).toEqual(['open m', 'ready m']);
    expect(host.state()).toMatchObject({ modelId: 'm', tabs: 3, loads: 1, unloads: 0 });
    expect(canonicalKey({ b: [1, { y: 1, x: 2 }], a: 1 })).toBe('{"a":1,"b":[1,{"x":2,"y":1}]}');
  });

  it('takes the tabs in turn: a tab that queued many requests does not make another wait for all of them', async () => {
    const { host, engines } = fakeHost();
    await host.load('a', { model: 'm' });
    await host.load('b', { model: 'm' });
    const runs = [
      request(host, 'a', 1, 'a1'),
      request(host, 'a', 2, 'a2'),
      request(host, 'a', 3, 'a3'),
      request(host, 'b', 1, 'b1'),
      request(host, 'b', 2, 'b2'),
    ];
    await Promise.all(runs.map((r) => r.finished));
    expect(engines[0]!.started).toEqual(['a1', 'b1', 'a2', 'b2', 'a3']);
    for (const r of runs) {
      expect(r.texts).toHaveLength(3);
      expect(r.done()).toBe(true);
    }
  });

  it("cancels a gone tab's requests, running and queued, and serves the other tab's", async () => {
    const { host, engines } = fakeHost();
    await host.load('a', { model: 'm' });
    await host.load('b', { model: 'm' });
    const a1 = request(host, 'a', 1, 'a1');
    const a2 = request(host, 'a', 2, 'a2');
    const b1 = request(host, 'b', 1, 'b1');
    await new Promise((r) => setTimeout(r, 2));
    expect(host.state()).toMatchObject({ running: true, queued: 2 });
    const aborted = [a1, a2].map((r) => expect(r.finished).rejects.toBeInstanceOf(AbortError));
    await host.leave('a', 'closed');
    await Promise.all(aborted);
    await b1.finished;
    expect(b1.texts).toEqual(['b10', 'b11', 'b12']);
    expect(engines[0]!.started).toEqual(['a1', 'b1']);
    expect(host.state()).toMatchObject({ tabs: 1, cancelled: 2, unloads: 0, queued: 0, running: false });
    expect(engines[0]!.unloaded).toBe(false);
    // The gone tab has no engine any more.
    expect(() => host.generate('a', 3, 'a3', {}, () => {})).toThrow(EngineClosedError);
  });

  it('aborts one request of a tab, waiting or running, and keeps the tab', async () => {
    const { host, engines } = fakeHost();
    await host.load('a', { model: 'm' });
    const a1 = request(host, 'a', 1, 'a1');
    const a2 = request(host, 'a', 2, 'a2');
    const a3 = request(host, 'a', 3, 'a3');
    const aborted = [a1, a2].map((r) => expect(r.finished).rejects.toBeInstanceOf(AbortError));
    host.abort('a', 2);
    host.abort('a', 1);
    await Promise.all(aborted);
    await a3.finished;
    expect(engines[0]!.started).toEqual(['a1', 'a3']);
    expect(host.state()).toMatchObject({ tabs: 1, cancelled: 0 });
  });

  it('frees the model when the last tab goes, and loads it again for the next tab', async () => {
    const { host, engines } = fakeHost();
    await host.load('a', { model: 'm' });
    await host.load('b', { model: 'm' });
    await host.leave('a', 'unload');
    expect(engines[0]!.unloaded).toBe(false);
    const b1 = request(host, 'b', 1, 'b1');
    const aborted = expect(b1.finished).rejects.toBeInstanceOf(AbortError);
    await host.leave('b', 'closed');
    await aborted;
    expect(engines[0]!.unloaded).toBe(true);
    expect(host.state()).toMatchObject({ modelId: undefined, tabs: 0, loads: 1, unloads: 1, cancelled: 1 });
    await host.load('c', { model: 'm' });
    expect(engines).toHaveLength(2);
    expect(host.state()).toMatchObject({ modelId: 'm', tabs: 1, loads: 2 });
  });

  it('answers busy for other options while other tabs hold the model, and swaps it for a tab alone', async () => {
    const { host, engines } = fakeHost();
    await host.load('a', { model: 'm' });
    await host.load('b', { model: 'm' });
    expect(await host.load('c', { model: 'n' })).toEqual({ kind: 'busy', modelId: 'm', tabs: 2 });
    expect(await host.load('a', { model: 'n' })).toEqual({ kind: 'busy', modelId: 'm', tabs: 1 });
    await host.leave('b', 'unload');
    expect(await host.load('a', { model: 'n' })).toMatchObject({ kind: 'loaded', modelId: 'n' });
    expect(engines.map((e) => [e.modelId, e.unloaded])).toEqual([
      ['m', true],
      ['n', false],
    ]);
  });

  it('cancels the load of a model every tab left while it loaded, and frees what it placed', async () => {
    const { host, engines, aborted } = fakeHost();
    const load = expect(host.load('a', { model: 'm' })).rejects.toBeInstanceOf(AbortError);
    await host.leave('a', 'unload');
    await load;
    await new Promise((r) => setTimeout(r, 1));
    expect(aborted).toEqual(['m']);
    expect(engines[0]!.unloaded).toBe(true);
    expect(host.state()).toMatchObject({ modelId: undefined, tabs: 0, loads: 1, unloads: 1 });
  });
});
