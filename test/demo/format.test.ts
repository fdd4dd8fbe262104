import { describe, expect, it } from 'vitest';
import { formatBytes, formatEta, formatMs, formatRate } from '../../demo/format.js';
import { depths, rows } from '../../demo/ui/tree.js';

describe('demo figures', () => {
  it('formats sizes, rates, ETAs and durations', () => {
    expect([0, 999, 1000, 1536, 12_345_678, 3.2e9].map(formatBytes)).toEqual([
      '0 B',
      '999 B',
      '1.0 KB',
      '1.5 KB',
      '12 MB',
      '3.2 GB',
    ]);
    expect(formatRate(2_500_000)).toBe('2.5 MB/s');
    expect([Number.POSITIVE_INFINITY, 4.4, 130, 3720].map(formatEta)).toEqual([
      '…',
      '~4 s',
      '~2 min 10 s',
      '~1 h 2 min',
    ]);
    expect([850.4, 2345, Number.NaN].map(formatMs)).toEqual(['850 ms', '2.3 s', '—']);
  });

  it('lays out a draft tree: depth and row of every node from the parent list', () => {
    expect(depths([-1, 0, 1, 0, -1, 4, -1])).toEqual([1, 2, 3, 2, 1, 2, 1]);
    // Chains stay on one row; a second child or a second root child starts a new one.
    expect(rows([-1, 0, 1, 0, -1, 4, -1])).toEqual([0, 0, 0, 1, 2, 2, 3]);
    expect(rows([-1, 0, 1, 2])).toEqual([0, 0, 0, 0]);
  });
});
