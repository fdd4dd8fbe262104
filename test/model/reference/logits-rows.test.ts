// Reading back only some logits rows (ModelRunner.lastLogits(rows)), and best-first tree drafting
// reading back only the rows of the nodes it expands.
import { describe, expect, it } from 'vitest';
import { ModelDrafter } from '../../../src/decode/model-drafter.js';
import { InvalidInputError } from '../../../src/errors.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';
import { fixtureFiles } from '../../fixtures/write.js';

async function runner(): Promise<ReferenceRunner> {
  const opened = await openModel(memoryModelFiles('llama', fixtureFiles('llama', 'f32', 7).files));
  return new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), { capacity: 64 });
}

describe('lastLogits(rows)', () => {
  it('returns the asked rows in the asked order, and names a row that was not scored', async () => {
    const r = await runner();
    const V = r.spec.vocabSize;
    await r.forward({ tokens: [9, 8, 7, 6, 5] }, GREEDY, 'all');
    const all = await r.lastLogits();
    const some = await r.lastLogits([3, 0, 3]);
    expect(some.length).toBe(3 * V);
    expect(Array.from(some.subarray(0, V))).toEqual(Array.from(all.subarray(3 * V, 4 * V)));
    expect(Array.from(some.subarray(V, 2 * V))).toEqual(Array.from(all.subarray(0, V)));
    expect(Array.from(some.subarray(2 * V))).toEqual(Array.from(all.subarray(3 * V, 4 * V)));
    await expect(r.lastLogits([5])).rejects.toThrow(InvalidInputError);
    await expect(r.lastLogits([5])).rejects.toThrow(/row 5 .* 5 scored rows/);
  });

  it('best-first tree drafting reads back only the rows it expands (at most 4 per depth)', async () => {
    const inner = await runner();
    const reads: number[] = [];
    let scored = 0;
    const counting: ModelRunner = {
      spec: inner.spec,
      capacity: inner.capacity,
      get kvLength() {
        return inner.kvLength;
      },
      forward: async (input, sampler, rows) => {
        const out = await inner.forward(input, sampler, rows);
        scored += rows === 'all' ? input.tokens.length : 1;
        return out;
      },
      lastLogits: async (rows) => {
        const out = await inner.lastLogits(rows);
        reads.push(out.length / inner.spec.vocabSize);
        return out;
      },
      commit: (path) => inner.commit(path),
      trim: (n) => inner.trim(n),
      dispose: () => inner.dispose(),
    };
    const drafter = new ModelDrafter('self', counting);
    const proposal = await drafter.propose([5, 17, 99, 3, 250, 11], 16, {
      temperature: 1,
      topP: 1,
      topK: 0,
      seed: 3,
    });
    expect(proposal.tokens.length).toBe(16);
    // The first read is the context's last row; then one read per depth.
    expect(reads[0]).toBe(1);
    expect(Math.max(...reads.slice(1))).toBeLessThanOrEqual(4);
    const read = reads.reduce((a, b) => a + b, 0);
    console.log(`[readback] rows scored by the draft forwards ${scored}, rows read back ${read}`);
    expect(read).toBeLessThan(scored);
  });
});
