// createEngine on a real device: a model over the adapter's limits (faked smaller here) is refused
// with DeviceLimitError before any buffer is created; the KV cache is allocated for the context
// asked; a completion that reaches the context ends with 'length' on the CPU reference's ids.
import { describe, expect, it } from 'vitest';
import { modelFootprint } from '../../src/engine/limits.js';
import {
  createEngine,
  DeviceLimitError,
  type Engine,
  type GpuContext,
  memoryModelFiles,
} from '../../src/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { fixtureFiles } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';
import { bufferLabelled, withCreatedBuffers } from '../helpers/gpu-buffers.js';
import { greedy } from '../helpers/reference.js';

type BufferLimits = Partial<Record<'maxBufferSize' | 'maxStorageBufferBindingSize', number>>;

/** `ctx` as an adapter with smaller buffer limits would report it. */
function limited(ctx: GpuContext, over: BufferLimits): GpuContext {
  const limits = new Proxy(ctx.limits, {
    get: (target, key) => (key in over ? Reflect.get(over, key) : Reflect.get(target, key)),
  });
  return new Proxy(ctx, { get: (target, key) => (key === 'limits' ? limits : Reflect.get(target, key)) });
}

const { files, spec } = fixtureFiles('qwen3', 'f32', 2);
const model = () => memoryModelFiles('qwen3', files);
const CONTEXT = 64;

async function drain(engine: Engine, prompt: number[], maxTokens: number) {
  const ids: number[] = [];
  let finish: string | undefined;
  for await (const c of engine.generate(prompt, { maxTokens })) {
    ids.push(...c.ids);
    finish = c.finishReason ?? finish;
  }
  return { ids, finish };
}

describe('device limits', () => {
  it('refuses a buffer over maxBufferSize before creating any buffer', async () => {
    const ctx = await gpu();
    // The largest buffer bound whole here is the logits of a forward pass, [64, vocab] f32 (the KV
    // cache of a real model at a long context is another; see test/engine/limits.test.ts).
    const logits = 64 * spec.vocabSize * 4;
    const small = limited(ctx, { maxBufferSize: logits - 4 });
    const { result, buffers } = await withCreatedBuffers(ctx.device, () =>
      createEngine({ model: model(), quant: 'f32', contextLength: CONTEXT, gpu: small }).catch(
        (e: unknown) => e,
      ),
    );
    expect(result).toBeInstanceOf(DeviceLimitError);
    expect(result).toMatchObject({ limit: 'maxBufferSize', needed: logits, available: logits - 4 });
    expect(String(result)).toMatch(/logits \[64, 512\] f32/);
    expect(buffers).toEqual([]);
    // At the adapter's own limits it loads.
    const { result: engine, buffers: made } = await withCreatedBuffers(ctx.device, () =>
      createEngine({ model: model(), quant: 'f32', contextLength: CONTEXT, gpu: limited(ctx, {}) }),
    );
    expect(made.length).toBeGreaterThan(0);
    await engine.unload();
  });

  it('refuses a model over the device memory estimate, and loads it in the format the error names', async () => {
    const ctx = await gpu();
    const kv = { context: CONTEXT, kvFormat: 'f32' } as const;
    const f32 = modelFootprint(spec, 'f32', kv).total;
    const f16 = modelFootprint(spec, 'f16', kv).total;
    const deviceMemory = Math.floor((f32 + f16) / 2);
    const { result, buffers } = await withCreatedBuffers(ctx.device, () =>
      createEngine({ model: model(), quant: 'f32', contextLength: CONTEXT, gpu: ctx, deviceMemory }).catch(
        (e: unknown) => e,
      ),
    );
    expect(buffers).toEqual([]);
    expect(result).toBeInstanceOf(DeviceLimitError);
    if (!(result instanceof DeviceLimitError)) return;
    expect(result).toMatchObject({
      limit: 'device memory',
      needed: f32,
      available: deviceMemory,
      fits: 'f16',
    });
    expect(result.bytesPerFormat.f16).toBe(f16);
    const loaded = await withCreatedBuffers(ctx.device, () =>
      createEngine({
        model: model(),
        quant: result.fits === 'f16' ? 'f16' : 'int8',
        contextLength: CONTEXT,
        gpu: ctx,
        deviceMemory,
      }),
    );
    // The KV cache holds exactly the context asked for.
    const k0 = bufferLabelled(loaded.buffers, 'model.layers.0.k_cache');
    expect(k0.size).toBe(CONTEXT * spec.kvHeads * spec.headDim * 4);
    await loaded.result.unload();
  });

  it('counts the drafter: a target that fits alone is refused beside its self-draft, before any buffer', async () => {
    const ctx = await gpu();
    const kv = { context: CONTEXT, kvFormat: 'f32' } as const;
    const target = modelFootprint(spec, 'f16', kv).total;
    const draft = modelFootprint(spec, 'int4', kv).total;
    const deviceMemory = target + Math.floor(draft / 2);
    const { result, buffers } = await withCreatedBuffers(ctx.device, () =>
      createEngine({
        model: model(),
        quant: 'f16',
        contextLength: CONTEXT,
        gpu: ctx,
        deviceMemory,
        draft: { self: 'int4' },
      }).catch((e: unknown) => e),
    );
    expect(buffers).toEqual([]);
    expect(result).toBeInstanceOf(DeviceLimitError);
    expect(result).toMatchObject({ limit: 'device memory', needed: target + draft, available: deviceMemory });
    expect(String(result)).toMatch(/with its self-draft at int4/);
    // Alone, the target loads at the same estimate.
    const alone = await createEngine({
      model: model(),
      quant: 'f16',
      contextLength: CONTEXT,
      gpu: ctx,
      deviceMemory,
    });
    await alone.unload();
  });

  it("a completion that reaches the context ends with 'length', on the reference's greedy ids", async () => {
    const context = 16;
    const engine = await createEngine({
      model: model(),
      quant: 'f32',
      contextLength: context,
      gpu: await gpu(),
    });
    const prompt = [5, 17, 99, 3, 250];
    const got = await drain(engine, prompt, 1000);
    const opened = await openModel(model());
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: context,
    });
    expect(got).toEqual({ ids: greedy(ref, prompt, context - prompt.length), finish: 'length' });
    await engine.unload();
  });
});
