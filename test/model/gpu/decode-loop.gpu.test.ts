// The GPU-resident decode loop (GpuRunner.decode, used by the engine's plain decoding) against the
// loop it replaces (one forward and one readback per token, driven by the CPU) and against the CPU
// reference: the same ids, and the same KV cache after a request stops mid-pipeline.
import { describe, expect, it } from 'vitest';
import { Engine } from '../../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../../src/engine/types.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import type { GpuCounts } from '../../../src/gpu/counters.js';
import type { ModelFamily } from '../../../src/model/families/index.js';
import { createGpuRunner, type GpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { type ForwardInput, GREEDY, type ModelRunner, type SamplerSpec } from '../../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';

/** Ids as text `<id>`, so that a stop string can name a token; `eos` ends generation. */
function codec(eos: readonly number[] = []): TextCodec {
  return { encode: () => [], decode: (ids) => ids.map((i) => `<${i}>`).join(''), eosIds: eos };
}

/**
 * A GPU runner without `decode`: the engine drives it with today's loop (forward, commit, read
 * the id, repeat), the loop the pipelined one must match.
 */
class ForwardOnly implements ModelRunner {
  constructor(private readonly r: GpuRunner) {}
  get spec() {
    return this.r.spec;
  }
  get capacity() {
    return this.r.capacity;
  }
  get kvLength() {
    return this.r.kvLength;
  }
  forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    return this.r.forward(input, sampler, rows);
  }
  commit(path: readonly number[]): void {
    this.r.commit(path);
  }
  trim(length: number): void {
    this.r.trim(length);
  }
  deviceCounts(): GpuCounts {
    return this.r.deviceCounts();
  }
  dispose(): void {
    this.r.dispose();
  }
}

async function runners(family: ModelFamily) {
  const { files } = fixtureFiles(family, 'f32', 7);
  const opened = await openModel(memoryModelFiles(family, files));
  const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 96,
  });
  const make = async () => createGpuRunner(opened, { quant: 'f32', capacity: 96, gpu: await gpu() });
  return { ref, piped: await make(), stepped: new ForwardOnly(await make()) };
}

async function generate(engine: Engine, prompt: readonly number[], o: GenerateOptions) {
  const ids: number[] = [];
  let finish: string | undefined;
  for await (const c of engine.generate(prompt, o)) {
    ids.push(...c.ids);
    finish = c.finishReason ?? finish;
  }
  return { ids, finish };
}

const PROMPT = [5, 17, 99, 3, 250, 11, 42, 8];

