import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { allowedTokens, gumbelKey, gumbelScore } from './gumbel.js';
import {
  type Children,
  childrenOfRow,
  childrenRef,
  packChildren,
  type RankCall,
  type RankedChild,
  TopKChildren,
  unpackChildren,
} from './topk.js';

/** The k best children of logits rows [*, vocab] picked by `rows` with {@link TopKChildren}. */
async function runTopK(
  ctx: GpuContext,
  logits: Float32Array,
  vocab: number,
  rows: readonly number[],
  positions: readonly number[],
  k: number,
  call: RankCall,
): Promise<Children> {
  const R = rows.length;
  await TopKChildren.prepare(ctx);
  return runOnce(ctx, 'topk', (run) => {
    const op = run.own(new TopKChildren(ctx, run.binds, { vocab, maxRows: R }));
    const picks = Uint32Array.from(rows.flatMap((r, i) => [r, positions[i]!]));
    const [bl, bp, bo] = [run.upload(logits), run.upload(picks), run.empty(R * k * 8)];
    return {
      encode: (pass) => op.encode(pass, bl, bp, bo, R, k, call),
      read: async () => unpackChildren(await readU32(ctx, bo, R * k * 2), R, k),
    };
  });
}

/** Deterministic uniform floats in [-scale, scale) from a tiny LCG. */
function randu(n: number, seed: number, scale: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32 - 0.5) * 2 * scale;
  }
  return out;
}

/**
 * Checks one row's GPU children against the reference: the same count; at each rank the same
 * token, or else a near-tie of reference scores (the GPU's `log` in the noise is not bit-identical
 * to Math.log) with an allowed token; log weights within 1e-5 (relative beyond magnitude 1).
 * Returns the number of near-tie swaps.
 */
function expectSameChildren(
  got: readonly RankedChild[],
  logits: Float32Array,
  position: number,
  call: RankCall,
  k: number,
): number {
  const ref = childrenRef(logits, position, call, k);
  expect(got.length).toBe(ref.length);
  const greedy = call.temperature <= 0;
  const ok = greedy ? undefined : allowedTokens(logits, call);
  const key = gumbelKey(call.seed, position);
  const invT = Math.fround(1 / call.temperature);
  const score = (v: number) => (greedy ? logits[v]! : gumbelScore(logits[v]!, invT, key, v));
  let swaps = 0;
  for (const [j, r] of ref.entries()) {
    const g = got[j]!;
    if (g.token !== r.token) {
      swaps++;
      expect(greedy, `greedy rank ${j}: ${g.token} instead of ${r.token}`).toBe(false);
      expect(ok![g.token], `token ${g.token} is outside the allowed set`).toBe(true);
      expect(Math.abs(score(g.token) - score(r.token))).toBeLessThanOrEqual(
        1e-5 * (1 + Math.abs(score(r.token))),
      );
    }
    expect(Math.abs(g.logWeight - r.logWeight)).toBeLessThanOrEqual(1e-5 * (1 + Math.abs(r.logWeight)));
  }
  return swaps;
}

const GREEDY: RankCall = { temperature: 0, seed: 0 };

describe('GPU top-k children (tree drafting)', () => {
  const cases: [string, number, number, number, RankCall][] = [
    ['greedy', 33, 1, 1, GREEDY],
    ['T=1', 33, 3, 8, { temperature: 1, seed: 11 }],
    ['T=0.7 top-k 2 (fewer children than k)', 33, 17, 4, { temperature: 0.7, topK: 2, seed: 12 }],
    ['greedy', 4096, 3, 4, GREEDY],
    ['T=1 top-p 0.9', 4096, 17, 8, { temperature: 1, topP: 0.9, seed: 13 }],
    ['T=0.7 top-k 3', 4096, 1, 8, { temperature: 0.7, topK: 3, seed: 14 }],
    ['T=1 min-p 0.05', 50000, 1, 4, { temperature: 1, minP: 0.05, seed: 15 }],
    [
      'T=0.7 top-k 50 top-p 0.9 min-p 0.02',
      50000,
      3,
      8,
      { temperature: 0.7, topK: 50, topP: 0.9, minP: 0.02, seed: 16 },
    ],
    ['greedy', 50000, 17, 4, GREEDY],
    ['greedy sharpened ×4 (a draft head)', 4096, 5, 4, { ...GREEDY, sharpen: 4 }],
    ['T=1 sharpen ignored', 4096, 3, 4, { temperature: 1, seed: 18, sharpen: 4 }],
    ['T=1', 50000, 17, 1, { temperature: 1, seed: 17 }],
  ];
  it.each(cases)('%s on V=%i, R=%i, k=%i equals the reference', async (_, V, R, k, call) => {
    const ctx = await gpu();
    const logits = randu(R * V, V * 31 + R * 7 + k, 4);
    // Ties: in every row the three largest logits are equal and sit in different chunks (greedy
    // must rank them by id; the filters keep or drop them together), and one more pair ties below.
    for (let r = 0; r < R; r++) {
      for (const v of [V - 3, 7, Math.floor(V / 2)]) logits[r * V + v] = 9;
      logits[r * V + 1] = logits[r * V + V - 1] = 8.5;
    }
    const rows = Array.from({ length: R }, (_, r) => r);
    const positions = rows.map((r) => 1000 + 37 * r);
    const got = await runTopK(ctx, logits, V, rows, positions, k, call);
    let swaps = 0;
    for (let r = 0; r < R; r++)
      swaps += expectSameChildren(
        childrenOfRow(got, r, k),
        logits.subarray(r * V, (r + 1) * V),
        positions[r]!,
        call,
        k,
      );
    if (call.temperature <= 0) {
      const first = childrenOfRow(got, 0, k).map((c) => c.token);
      expect(first).toEqual([7, Math.floor(V / 2), V - 3, 1].slice(0, k));
    }
    expect(swaps).toBeLessThanOrEqual(1);
  });

  it('ranks the picked rows, in the picked order, at their own positions', async () => {
    const ctx = await gpu();
    const V = 3000;
    const logits = randu(5 * V, 99, 3);
    const rows = [3, 0, 3, 4];
    const positions = [10, 11, 12, 0xfffffff0];
    const call: RankCall = { temperature: 0.8, topP: 0.95, seed: 5 };
    const got = await runTopK(ctx, logits, V, rows, positions, 4, call);
    for (const [i, r] of rows.entries())
      expectSameChildren(
        childrenOfRow(got, i, 4),
        logits.subarray(r * V, (r + 1) * V),
        positions[i]!,
        call,
        4,
      );
    // Row 3 twice at different positions: other noise, other children.
    expect(childrenOfRow(got, 0, 4)).not.toEqual(childrenOfRow(got, 2, 4));
  });
});

describe('child lists', () => {
  it('pack and unpack round-trip, short lists padded with -1', () => {
    const lists = [
      [{ token: 4, logWeight: -0.5 }],
      [],
      [
        { token: 2, logWeight: 0 },
        { token: 9, logWeight: -2 },
      ],
    ];
    const packed = packChildren(lists, 2);
    expect(Array.from(packed.tokens)).toEqual([4, -1, -1, -1, 2, 9]);
    expect(lists.map((_, r) => childrenOfRow(packed, r, 2))).toEqual(lists);
    const words = new Uint32Array(12);
    const f = new Float32Array(words.buffer);
    for (let i = 0; i < 6; i++) {
      words[2 * i] = packed.tokens[i]! >>> 0;
      f[2 * i + 1] = packed.logWeights[i]!;
    }
    expect(unpackChildren(words, 3, 2)).toEqual(packed);
  });
});
