import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import { DeviceLostError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuContext, type GpuContext } from '../../src/gpu/index.js';
import { fixtureFiles } from '../fixtures/write.js';

async function engineOn(ctx: GpuContext): Promise<Engine> {
  const { files } = fixtureFiles('qwen3', 'f32', 2);
  return createEngine({ model: memoryModelFiles('qwen3', files), quant: 'f32', contextLength: 64, gpu: ctx });
}

async function drain(engine: Engine, prompt: number[], maxTokens: number): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, { maxTokens })) out.push(...c.ids);
  return out;
}

describe('engine resources on WebGPU', () => {
  it('steady-state decode creates no buffers, bind groups or pipelines; 200 requests leave memory as it was', async () => {
    const ctx = await createGpuContext();
    const engine = await engineOn(ctx);
    await drain(engine, [3, 4, 5], 4); // warm-up: first use of every kernel instance
    await drain(engine, [9, 4, 5], 4);
    const counts = { buffers: 0, destroyed: 0, bindGroups: 0 };
    const device = ctx.device;
    const createBuffer = device.createBuffer.bind(device);
    device.createBuffer = (d) => {
      counts.buffers++;
      const b = createBuffer(d);
      const destroy = b.destroy.bind(b);
      b.destroy = () => {
        counts.destroyed++;
        destroy();
      };
      return b;
    };
    const createBindGroup = device.createBindGroup.bind(device);
    device.createBindGroup = (d) => {
      counts.bindGroups++;
      return createBindGroup(d);
    };
    const pipelines = ctx.pipelines.compiled;
    for (let i = 0; i < 200; i++) await drain(engine, [3 + (i % 7), 4, 5], 2);
    expect(counts).toEqual({ buffers: 0, destroyed: 0, bindGroups: 0 });
    expect(ctx.pipelines.compiled).toBe(pipelines);
    await engine.unload();
    ctx.destroy();
  });

  it('device loss ends a running request with DeviceLostError; a new engine works afterwards', async () => {
    const ctx = await createGpuContext();
    const engine = await engineOn(ctx);
    let chunks = 0;
    const err = await (async () => {
      for await (const _ of engine.generate([3, 4, 5], { maxTokens: 40 })) {
        if (++chunks === 3) ctx.destroy();
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeviceLostError);
    expect(chunks).toBe(3);
    const fresh = await engineOn(await createGpuContext());
    expect(await drain(fresh, [3, 4, 5], 4)).toHaveLength(4);
    await fresh.unload();
  });
});
