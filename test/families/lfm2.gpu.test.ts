import { describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { roundedThrough, w8a8Inputs } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant } from '../../src/quant/pack.js';
import { fixtureFiles } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu, gpuHost } from '../helpers/gpu.js';

// LFM2 (gated short-convolution layers beside a full-attention layer with QK layernorms, LFM2's
// names, an MLP width of 104 that the matmul's K blocks do not divide) on the GPU, from the tiny
// checkpoint of tinyConfig('lfm2'): layers conv, conv, attention, conv, a convolution of width 3.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
const prompt = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77];
const CAPACITY = 128;

async function fixture() {
  const { files } = fixtureFiles('lfm2', 'f32', 9);
  return openModel(memoryModelFiles('lfm2', files));
}

async function open(quant: Quant = 'f32') {
  const opened = await fixture();
  const dev = await createGpuRunner(opened, { quant, capacity: CAPACITY, gpu: await gpu() });
  return { opened, dev };
}

/** The reference on the source weights, or on them rounded through `quant`'s format as placed. */
async function reference(opened: Awaited<ReturnType<typeof openModel>>, quant: Quant = 'f32') {
  const f32 = await readAllF32(opened.weights);
  const tensors = quant === 'f32' ? f32 : roundedThrough(f32, formatOf(quant));
  return new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: CAPACITY });
}

async function greedyIds(runner: ModelRunner, p: number[], n: number, prefillChunk = 64): Promise<number[]> {
  const engine = new Engine({ id: 'lfm2', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n, prefillChunk })) out.push(...c.ids);
  return out;
}

