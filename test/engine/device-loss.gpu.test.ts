// Recovery from a lost GPU device (createEngine, Engine.decode): the device is destroyed mid-stream,
// mid-speculation (a draft tree in flight on the device) and mid-load, and the streamed text is an
// uninterrupted run's; two losses in a row end the request with DeviceLostError, and the requests
// after it succeed. Runs in Chromium on SwiftShader (serial forms) and on lavapipe (GPU forms).
// Each new device compiles every pipeline again: that is most of what these tests cost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CreateEngineOptions, createEngine, type LoadProgress } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, GenerationChunk } from '../../src/engine/types.js';
import { DeviceLostError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuContext, type GpuContext } from '../../src/gpu/index.js';
import { fixtureFiles } from '../fixtures/write.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

const PROMPT = [5, 17, 99, 3, 250, 17, 99, 3];
const GREEDY: GenerateOptions = { maxTokens: 12, drafter: 'none' };
const SEEDED: GenerateOptions = { maxTokens: 12, drafter: 'none', temperature: 1, seed: 3 };

/**
 * The tiny Qwen3 fixture at f32, in this project's kernel forms; `speculate` adds the fixture as
 * its own draft model (the target's pipelines serve it: a new device compiles only the
 * speculative step's own beside them).
 */
function options(extra: Partial<CreateEngineOptions> = {}, speculate = false): CreateEngineOptions {
  const { files } = fixtureFiles('qwen3', 'f32', 5);
  const kernels = gpuHost().kernels;
  return {
    model: memoryModelFiles('qwen3', files),
    quant: 'f32',
    contextLength: 64,
    ...(speculate ? { draft: { model: memoryModelFiles('qwen3', files), quant: 'f32' as const } } : {}),
    ...(extra.gpu || !kernels ? {} : { kernels }),
    ...extra,
  };
}

/** A new context on this project's adapter, in its kernel forms. */
async function freshContext(): Promise<GpuContext> {
  await gpu(); // points Dawn at the project's driver and checks the adapter
  const kernels = gpuHost().kernels;
  return createGpuContext(kernels ? { kernels } : {});
}

/** The ids a request streams; `onChunk` sees each chunk with its index (from 1). */
async function ids(
  engine: Engine,
  o: GenerateOptions,
  onChunk: (n: number, c: GenerationChunk) => void = () => {},
): Promise<number[]> {
  const out: number[] = [];
  let n = 0;
  for await (const c of engine.generate(PROMPT, o)) {
    out.push(...c.ids);
    onChunk(++n, c);
  }
  return out;
}

