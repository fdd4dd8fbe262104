import { describe, expect, it } from 'vitest';
import { CachedPrefix } from '../../src/model/prefix.js';
import { GREEDY } from '../../src/model/runner.js';
import { ToyRunner } from '../helpers/toy-model.js';

describe('CachedPrefix', () => {
  it('prefills in chunks, committing each, and returns the token after the context', async () => {
    const runner = new ToyRunner();
    const cached = new CachedPrefix(runner);
    const context = [1, 2, 3, 4, 5, 6, 7];
    const sync = await cached.sync(context, GREEDY, 3);
    expect(sync).toEqual({ next: runner.next(7, 7), reused: 0, passes: 3 });
    expect(runner.calls.map((c) => c.tokens)).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(runner.kvLength).toBe(7);
    expect(cached.tokens).toEqual(context);
  });

  it('keeps the longest shared prefix, trims the rest, and always runs the last token', async () => {
    const runner = new ToyRunner();
    const cached = new CachedPrefix(runner);
    await cached.sync([1, 2, 3, 4], GREEDY, 64);
    cached.push([9]); // committed by the caller (a decode step)
    await runner.forward({ tokens: [9] }, GREEDY, 'last');
    runner.commit([0]);

    runner.calls.length = 0;
    const diverged = await cached.sync([1, 2, 8, 8], GREEDY, 64);
    expect(diverged.reused).toBe(2);
    expect(runner.calls).toEqual([{ tokens: [8, 8], kvLength: 2 }]);

    // The whole context is cached: its last token still runs, so the last scored row is its own.
    runner.calls.length = 0;
    const same = await cached.sync([1, 2, 8, 8], GREEDY, 64);
    expect(same).toEqual({ next: runner.next(8, 4), reused: 3, passes: 1 });
    expect(runner.calls).toEqual([{ tokens: [8], kvLength: 3 }]);
    expect(cached.tokens).toEqual([1, 2, 8, 8]);
  });

  it('starts again from 0 where the runner cannot trim to the shared prefix (a sliding ring moved on)', async () => {
    const runner = new ToyRunner();
    // As a ring's rule: back at most 2 rows from the end.
    Object.assign(runner, { canTrim: (n: number) => n === 0 || n >= runner.kvLength - 2 });
    const cached = new CachedPrefix(runner);
    await cached.sync([1, 2, 3, 4, 5, 6], GREEDY, 64);
    runner.calls.length = 0;
    expect((await cached.sync([1, 2, 3, 4, 7, 7], GREEDY, 64)).reused).toBe(4);
    expect(runner.calls).toEqual([{ tokens: [7, 7], kvLength: 4 }]);
    runner.calls.length = 0;
    expect((await cached.sync([1, 2, 9], GREEDY, 64)).reused).toBe(0);
    expect(runner.calls).toEqual([{ tokens: [1, 2, 9], kvLength: 0 }]);
  });

  it('runs beforeChunk before every prefill forward; a throw keeps the chunks done so far', async () => {
    const runner = new ToyRunner();
    const cached = new CachedPrefix(runner);
    let chunks = 0;
    const stopAtThird = () => {
      if (++chunks === 3) throw new Error('aborted');
    };
    await expect(cached.sync([1, 2, 3, 4, 5], GREEDY, 2, stopAtThird)).rejects.toThrow('aborted');
    expect(runner.kvLength).toBe(4);
    expect(cached.tokens).toEqual([1, 2, 3, 4]);
  });
});