describe('LFM2 on the GPU', () => {
  // The GEMM is the GPU forms' (the lavapipe project); the serial forms keep their decode kernels.
  it.skipIf(gpuHost().kernels !== 'gpu')(
    'a 40-token prompt in one chunk (the prefill GEMM through its short-convolution layers) gives the reference greedy ids',
    async () => {
      const { opened, dev } = await open();
      const ref = await reference(opened);
      const long = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 300);
      expect(await greedyIds(dev, long, 8)).toEqual(await greedyIds(ref, long, 8));
      dev.dispose();
    },
  );

  it('greedy 32 tokens at f32 equal the reference, across prefill chunks, and the next request reuses the window', async () => {
    const { opened, dev } = await open();
    expect(opened.spec.layerKinds).toEqual(['shortconv', 'shortconv', 'attention', 'shortconv']);
    const ref = await reference(opened);
    const want = await greedyIds(ref, prompt, 32);
    expect(await greedyIds(dev, prompt, 32, 4)).toEqual(want);
    expect(await greedyIds(dev, prompt, 32)).toEqual(want);
    // A request that extends the cached sequence keeps it all (windows and KV rows) ...
    const longer = [...prompt, ...want.slice(0, 31), 7];
    expect(await greedyIds(dev, longer, 8)).toEqual(await greedyIds(ref, longer, 8));
    // ... one that shares part of it starts again from zeros.
    expect(await greedyIds(dev, [5, 17, 42], 8)).toEqual(await greedyIds(ref, [5, 17, 42], 8));
    dev.dispose();
  });

  it('a decode step is 3 dispatches per conv layer, 4 (GPU forms: 5) per attention layer, 2 per MLP; one write, one 4-byte readback', async () => {
    const { opened, dev } = await open();
    const spec = opened.spec;
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    dev.commit(prompt.map((_, i) => i));
    const session = dev.decode(9, GREEDY, 3);
    await session.next();
    await session.next();
    const step = dev.lastForward;
    session.close();
    const conv = spec.layerKinds!.filter((k) => k === 'shortconv').length;
    const attention = spec.layers - conv;
    // Per conv layer: in_proj (its norm folded in), the gated convolution, out_proj (adding into
    // the stream). Per attention layer: q|k|v, QkvRope, attention (and its merge on the GPU forms), o.
    // Per layer's MLP: gate|up, down. Per token: embedding, LM head and the sampler's passes.
    const attentionDispatches = dev.device.kernels === 'serial' ? 4 : 5;
    const perToken = step.dispatches - conv * 3 - attention * attentionDispatches - spec.layers * 2;
    console.log(
      `[lfm2] decode step: ${step.dispatches} dispatches (${conv} conv, ${attention} attention layers)`,
    );
    expect(perToken).toBeGreaterThan(0);
    expect(perToken).toBeLessThanOrEqual(4);
    expect(step.writes).toBe(1);
    expect(step.readbackBytes).toBe(4);
    // No state per tree node: a node keeps its in_proj rows of each conv layer (for a commit).
    const H = spec.hidden;
    const K = spec.shortConv!.kernel;
    expect(dev.recurrentMemory).toEqual({
      stateBytes: conv * 2 * 4 * (K - 1) * H,
      bytesPerTreeNode: conv * 3 * H * 4,
    });
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
      const ref = await reference(opened, quant);
      const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
      const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
      expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));
      for (const r of [ref, dev]) r.trim(0);
      expect(await greedyIds(dev, prompt, 12, 4)).toEqual(await greedyIds(ref, prompt, 12));
      dev.dispose();
    },
  );

  // The GPU forms only: the Hadamard and W8A8 kernels are compiled for this test alone.
  it.skipIf(gpuHost().kernels !== 'gpu')(
    'int4 with Hadamard rotations, and W8A8, equal the reference on the weights they multiply by (in_proj and out_proj rotated as the hidden width)',
    async () => {
      const opened = await fixture();
      const source = await readAllF32(opened.weights);
      for (const [quant, rotate] of [
        ['int4', 'hadamard'],
        ['w8a8', 'auto'],
      ] as const) {
        const dev = await createGpuRunner(opened, { quant, rotate, capacity: CAPACITY, gpu: await gpu() });
        const ref = new ReferenceRunner(
          opened.spec,
          mapWeights(roundedThrough(source, formatOf(quant), rotate)),
          {
            capacity: CAPACITY,
          },
        );
        if (quant === 'w8a8') ref.linearInput = w8a8Inputs(rotate);
        const want = await ref.forward({ tokens: prompt }, GREEDY, 'all');
        const got = await dev.forward({ tokens: prompt }, GREEDY, 'all');
        expect(relErr(await dev.lastLogits(), await ref.lastLogits()), quant).toBeLessThan(1e-4);
        expect(Array.from(got), quant).toEqual(Array.from(want));
        dev.dispose();
      }
    },
  );

  it('a folder converted to int4 packs every linear (feed_forward.w1/w2/w3, conv.in_proj/out_proj) and generates what the source does at int4', async () => {
    const { files } = fixtureFiles('lfm2', 'f32', 9);
    const out = new Map<string, Uint8Array>();
    const chunks: Uint8Array[] = [];
    await convertModel(
      memoryModelFiles('lfm2', files),
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
    const converted = await openModel(memoryModelFiles('lfm2-int4', out));
    expect(converted.packed?.format).toBe('int4');
    for (const name of [
      'model.layers.0.conv.in_proj.weight',
      'model.layers.0.conv.out_proj.weight',
      'model.layers.2.self_attn.out_proj.weight',
      'model.layers.3.feed_forward.w1.weight',
      'model.layers.3.feed_forward.w2.weight',
      'model.layers.3.feed_forward.w3.weight',
    ])
      expect(converted.weights.storedFormat?.(name), name).toBe('int4');
    const dev = await createGpuRunner(converted, { quant: 'int4', capacity: CAPACITY, gpu: await gpu() });
    const source = await open('int4');
    expect(await greedyIds(dev, prompt, 8)).toEqual(await greedyIds(source.dev, prompt, 8));
    dev.dispose();
    source.dev.dispose();
  });

  it('scores a draft tree like the reference (each row through its ancestors), commits a path, decodes on', async () => {
    const { opened, dev } = await open();
    const ref = await reference(opened);
    const p = prompt.slice(0, 6);
    // Depth first: 0 → {1 → 2 → 3, 4 → 5}, 6 (a second root): windows of two ancestors and fewer.
    const tree = { tokens: [40, 41, 42, 43, 44, 45, 46], parents: [-1, 0, 1, 2, 0, 4, -1] };
    for (const r of [ref, dev] as ModelRunner[]) {
      await r.forward({ tokens: p }, GREEDY, 'last');
      r.commit(p.map((_, i) => i));
    }
    const want = await ref.forward(tree, GREEDY, 'all');
    const got = await dev.forward(tree, GREEDY, 'all');
    expect(relErr(await dev.lastLogits(), ref.logits(tree))).toBeLessThan(1e-4);
    expect(Array.from(got)).toEqual(Array.from(want));
    // Accept 0 → 4 → 5: the windows follow that path only; both go on alike from there (a chain
    // of two, then its prefix committed by running it again, then one more row).
    const logits = async (input: { tokens: number[] }) => {
      const [w, g] = [await ref.forward(input, GREEDY, 'all'), await dev.forward(input, GREEDY, 'all')];
      expect(relErr(await dev.lastLogits(), await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(g)).toEqual(Array.from(w));
    };
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0, 4, 5]);
    expect(dev.kvLength).toBe(9);
    await logits({ tokens: [7, 8] });
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0]);
    await logits({ tokens: [9] });
    for (const r of [ref, dev] as ModelRunner[]) r.commit([0]);
    expect(dev.kvLength).toBe(11);
    // Partial rollback stays refused; back to 0 is allowed.
    expect(() => dev.trim(1)).toThrow(/cannot roll back to 1 of/);
    dev.trim(0);
    expect(dev.kvLength).toBe(0);
    dev.dispose();
  });

  it('speculative decoding equals plain decoding, greedy and seeded, with n-grams and int4 self-drafts', async () => {
    const { files } = fixtureFiles('lfm2', 'f32', 9);
    const engine = await createEngine({
      model: memoryModelFiles('lfm2', files),
      quant: 'f32',
      contextLength: CAPACITY,
      draft: { self: 'int4' },
      gpu: await gpu(),
    });
    const p = [5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: GenerateOptions) => {
      const out: number[] = [];
      for await (const c of engine.generate(p, o)) out.push(...c.ids);
      return out;
    };
    // The int4 self-draft's drafts are accepted (measured 2.0 tokens per decode pass greedy, 5.5 at
    // T = 1; all rejected would give exactly 1). The n-grams are held to equality only: this
    // fixture's text does not repeat the prompt (1.00).
    const plain = await run({ maxTokens: 16, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const) {
      expect(await run({ maxTokens: 16, drafter, treeBudget: 8 }), drafter).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[lfm2] ${drafter}: ${(plain.length / Math.max(1, s.target_passes)).toFixed(2)} tokens per target pass, ${s.tokens_per_pass.toFixed(2)} per decode pass`,
      );
      if (drafter === 'draft') expect(s.tokens_per_pass).toBeGreaterThan(1.5);
    }
    const seeded = { maxTokens: 12, temperature: 1, seed: 3 };
    const sampled = await run({ ...seeded, drafter: 'none' });
    for (const drafter of ['ngram', 'draft'] as const)
      expect(await run({ ...seeded, drafter, treeBudget: 6 }), drafter).toEqual(sampled);
    console.log(
      `[lfm2] draft, T = 1: ${engine.lastStats!.tokens_per_pass.toFixed(2)} tokens per decode pass`,
    );
    expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1.5);
    await engine.unload();
  });
});
