import { describe, expect, it } from 'vitest';
import { routeTableLayout, routeTableRef } from '../../../../src/kernels/moe/table.js';
import { ExpertCache, routeGroups, waveTable } from '../../../../src/model/blocks/moe/cache.js';

const groups = (experts: number[]) => experts.map((expert, i) => ({ expert, first: i, count: 1 }));

describe('a mixture layer’s GPU cache of experts', () => {
  it('loads misses into empty slots, then the least recently used, and counts hits, misses and bytes', () => {
    const cache = new ExpertCache(3, 100);
    const [w1] = cache.plan(groups([4, 7]));
    expect(w1!.loads).toEqual([
      [4, 0],
      [7, 1],
    ]);
    expect(w1!.groups.map((g) => g.expert)).toEqual([0, 1]); // by slot
    cache.plan(groups([7, 9])); // 7 hits in slot 1, 9 loads into the empty slot 2
    const [w3] = cache.plan(groups([2, 9])); // 9 hits; 2 evicts 4 (slot 0, used longest ago)
    expect(w3!.loads).toEqual([[2, 0]]);
    expect(cache.totals).toEqual({ hits: 2, misses: 4, bytesLoaded: 400 });
  });

  it('runs a pass that chose more experts than it has slots in waves, held experts first, no wave evicting its own', () => {
    const cache = new ExpertCache(2, 10);
    cache.plan(groups([5]));
    const waves = cache.plan(groups([1, 3, 5, 6, 8]));
    expect(waves.map((w) => w.groups.length)).toEqual([2, 2, 1]);
    expect(waves[0]!.groups[0]).toEqual({ expert: 0, first: 2, count: 1 }); // 5, held in slot 0
    for (const w of waves) expect(new Set(w.groups.map((g) => g.expert)).size).toBe(w.groups.length);
    expect(cache.totals.hits).toBe(1);
    expect(cache.totals.misses).toBe(5);
  });

  it('a wave’s table holds its groups by slot and the pass’s members and positions, laid out for the cache', () => {
    const shape = { experts: 8, topK: 2, maxRows: 4 };
    const pool = { experts: 3, topK: 2, maxRows: 4 };
    const words = routeTableRef(shape, Int32Array.from([6, 1, 1, 3, 6, 3]));
    const g = routeGroups(words);
    expect(g.map((x) => [x.expert, x.count])).toEqual([
      [1, 2],
      [3, 2],
      [6, 2],
    ]);
    const [wave] = new ExpertCache(3, 1).plan(g);
    const t = waveTable(words, shape, pool, wave!);
    const from = routeTableLayout(shape);
    const to = routeTableLayout(pool);
    expect(t[0]).toBe(3);
    expect(Array.from(t.subarray(4, 16))).toEqual([0, 0, 2, 0, 1, 2, 2, 0, 2, 4, 2, 0]);
    expect(Array.from(t.subarray(to.members, to.members + 8))).toEqual(
      Array.from(words.subarray(from.members, from.members + 8)),
    );
    expect(Array.from(t.subarray(to.positions, to.positions + 8))).toEqual(
      Array.from(words.subarray(from.positions, from.positions + 8)),
    );
  });
});
