import { describe, expect, it } from 'vitest';
import { convertModel, exportModelGguf } from '../../src/convert/convert.js';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { qwen35FixtureFiles, tinyQwen35TextConfig } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// Qwen3.5 (Gated DeltaNet layers beside a gated full-attention layer) on the GPU, from a tiny
// checkpoint laid out as the published ones (vision-language wrapper; see qwen35FixtureFiles).
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const prompt = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77];

async function open(quant: Quant = 'f32') {
  const { files } = qwen35FixtureFiles(5);
  const opened = await openModel(memoryModelFiles('qwen35', files));
  const dev = await createGpuRunner(opened, { quant, capacity: 128, gpu: await gpu() });
  return { opened, dev };
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'qwen35', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

describe('Qwen3.5 on the GPU', () => {
  // The GEMM is the GPU forms' (the lavapipe project); the serial forms keep their decode kernels.
  it.skipIf(gpuHost().kernels !== 'gpu')(
    'a 40-token prompt in one chunk (the prefill GEMM through its DeltaNet layers) gives the reference greedy ids',
    async () => {
      const { opened, dev } = await open();
      const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
        capacity: 128,
      });
      const long = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 300);
      expect(await greedyIds(dev, long, 8)).toEqual(await greedyIds(ref, long, 8));
      dev.dispose();
    },
  );

  it('greedy 32 tokens at f32 equal the reference, across prefill chunks, and the next request reuses the state', async () => {
    const { opened, dev } = await open();
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 128,
    });
    const want = await greedyIds(ref, prompt, 32);
    expect(await greedyIds(dev, prompt, 32, 4)).toEqual(want);
    expect(await greedyIds(dev, prompt, 32)).toEqual(want);
    // A request that extends the cached sequence keeps it all (state and KV rows) ...
    const longer = [...prompt, ...want.slice(0, 31), 7];
    const reused = await greedyIds(dev, longer, 8);
    expect(reused).toEqual(await greedyIds(ref, longer, 8));
    // ... one that shares part of it starts again from zeros.
    expect(await greedyIds(dev, [5, 17, 42], 8)).toEqual(await greedyIds(ref, [5, 17, 42], 8));
    dev.dispose();
  });

  it('a decode step is 6 dispatches per linear-attention layer (mixer and MLP), one write, one 4-byte readback', async () => {
    const { opened, dev } = await open();
    const spec = opened.spec;
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    dev.commit(prompt.map((_, i) => i));
    const session = dev.decode(9, GREEDY, 3);
    await session.next();
    await session.next();
    const step = dev.lastForward;
    session.close();
    const linear = spec.layerKinds!.filter((k) => k === 'deltanet').length;
    const attention = spec.layers - linear;
    // Per linear layer: the fused projection, the conv, the delta rule, out_proj; gate|up, down.
    // Per attention layer: q|k|v|gate, QkvRope, attention (and its merge on the GPU forms), the
    // gate, o; gate|up, down. Per token: embedding, LM head and the sampler's passes.
    const attentionDispatches = dev.device.kernels === 'serial' ? 7 : 8;
    const perToken = step.dispatches - linear * 6 - attention * attentionDispatches;
    expect(perToken).toBeGreaterThan(0);
    expect(perToken).toBeLessThanOrEqual(4);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    dev.dispose();
  });

  // Every format in the GPU forms (lavapipe); int4 alone in the serial forms, whose per-format
  // matmuls forward.test.ts runs for every family (compiling each costs SwiftShader seconds).
  const formats =
    gpuHost().kernels === 'gpu' ? (['f16', 'int8', 'int4', 'int2'] as const) : (['int4'] as const);
  it.each(formats)(
    '%s: logits and greedy ids equal the reference with the same rounded weights',
    async (quant) => {
      const { opened, dev } = await open(quant);
      const tensors = roundedThrough(await readAllF32(opened.weights), formatOf(quant));
      const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 128 });
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), ref.logits({ tokens: prompt }))).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      for (const r of [ref, dev]) r.trim(0);
      const run = await greedyIds(dev, prompt, 12, 4);
      expect(run).toEqual(await greedyIds(ref, prompt, 12));
      // How far the format moves the model from f32, on f32's own 32 greedy ids (printed, not held:
      // on random weights the logits are nearly flat, and a free run parts from f32's for good at
      // its first different pick).
      const f32 = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
        capacity: 128,
      });
      const base = await greedyIds(f32, prompt, 32);
      dev.trim(0);
      const picks = await dev.forward({ tokens: [...prompt, ...base].slice(0, -1) }, GREEDY, 'all');
      const forced = base.filter((id, i) => picks[prompt.length - 1 + i] === id).length;
      const free = run.filter((id, i) => id === base[i]).length;
      console.log(
        `[qwen35] ${quant} vs f32: ${forced} of 32 picks equal on f32's sequence; free run ${free} of 12`,
      );
      dev.dispose();
    },
  );

  it('a folder converted to int4 loads as stored and generates what the source does at int4', async () => {
    const { files } = qwen35FixtureFiles(5);
    const out = new Map<string, Uint8Array>();
    const chunks: Uint8Array[] = [];
    await convertModel(
      memoryModelFiles('qwen35', files),
      { quant: 'int4' },
      {
        file: async (name, bytes) => {
          out.set(name, bytes);
        },
        weights: async (chunk) => {
          chunks.push(chunk.slice());
        },
      },
    );
    const weights = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) {
      weights.set(c, at);
      at += c.length;
    }
    out.set(WEFT_WEIGHTS, weights);
    const converted = await openModel(memoryModelFiles('qwen35-int4', out));
    expect(converted.packed?.format).toBe('int4');
    const dev = await createGpuRunner(converted, { quant: 'int4', capacity: 128, gpu: await gpu() });
    const source = await open('int4');
    expect(await greedyIds(dev, prompt, 12)).toEqual(await greedyIds(source.dev, prompt, 12));
    dev.dispose();
    source.dev.dispose();
  });

  // The GPU forms (lavapipe) only: the deltanet kernels have one form, and 1,024 steps cost
  // SwiftShader minutes.
  it.skipIf(gpuHost().kernels !== 'gpu')(
    'a 1,024-token prompt prefilled in chunks of 64 equals it run token by token (the same logits, bit for bit)',
    async () => {
      const { files } = qwen35FixtureFiles(5, { ...tinyQwen35TextConfig(), max_position_embeddings: 2048 });
      const opened = await openModel(memoryModelFiles('qwen35', files));
      const runner = async () => createGpuRunner(opened, { quant: 'f32', capacity: 1100, gpu: await gpu() });
      let s = 7;
      const long = Array.from({ length: 1024 }, () => {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        return s % opened.spec.vocabSize;
      });
      const chunked = await runner();
      for (let at = 0; at < long.length; at += 64) {
        const part = long.slice(at, at + 64);
        await chunked.forward({ tokens: part }, GREEDY, 'last');
        chunked.commit(part.map((_, i) => i));
      }
      const a = await chunked.lastLogits();
      const stepped = await runner();
      for (const t of long) {
        await stepped.forward({ tokens: [t] }, GREEDY, 'last');
        stepped.commit([0]);
      }
      const b = await stepped.lastLogits();
      expect(Array.from(new Uint32Array(a.buffer))).toEqual(Array.from(new Uint32Array(b.buffer)));
      chunked.dispose();
      stepped.dispose();
    },
  );

  it.each(['F32', 'Q8_0'] as const)(
    'a qwen35 GGUF (%s, as weft export-gguf writes it) runs on the GPU as the reference does',
    async (type) => {
      const bytes = await exportModelGguf(memoryModelFiles('qwen35', qwen35FixtureFiles(5).files), type);
      const opened = await openModel(memoryModelFiles('q35.gguf', new Map([['q35.gguf', bytes]])));
      expect(opened.spec.family).toBe('qwen3_5');
      const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
        capacity: 128,
      });
      const dev = await createGpuRunner(opened, {
        quant: type === 'F32' ? 'f32' : 'int8',
        capacity: 128,
        gpu: await gpu(),
      });
      await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), ref.logits({ tokens: prompt }))).toBeLessThan(1e-4);
      dev.trim(0);
      expect(await greedyIds(dev, prompt, 12)).toEqual(await greedyIds(ref, prompt, 12));
      dev.dispose();
    },
  );

  it('scores a draft tree like the reference (each row through its ancestors), commits a path, rolls back only to 0', async () => {
    const { opened, dev } = await open();
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 128,
    });
    const p = prompt.slice(0, 6);
    const tree = { tokens: [40, 41, 42, 43, 44, 45], parents: [-1, 0, 1, 0, 3, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: p }, GREEDY, 'last');
      r.commit(p.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), ref.logits(tree))).toBeLessThan(1e-4);
    expect(Array.from(got)).toEqual(Array.from(want));
    // Accept 0 → 3 → 4: the state follows that path only; then both decode on alike.
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0, 3, 4]);
    expect(dev.kvLength).toBe(9);
    const next = [...p, 40, 43, 44];
    for (const r of [ref, dev] as ModelRunner[]) r.trim(next.length);
    expect(await greedyIds(dev, next, 8)).toEqual(await greedyIds(ref, next, 8));
    // A chain's prefix is committed by running it again; partial rollback stays refused.
    await dev.forward({ tokens: [1, 2, 3] }, GREEDY, 'all');
    dev.commit([0, 1]);
    expect(() => dev.trim(1)).toThrow(/cannot roll back to 1 of/);
    dev.trim(0);
    expect(dev.kvLength).toBe(0);
    dev.dispose();
  });

  it('speculative decoding equals plain decoding, greedy and seeded, with n-grams and int4 self-drafts', async () => {
    const { files } = qwen35FixtureFiles(5);
    const engine = await createEngine({
      model: memoryModelFiles('qwen35', files),
      quant: 'f32',
      contextLength: 128,
      draft: { self: 'int4' },
      gpu: await gpu(),
    });
    const p = [5, 17, 99, 3, 250, 17, 99, 3];
    // No state per tree node: a node keeps its projection rows of each linear layer (for a commit).
    const { dev } = await open();
    const la = dev.recurrentMemory!;
    const s = dev.spec.deltaNet!;
    const P = 2 * s.keyHeads * s.keyDim + 2 * s.valueHeads * s.valueDim + 2 * s.valueHeads;
    expect(la.bytesPerTreeNode).toBe(3 * P * 4);
    expect(la.stateBytes).toBe(
      3 *
        2 *
        4 *
        ((s.convKernel - 1) * (P - s.valueHeads * s.valueDim - 2 * s.valueHeads) +
          s.valueHeads * s.keyDim * s.valueDim),
    );
    console.log(
      `[qwen35] linear layers hold ${la.stateBytes} bytes of state; ${la.bytesPerTreeNode} bytes per tree node`,
    );
    dev.dispose();
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      let passes = 0;
      for await (const c of engine.generate(p, o)) {
        out.push(...c.ids);
        if (c.tree) passes++;
      }
      return { out, passes };
    };
    // The int4 self-draft's drafts are accepted (measured 1.67 tokens per decode pass greedy, 2.0 at
    // T = 1; all rejected would give exactly 1). The n-grams are held to equality only: this
    // fixture's text does not repeat the prompt (1.00).
    const plain = (await run({ maxTokens: 16, drafter: 'none' })).out;
    for (const drafter of ['ngram', 'draft'] as const) {
      const spec = await run({ maxTokens: 16, drafter, treeBudget: 8 });
      expect(spec.out, drafter).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[qwen35] ${drafter}: ${(plain.length / Math.max(1, s.target_passes)).toFixed(2)} tokens per target pass, ${s.tokens_per_pass.toFixed(2)} per decode pass`,
      );
      if (drafter === 'draft') expect(s.tokens_per_pass).toBeGreaterThan(1.3);
    }
    const seeded = { maxTokens: 12, temperature: 1, seed: 3 };
    const sampled = (await run({ ...seeded, drafter: 'none' })).out;
    for (const drafter of ['ngram', 'draft'] as const)
      expect((await run({ ...seeded, drafter, treeBudget: 6 })).out, drafter).toEqual(sampled);
    console.log(
      `[qwen35] draft, T = 1: ${engine.lastStats!.tokens_per_pass.toFixed(2)} tokens per decode pass`,
    );
    expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1.3);
    await engine.unload();
  });

  it('its own MTP layer drafts for the GPU target (the head on the CPU): plain decoding’s ids, greedy and seeded', async () => {
    const { files } = qwen35FixtureFiles(5);
    const engine = await createEngine({
      model: memoryModelFiles('qwen35', files),
      quant: 'f32',
      contextLength: 128,
      draft: 'mtp',
      gpu: await gpu(),
    });
    const p = [5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    expect(await run({ maxTokens: 12, drafter: 'draft', treeBudget: 6 })).toEqual(
      await run({ maxTokens: 12, drafter: 'none' }),
    );
    const seeded = { maxTokens: 10, temperature: 1, seed: 2 };
    expect(await run({ ...seeded, drafter: 'draft', treeBudget: 6 })).toEqual(
      await run({ ...seeded, drafter: 'none' }),
    );
    await engine.unload();
  });
});
