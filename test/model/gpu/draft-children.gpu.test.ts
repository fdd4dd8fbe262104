// Best-first tree drafting on the GPU ranks children where the logits lie (GpuRunner.lastChildren,
// kernels/sample/topk): it equals the reference ranking of the read-back rows, and each draft depth
// reads back 8 bytes per child instead of the expanded rows' logits.
import { describe, expect, it } from 'vitest';
import { ModelDrafter } from '../../../src/decode/model-drafter.js';
import { rankChildren } from '../../../src/decode/probs.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { countsSince, type GpuCounts } from '../../../src/gpu/counters.js';
import { childrenOfRow } from '../../../src/kernels/sample/topk.js';
import { createGpuRunner, type GpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { GREEDY, type ModelRunner, type SamplerSpec } from '../../../src/model/runner.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';

async function runner(): Promise<GpuRunner> {
  const { files } = fixtureFiles('llama', 'f32', 7);
  const opened = await openModel(memoryModelFiles('llama', files));
  return createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: await gpu() });
}

const SAMPLED: SamplerSpec = { temperature: 0.8, topP: 0.9, topK: 0, seed: 11 };

/** What a drafter asked of a GPU runner: each call, with the device work it caused. */
interface Call {
  kind: 'forward' | 'lastChildren' | 'lastLogits';
  rows: number;
  k: number;
  counts: GpuCounts;
}

/** `dev` as a ModelRunner that records every call; `children: false` hides lastChildren. */
function recording(dev: GpuRunner, calls: Call[], children: boolean): ModelRunner {
  const timed = async <T>(kind: Call['kind'], rows: number, k: number, f: () => Promise<T>): Promise<T> => {
    const before = dev.deviceCounts();
    const out = await f();
    calls.push({ kind, rows, k, counts: countsSince(dev.deviceCounts(), before) });
    return out;
  };
  return {
    spec: dev.spec,
    capacity: dev.capacity,
    get kvLength() {
      return dev.kvLength;
    },
    forward: (input, sampler, rows) =>
      timed('forward', rows === 'all' ? input.tokens.length : 1, 0, () => dev.forward(input, sampler, rows)),
    lastLogits: (rows) => timed('lastLogits', rows?.length ?? 0, 0, () => dev.lastLogits(rows)),
    ...(children
      ? {
          lastChildren: (rows: readonly number[], positions: readonly number[], s: SamplerSpec, k: number) =>
            timed('lastChildren', rows.length, k, () => dev.lastChildren(rows, positions, s, k)),
        }
      : {}),
    commit: (path) => dev.commit(path),
    trim: (n) => dev.trim(n),
    dispose: () => {},
  };
}

describe('tree drafting ranks children on the GPU', () => {
  it.each([
    ['greedy', GREEDY],
    ['T=0.8 top-p 0.9', SAMPLED],
  ] as const)('%s: lastChildren equals rankChildren of the read-back rows', async (_, sampler) => {
    const dev = await runner();
    const V = dev.spec.vocabSize;
    await dev.forward({ tokens: [5, 17, 99, 3] }, GREEDY, 'last');
    dev.commit([0, 1, 2, 3]);
    // A tree of 6 nodes: rows are asked out of order, one twice at another position.
    await dev.forward({ tokens: [7, 8, 9, 10, 11, 12], parents: [-1, 0, 0, -1, 3, 4] }, sampler, 'all');
    const rows = [4, 0, 2, 4];
    const positions = [6, 5, 6, 9];
    const got = await dev.lastChildren(rows, positions, sampler, 4);
    const logits = await dev.lastLogits(rows);
    for (const [i] of rows.entries()) {
      const ref = rankChildren(logits.subarray(i * V, (i + 1) * V), positions[i]!, sampler, 4);
      const mine = childrenOfRow(got, i, 4);
      expect(mine.map((c) => c.token)).toEqual(ref.map((c) => c.token));
      for (const [j, c] of mine.entries())
        expect(Math.abs(c.logWeight - ref[j]!.logWeight)).toBeLessThanOrEqual(
          1e-5 * (1 + Math.abs(ref[j]!.logWeight)),
        );
    }
    await expect(dev.lastChildren([6], [5], sampler, 4)).rejects.toThrow(/row 6 .* 6 scored rows/);
    await expect(dev.lastChildren([0], [5], sampler, 9)).rejects.toThrow(/k must be 1..8/);
    dev.dispose();
  });

  it.each([
    ['greedy', GREEDY],
    ['T=0.8 top-p 0.9', SAMPLED],
  ] as const)(
    '%s: each draft depth reads back rows × k × 8 bytes, and the tree is the one read-back logits give',
    async (_, sampler) => {
      const dev = await runner();
      const context = [5, 17, 99, 3, 250, 11];
      const calls: Call[] = [];
      const t0 = performance.now();
      const onGpu = await new ModelDrafter('self', recording(dev, calls, true)).propose(context, 16, sampler);
      const viaLogits: Call[] = [];
      dev.trim(0);
      const t1 = performance.now();
      const onCpu = await new ModelDrafter('self', recording(dev, viaLogits, false)).propose(
        context,
        16,
        sampler,
      );
      const t2 = performance.now();
      expect(onGpu.tokens).toEqual(onCpu.tokens);
      expect(onGpu.parents).toEqual(onCpu.parents);
      // Each node's score (its path's log weight, shown by the demo's tree view) sums the children's
      // log weights, which differ from the read-back logits' in the last bits (as above).
      expect(onGpu.scores?.length).toBe(16);
      for (const [i, s] of onGpu.scores!.entries())
        expect(Math.abs(s - onCpu.scores![i]!)).toBeLessThanOrEqual(1e-5 * (1 + Math.abs(onCpu.scores![i]!)));
      expect(onGpu.tokens.length).toBe(16);

      expect(calls.some((c) => c.kind === 'lastLogits')).toBe(false);
      const ranks = calls.filter((c) => c.kind === 'lastChildren');
      expect(ranks.length).toBeGreaterThan(1);
      for (const c of ranks) {
        expect(c.counts.readbacks).toBe(1);
        expect(c.counts.readbackBytes).toBe(c.rows * c.k * 8);
        expect(c.counts.submits).toBe(1);
      }
      // Per depth: the draft forward's ids (4 bytes per node) and 8 bytes per child, where read-back
      // logits cost 4 · vocab bytes per expanded row.
      const V = dev.spec.vocabSize;
      const bytes = (log: Call[]) => log.reduce((s, c) => s + c.counts.readbackBytes, 0);
      const rowsRanked = ranks.reduce((s, c) => s + c.rows, 0);
      const logitRows = viaLogits.filter((c) => c.kind === 'lastLogits').reduce((s, c) => s + c.rows, 0);
      expect(logitRows).toBe(rowsRanked);
      const forwards = calls.filter((c) => c.kind === 'forward');
      expect(bytes(calls)).toBe(bytes(forwards) + ranks.reduce((s, c) => s + c.rows * c.k * 8, 0));
      expect(bytes(viaLogits)).toBe(bytes(forwards) + logitRows * V * 4);
      console.log(
        `[draft-children] ${ranks.length} rankings of ${rowsRanked} rows (k = ${ranks[0]!.k}): ` +
          `${bytes(calls)} B read back with lastChildren, ${bytes(viaLogits)} B with lastLogits (V = ${V}); ` +
          `proposal ${(t1 - t0).toFixed(0)} ms, ${(t2 - t1).toFixed(0)} ms through lastLogits (the first compiles the kernels)`,
      );
      dev.dispose();
    },
  );
});
