// The f16 KV cache option through the CPU reference (ReferenceRunner kvFormat), createEngine's
// `kvCache` and the CLI's --kv-cache flag. The GPU side: test/model/gpu/kv-f16.gpu.test.ts.
import { describe, expect, it } from 'vitest';
import { parseGenerateArgs } from '../../src/cli/main.js';
import { createEngine, defaultKvCache } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { f16BitsToF32, f32ToF16Bits } from '../../src/gpu/half.js';
import type { KvFormat } from '../../src/kernels/kv/kv.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { fixtureFiles } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = [5, 17, 99, 3, 250, 11];
const files = () => memoryModelFiles('qwen2', fixtureFiles('qwen2', 'f32', 7).files);

async function reference(kvFormat: KvFormat): Promise<ReferenceRunner> {
  const opened = await openModel(files());
  return new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 64,
    kvFormat,
  });
}

describe('f16 KV cache option', () => {
  it('the reference stores halves (nearest even) in its cache, and only then', async () => {
    const half = (x: number) => f16BitsToF32(f32ToF16Bits(x));
    for (const format of ['f16', 'f32'] as const) {
      const model = await reference(format);
      greedy(model, PROMPT, 4);
      const row = model.cache.rowWidths[0]!;
      const stored = [...model.cache.keys, ...model.cache.values].flatMap((c) =>
        Array.from(c.subarray(0, model.cache.length * row)),
      );
      const notHalves = stored.filter((x) => half(x) !== x).length;
      if (format === 'f16') expect(notHalves).toBe(0);
      else expect(notHalves).toBeGreaterThan(stored.length / 2);
    }
  });

  it("createEngine's kvCache reaches the CPU reference: its cache holds halves, greedy ids are the f16 reference's", async () => {
    const want = greedy(await reference('f16'), PROMPT, 8);
    const engine = await createEngine({
      model: files(),
      device: 'cpu',
      quant: 'f32',
      kvCache: 'f16',
      contextLength: 64,
    });
    const got: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 8 })) got.push(...c.ids);
    expect(got.length).toBeGreaterThan(0);
    expect(got).toEqual(want.slice(0, got.length));
    // Greedy ids rarely feel the rounding, so look at the cache the engine's runner filled.
    // biome-ignore lint/complexity/useLiteralKeys: `model` is private; a test may look inside.
    const runner = engine['model'].runner as ReferenceRunner;
    const cache = runner.cache;
    const keys = cache.keys[0]!.subarray(0, cache.length * cache.rowWidths[0]!);
    expect(keys.some((x) => x !== 0)).toBe(true);
    expect(keys.every((x) => f16BitsToF32(f32ToF16Bits(x)) === x)).toBe(true);
    await engine.unload();
  });

  it('rejects an unknown kvCache with a typed error naming the option and value', async () => {
    const err = await createEngine({
      model: files(),
      device: 'cpu',
      kvCache: 'f8' as KvFormat,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(String(err)).toMatch(/kvCache.*"f8"/);
  });

  it('defaults to f16 on a GPU, f32 on a software adapter and off the GPU', () => {
    const adapter = { vendor: 'v', architecture: 'a', device: 'd', description: '' };
    expect(defaultKvCache({ adapter: { ...adapter, software: false } })).toBe('f16');
    expect(defaultKvCache({ adapter: { ...adapter, software: true } })).toBe('f32');
    expect(defaultKvCache(undefined)).toBe('f32');
  });

  it('--kv-cache leaves the default to the engine, takes f32, f16, int8 or int4, and rejects anything else', () => {
    const base = ['--model', 'm', '--prompt', 'x'];
    expect(parseGenerateArgs(base).kvCache).toBeUndefined();
    for (const f of ['f32', 'f16', 'int8', 'int4'])
      expect(parseGenerateArgs([...base, '--kv-cache', f]).kvCache).toBe(f);
    expect(() => parseGenerateArgs([...base, '--kv-cache', 'int2'])).toThrow(/--kv-cache: "int2"/);
  });

  it("createEngine's int4 cache reaches the CPU reference (keys rotated unless kvRotate is false); the greedy ids are the int4 reference's", async () => {
    for (const kvRotate of [true, false]) {
      const opened = await openModel(files());
      const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
        capacity: 64,
        kvFormat: 'int4',
        kvRotate,
      });
      const want = greedy(ref, PROMPT, 8);
      const engine = await createEngine({
        model: files(),
        device: 'cpu',
        quant: 'f32',
        kvCache: 'int4',
        kvRotate,
        contextLength: 64,
      });
      const got: number[] = [];
      for await (const c of engine.generate(PROMPT, { maxTokens: 8 })) got.push(...c.ids);
      expect(got).toEqual(want.slice(0, got.length));
      // Each head of a cached row holds at most 15 distinct values (q · scale, |q| ≤ 7) when the
      // keys are plain; rotated keys are turned back, so they do not.
      // biome-ignore lint/complexity/useLiteralKeys: `model` is private; a test may look inside.
      const runner = engine['model'].runner as ReferenceRunner;
      const head = runner.cache.values[0]!.subarray(0, opened.spec.headDim);
      expect(new Set(head).size).toBeLessThanOrEqual(15);
      await engine.unload();
    }
    const err = await createEngine({ model: files(), device: 'cpu', kvRotate: 'yes' as never }).catch(
      (e: unknown) => e,
    );
    expect(String(err)).toMatch(/kvRotate must be true or false, got "yes"/);
  });
});