describe.each(['llama', 'qwen3'] as const)('GPU-resident decode loop, %s', (family) => {
  it('greedy and seeded ids equal the forward loop and the CPU reference', async () => {
    const { ref, piped, stepped } = await runners(family);
    const engines = [ref, piped, stepped].map((runner) => new Engine({ id: 'x', runner, codec: codec() }));
    const [onRef, onPiped, onStepped] = engines as [Engine, Engine, Engine];
    expect(piped.decode).toBeTypeOf('function');
    expect((stepped as ModelRunner).decode).toBeUndefined();
    for (const o of [
      { maxTokens: 24 },
      { maxTokens: 20, temperature: 1, seed: 3 },
      { maxTokens: 20, temperature: 0.8, topK: 5, topP: 0.9, seed: 11 },
    ] satisfies GenerateOptions[]) {
      const want = (await generate(onRef, PROMPT, o)).ids;
      expect(want).toHaveLength(o.maxTokens);
      expect((await generate(onStepped, PROMPT, o)).ids).toEqual(want);
      expect((await generate(onPiped, PROMPT, o)).ids).toEqual(want);
      expect(piped.kvLength).toBe(stepped.kvLength);
      expect(piped.kvLength).toBe(ref.kvLength);
    }
    // Plain decoding on the pipelined runner: one 4-byte readback per step.
    const d = onPiped.lastStats!.decode_counts!;
    expect(d.readbacks).toBe(d.passes);
    expect(d.readback_bytes).toBe(4 * d.passes);
    for (const e of engines) await e.unload();
  });

  it('a stop mid-pipeline leaves the cache as the forward loop does', async () => {
    const { ref, piped, stepped } = await runners(family);
    const greedy = (
      await generate(new Engine({ id: 'ref', runner: ref, codec: codec() }), PROMPT, { maxTokens: 16 })
    ).ids;
    // A token first sampled a few steps in, so that the pipeline has run ahead when it comes.
    const at = greedy.findIndex((t, i) => i >= 3 && !greedy.slice(0, i).includes(t));
    expect(at).toBeGreaterThanOrEqual(3);
    const stop = greedy[at]!;
    const cases: { name: string; eos: number[]; o: GenerateOptions; ids: number[]; finish: string }[] = [
      { name: 'eos', eos: [stop], o: { maxTokens: 16 }, ids: greedy.slice(0, at), finish: 'stop' },
      {
        name: 'stop string',
        eos: [],
        o: { maxTokens: 16, stop: `<${stop}>` },
        ids: greedy.slice(0, at + 1),
        finish: 'stop',
      },
      { name: 'max tokens', eos: [], o: { maxTokens: at }, ids: greedy.slice(0, at), finish: 'length' },
    ];
    for (const c of cases) {
      const kv: number[] = [];
      const next: number[][] = [];
      for (const runner of [piped, stepped]) {
        const engine = new Engine({ id: c.name, runner, codec: codec(c.eos) });
        const got = await generate(engine, PROMPT, c.o);
        expect(got, `${c.name}`).toEqual({ ids: c.ids, finish: c.finish });
        kv.push(runner.kvLength);
        // The next request extends the conversation: it reuses every cached row and must continue
        // exactly as the reference does from the same context.
        const context = [...PROMPT, ...got.ids, 7];
        next.push((await generate(engine, context, { maxTokens: 6 })).ids);
        expect(engine.lastStats!.cached_prompt_tokens, c.name).toBe(kv.at(-1));
      }
      const want = await generate(
        new Engine({ id: 'ref', runner: ref, codec: codec() }),
        [...PROMPT, ...c.ids, 7],
        { maxTokens: 6 },
      );
      expect(kv[0], c.name).toBe(kv[1]);
      expect(next[0], c.name).toEqual(want.ids);
      expect(next[1], c.name).toEqual(want.ids);
    }
    // Breaking out of the stream after a few chunks closes the session the same way.
    const kv: number[] = [];
    for (const runner of [piped, stepped]) {
      const engine = new Engine({ id: 'break', runner, codec: codec() });
      let chunks = 0;
      for await (const _ of engine.generate(PROMPT, { maxTokens: 16 })) if (++chunks === 4) break;
      kv.push(runner.kvLength);
      expect((await generate(engine, [...PROMPT, ...greedy.slice(0, 4)], { maxTokens: 4 })).ids).toEqual(
        greedy.slice(4, 8),
      );
    }
    expect(kv[0]).toBe(kv[1]);
    piped.dispose();
    stepped.dispose();
  });
});

describe('GpuRunner.decode', () => {
  it('runs like forward + commit, reads ids one step behind, and guards the runner while open', async () => {
    const { piped: dev, stepped } = await runners('llama');
    const prompt = [9, 8, 7, 6, 5];
    const first = (await dev.forward({ tokens: prompt }, GREEDY, 'last'))[0]!;
    dev.commit(prompt.map((_, i) => i));
    let t = (await stepped.forward({ tokens: prompt }, GREEDY, 'last'))[0]!;
    stepped.commit(prompt.map((_, i) => i));
    const want: number[] = [];
    for (let i = 0; i < 6; i++) {
      t = (await stepped.forward({ tokens: [t] }, GREEDY, 'last'))[0]!;
      stepped.commit([0]);
      want.push(t);
    }
    const session = dev.decode(first, GREEDY, 6);
    expect(() => dev.trim(0)).toThrow(/decode session is open/);
    await expect(dev.forward({ tokens: [1] }, GREEDY, 'last')).rejects.toThrow(/decode session is open/);
    expect(() => dev.decode(first, GREEDY, 1)).toThrow(/already open|decode session is open/);
    const got: number[] = [];
    for (let i = 0; i < 6; i++) {
      got.push(await session.next());
      expect(dev.kvLength).toBe(prompt.length + i + 1);
      // Steady state: one step's dispatches, its one input write (attention reads the context base
      // from the slots it holds), one 4-byte readback, one submission.
      if (i >= 1 && i < 5)
        expect(dev.lastForward).toMatchObject({ writes: 1, readbacks: 1, readbackBytes: 4, submits: 1 });
    }
    // The last step had no successor to queue.
    expect(dev.lastForward).toMatchObject({ writes: 0, dispatches: 0, readbacks: 1, submits: 0 });
    expect(got).toEqual(want);
    await expect(session.next()).rejects.toThrow(/all 6 steps were read/);
    session.close();
    session.close();
    expect(dev.kvLength).toBe(stepped.kvLength);
    expect(() => dev.decode(first, GREEDY, 200)).toThrow(/exceed the KV cache of 96/);
    dev.dispose();
    stepped.dispose();
  });
});