describe('recovery from a lost device', () => {
  // An engine on devices of its own, and what it streams uninterrupted, greedy and seeded.
  let engine: Engine;
  const want = { greedy: [] as number[], seeded: [] as number[] };

  beforeAll(async () => {
    await gpu(); // the project's driver
    engine = await createEngine(options());
    want.greedy = await ids(engine, GREEDY);
    want.seeded = await ids(engine, SEEDED);
    expect(want.greedy).toHaveLength(12);
    expect(want.seeded).not.toEqual(want.greedy);
    expect(engine.lastStats!.device_losses).toBe(0);
  });
  afterAll(() => engine.unload());

  it("mid-stream, on the engine's own device: the request runs on from its tokens on a new one", async () => {
    const lostOn = engine.gpu!;
    const got = await ids(engine, GREEDY, (n) => {
      if (n === 4) lostOn.destroy();
    });
    const stats = engine.lastStats!;
    expect(got).toEqual(want.greedy);
    expect(stats.device_losses).toBe(1);
    expect(stats.recovery_ms).toBeGreaterThan(0);
    expect(stats.completion_tokens).toBe(12);
    expect(lostOn.lostError).toBeInstanceOf(DeviceLostError);
    expect(engine.gpu).not.toBe(lostOn);
    console.log(`[device-loss] mid-stream recovery: ${stats.recovery_ms.toFixed(0)} ms`);
    // Seeded sampling on the new device gives the seed's text.
    expect(await ids(engine, SEEDED)).toEqual(want.seeded);
    expect(engine.lastStats!.device_losses).toBe(0);
  });

  it('two losses in a row end the request with DeviceLostError; the request queued behind it, and the next, succeed', async () => {
    const lost: GpuContext[] = [];
    const got: number[] = [];
    const first = ids(engine, GREEDY, (n, c) => {
      got.push(...c.ids);
      // A loss, then another just after the recovery.
      if (n === 2 || n === 4) {
        lost.push(engine.gpu!);
        engine.gpu!.destroy();
      }
    }).catch((e: unknown) => e);
    const queued = ids(engine, SEEDED);
    const err = await first;
    expect(err).toBeInstanceOf(DeviceLostError);
    expect(String(err)).toMatch(/lost again \d+ ms after/);
    expect(lost).toHaveLength(2);
    expect(lost[0]).not.toBe(lost[1]);
    expect(got).toEqual(want.greedy.slice(0, got.length));
    // The queued request places the model on a new device and runs whole, and so does the next.
    expect(await queued).toEqual(want.seeded);
    expect(engine.lastStats!.device_losses).toBe(1);
    expect(await ids(engine, GREEDY)).toEqual(want.greedy);
    expect(engine.lastStats!.device_losses).toBe(0);
  });

  it('mid-speculation: a loss while a draft tree is verified on the device; an app context is replaced through replaceGpu', async () => {
    const ctx = await freshContext();
    const replaced: GpuContext[] = [];
    const spec = await createEngine(
      options(
        {
          gpu: ctx,
          replaceGpu: async (lost) => {
            expect(lost).toBeInstanceOf(DeviceLostError);
            replaced.push(await freshContext());
            return replaced.at(-1)!;
          },
        },
        true,
      ),
    );
    // After the second chunk, the device is destroyed right after the next submission: the
    // speculative step's own (drafting, verification and commit), whose tree is then in flight.
    let armed = false;
    const submit = ctx.device.queue.submit.bind(ctx.device.queue);
    ctx.device.queue.submit = (commands) => {
      submit(commands);
      if (armed) {
        armed = false;
        ctx.destroy();
      }
    };
    let trees = 0;
    const got = await ids(spec, { maxTokens: 12, drafter: 'draft', treeBudget: 2 }, (n, c) => {
      if (c.tree) trees++;
      if (n === 2) armed = true;
    });
    expect(got).toEqual(want.greedy);
    expect(trees).toBeGreaterThan(1);
    expect(ctx.lostError).toBeInstanceOf(DeviceLostError);
    expect(replaced).toHaveLength(1);
    expect(spec.gpu).toBe(replaced[0]);
    expect(spec.lastStats!.device_losses).toBe(1);
    expect(spec.lastStats!.tokens_per_pass).toBeGreaterThan(1);
    await spec.unload();
    for (const c of [ctx, ...replaced]) c.destroy();
  });

  it('mid-load: a loss while the weights are placed costs one more try on a new device', async () => {
    const ctx = await freshContext();
    const phases: string[] = [];
    const onProgress = (e: LoadProgress) => {
      phases.push(e.phase);
      if (e.phase === 'weights' && e.done === 2) ctx.destroy();
    };
    const loaded = await createEngine(options({ gpu: ctx, replaceGpu: freshContext, onProgress }));
    expect(ctx.lostError).toBeInstanceOf(DeviceLostError);
    expect(loaded.gpu).not.toBe(ctx);
    // Placed twice: the second load reports its steps again, and ends ready once.
    expect(phases.filter((p) => p === 'open')).toHaveLength(2);
    expect(phases.filter((p) => p === 'ready')).toHaveLength(1);
    expect(await ids(loaded, GREEDY)).toEqual(want.greedy);
    expect(loaded.lastStats!.device_losses).toBe(1);
    expect(await ids(loaded, SEEDED)).toEqual(want.seeded);
    expect(loaded.lastStats!.device_losses).toBe(0);
    await loaded.unload();
    loaded.gpu?.destroy();
  });
});
