// The decode profile (GpuRunner.profiler, bench/gpu-run.sh's per-section GPU time): a profiled
// forward runs the same dispatches and gives the same ids as an unprofiled one, and every section
// is timed once per forward (per layer for the layer sections).
import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { GpuTimer } from '../../../src/gpu/timing.js';
import { PROFILE_SECTIONS } from '../../../src/model/blocks/gpu.js';
import { profilePasses, profileSections } from '../../../src/model/gpu/profile.js';
import { createGpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { GREEDY } from '../../../src/model/runner.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';

describe('decode profile', () => {
  it('splits a forward into timed sections without changing its dispatches or ids', async () => {
    const ctx = await gpu();
    const { files } = fixtureFiles('qwen3', 'f32', 7);
    const opened = await openModel(memoryModelFiles('qwen3', files));
    const runner = await createGpuRunner(opened, { quant: 'f16', capacity: 64, gpu: ctx });
    const prompt = [5, 17, 99, 3];
    // Greedy ids and dispatches of the prompt and `steps` decode steps; `read` after each forward.
    const decode = async (steps: number, read = async () => {}) => {
      runner.trim(0);
      let next = (await runner.forward({ tokens: prompt }, GREEDY, 'last'))[0]!;
      await read();
      runner.commit(prompt.map((_, i) => i));
      const ids = [next];
      const dispatches: number[] = [];
      for (let i = 0; i < steps; i++) {
        const before = runner.deviceCounts().dispatches;
        next = (await runner.forward({ tokens: [next] }, GREEDY, 'last'))[0]!;
        dispatches.push(runner.deviceCounts().dispatches - before);
        await read();
        runner.commit([0]);
        ids.push(next);
      }
      return { ids, dispatches };
    };
    const plain = await decode(3);

    expect(ctx.features.timestamps).toBe(true); // SwiftShader has them; a GPU run needs them too
    const layers = runner.spec.layers;
    const timer = new GpuTimer(ctx, profilePasses(layers));
    runner.profiler = timer;
    const passes: { label: string; ns: number }[][] = [];
    const profiled = await decode(3, async () => {
      passes.push(await timer.read());
    });
    runner.profiler = undefined;
    timer.destroy();

    expect(profiled).toEqual(plain);
    // The prompt's forward and 3 steps: each forward's sections, in run order.
    const perLayer = ['qkv', 'attention', 'o', 'mlp', 'down'];
    const order = ['embed', ...Array.from({ length: layers }, () => perLayer).flat(), 'head', 'sample'];
    expect(passes).toHaveLength(4);
    for (const forward of passes) expect(forward.map((p) => p.label)).toEqual(order);
    const steps = passes.slice(1).flat();
    for (const p of steps) expect(p.ns).toBeGreaterThanOrEqual(0);
    const sections = profileSections(steps);
    expect(sections.map((s) => s.section)).toEqual([...PROFILE_SECTIONS]);
    expect(sections.reduce((a, s) => a + s.share, 0)).toBeCloseTo(1, 9);
    expect(sections.reduce((a, s) => a + s.ns, 0)).toBe(steps.reduce((a, p) => a + p.ns, 0));
    expect(sections.reduce((a, s) => a + s.ns, 0)).toBeGreaterThan(0);
    runner.dispose();
  });
});
