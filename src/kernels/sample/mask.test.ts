import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomBytes, randomF32 } from '../../../test/helpers/random.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import { sampleRef } from './gumbel.js';
import { applyMaskRef, maskWordsOf, TokenMask } from './mask.js';
import { Sampler } from './sample.js';

/** Random masks [rows, maskWordsOf(vocab)] with about `density` of the tokens allowed, at least one per row. */
function randomMasks(rows: number, vocab: number, seed: number, density: number): Uint32Array {
  const W = maskWordsOf(vocab);
  const bytes = randomBytes(rows * vocab, seed);
  const masks = new Uint32Array(rows * W);
  for (let r = 0; r < rows; r++) {
    for (let v = 0; v < vocab; v++)
      if (bytes[r * vocab + v]! < density * 256) masks[r * W + (v >>> 5)]! |= 1 << (v & 31);
    masks[r * W + (((r * 7) % vocab) >>> 5)]! |= 1 << (((r * 7) % vocab) & 31);
  }
  return masks;
}

describe('TokenMask on WebGPU', () => {
  // Vocabularies that do not fill the last mask word, and one that does.
  it.each([
    [1, 33],
    [3, 512],
    [5, 1000],
  ])('rows %i × vocab %i: bit-identical to applyMaskRef', async (rows, vocab) => {
    const ctx = await gpu();
    await TokenMask.prepare(ctx);
    const logits = randomF32(rows * vocab, rows + vocab, 8);
    const masks = randomMasks(rows, vocab, vocab, 0.3);
    const got = await runOnce(ctx, 'mask', (run) => {
      const k = run.own(new TokenMask(ctx, run.binds, vocab));
      const [bm, bl] = [run.upload(masks), run.upload(logits)];
      return { encode: (pass) => k.encode(pass, bm, bl, rows), read: () => readF32(ctx, bl, rows * vocab) };
    });
    const want = logits.slice();
    applyMaskRef(want, masks, vocab);
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(want.some((x) => x === Number.NEGATIVE_INFINITY)).toBe(true);
  });

  it('greedy and Gumbel sampling after the mask pick allowed tokens, as sampleRef does', async () => {
    const ctx = await gpu();
    const rows = 4;
    const vocab = 300;
    await Promise.all([TokenMask.prepare(ctx), Sampler.prepare(ctx, true), Sampler.prepare(ctx, false)]);
    const logits = randomF32(rows * vocab, 9, 4);
    const masks = randomMasks(rows, vocab, 11, 0.05);
    const positions = Uint32Array.from({ length: rows }, (_, i) => 10 + i);
    for (const temperature of [0, 1]) {
      const got = await runOnce(ctx, 'mask-sample', (run) => {
        const k = run.own(new TokenMask(ctx, run.binds, vocab));
        const s = run.own(new Sampler(ctx, run.binds, { vocab, greedy: temperature === 0 }));
        const [bm, bl, bp, bi] = [
          run.upload(masks),
          run.upload(logits),
          run.upload(positions),
          run.empty(rows * 4),
        ];
        return {
          encode: (pass) => {
            k.encode(pass, bm, bl, rows);
            s.encode(pass, bl, bp, bi, rows, { seed: 5, temperature: temperature || 1 });
          },
          read: async () => Array.from(await readU32(ctx, bi, rows)),
        };
      });
      const masked = logits.slice();
      applyMaskRef(masked, masks, vocab);
      const W = maskWordsOf(vocab);
      const want = got.map((_, r) =>
        sampleRef(masked.subarray(r * vocab, (r + 1) * vocab), 5, positions[r]!, { temperature }),
      );
      expect(got).toEqual(want);
      for (const [r, id] of got.entries()) expect((masks[r * W + (id >>> 5)]! >>> (id & 31)) & 1).toBe(1);
    }
  });
});
