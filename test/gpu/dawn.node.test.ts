import { describe, expect, it } from 'vitest';
import { DeviceLostError, GpuStepError } from '../../src/errors.js';
import { createBuffer, createGpuContext, withErrorScope } from '../../src/gpu/index.js';
import { saxpy, selftestInputs } from '../../src/kernels/selftest/selftest.js';
import { gpu } from '../helpers/gpu.js';

describe('WebGPU in Node (Dawn)', () => {
  it('gets an adapter and a device with the adapter limits', async () => {
    const ctx = await gpu();
    expect(ctx.adapter.vendor.length + ctx.adapter.architecture.length).toBeGreaterThan(0);
    expect(ctx.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 << 20);
  });

  it('names the failing step when WGSL does not compile', async () => {
    const ctx = await gpu();
    await expect(ctx.pipelines.prepare('broken', 'v0', () => ({ code: 'fn main( {' }))).rejects.toThrow(
      GpuStepError,
    );
    await expect(ctx.pipelines.prepare('broken', 'v0', () => ({ code: 'fn main( {' }))).rejects.toThrow(
      /compile broken:v0/,
    );
  });

  it('wraps validation errors in an error scope that names the step', async () => {
    const ctx = await gpu();
    const err = await withErrorScope(ctx.device, 'make oversized buffer', () =>
      createBuffer(ctx, ctx.limits.maxBufferSize + 4, 'too-big'),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GpuStepError);
    expect(String(err)).toMatch(/make oversized buffer/);
  });

  it('surfaces device loss as a typed error', async () => {
    const ctx = await createGpuContext();
    ctx.destroy();
    const lost = await ctx.lost;
    expect(lost).toBeInstanceOf(DeviceLostError);
    expect(lost.reason).toBe('destroyed');
    const { alpha, a, b } = selftestInputs(4);
    await expect(saxpy(ctx, alpha, a, b)).rejects.toThrow(DeviceLostError);
  });

  it('can leave optional features off to test fallbacks', async () => {
    const ctx = await gpu({ disable: ['subgroups', 'f16'] });
    expect(ctx.features.subgroups).toBe(false);
    expect(ctx.features.f16).toBe(false);
  });
});
