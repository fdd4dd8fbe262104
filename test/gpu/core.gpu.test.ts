import { describe, expect, it } from 'vitest';
import { GpuStepError } from '../../src/errors.js';
import { GpuTimer } from '../../src/gpu/index.js';
import { saxpy, selftestInputs } from '../../src/kernels/selftest/selftest.js';
import { gpu } from '../helpers/gpu.js';

describe('GPU core in Chromium', () => {
  it('caches pipelines by kernel and variant', async () => {
    const ctx = await gpu();
    const { alpha, a, b } = selftestInputs(8);
    await saxpy(ctx, alpha, a, b);
    const before = ctx.pipelines.compiled;
    await saxpy(ctx, alpha, a, b);
    expect(ctx.pipelines.compiled).toBe(before);
  });

  it('names the kernel and variant when WGSL does not compile', async () => {
    const ctx = await gpu();
    const err = await ctx.pipelines
      .prepare('broken', 'v1', () => ({ code: 'fn main( {' }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GpuStepError);
    expect(String(err)).toMatch(/compile broken:v1/);
  });

  it('times passes with timestamp queries when the adapter has them', async () => {
    const ctx = await gpu();
    const timer = new GpuTimer(ctx);
    const enc = ctx.device.createCommandEncoder();
    enc.beginComputePass(timer.passDescriptor('empty')).end();
    ctx.device.queue.submit([enc.finish()]);
    const times = await timer.read();
    if (ctx.features.timestamps) {
      expect(times.map((t) => t.label)).toEqual(['empty']);
      expect(times[0]!.ns).toBeGreaterThanOrEqual(0);
    } else {
      expect(times).toEqual([]);
    }
    timer.destroy();
  });
});
