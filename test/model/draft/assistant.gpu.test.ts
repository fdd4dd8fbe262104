// Gemma 4's assistant beside a GPU target (src/model/draft/assistant-gpu.ts): the cache reader on
// random shapes (rings that wrap, f16 words) against kvRowOf and packHalves; the target's K/V and
// embedding rows as the reference runner holds them; draft logits equal to the assistant's beside
// the reference target, past the sliding ring's wrap, chains and a tree; and speculation through
// the engine equal to plain decoding, greedy and seeded, chains and trees.
import { describe, expect, it } from 'vitest';
import type { Drafter } from '../../../src/decode/drafter.js';
import { ModelDrafter } from '../../../src/decode/model-drafter.js';
import { codecOf, createEngine } from '../../../src/engine/create.js';
import { Engine } from '../../../src/engine/engine.js';
import type { GenerateOptions } from '../../../src/engine/types.js';
import { InvalidInputError } from '../../../src/errors.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { countsSince } from '../../../src/gpu/counters.js';
import { type KvShape, kvRingOf, kvRowOf, kvRows, packHalves } from '../../../src/kernels/kv/kv.js';
import { assistantSlots, openAssistant } from '../../../src/model/draft/assistant.js';
import { gpuTarget, kvRuns, kvSlotsInto } from '../../../src/model/draft/assistant-gpu.js';
import {
  AssistantRunner,
  openAssistantRunner,
  referenceTarget,
} from '../../../src/model/draft/assistant-runner.js';
import { createGpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY } from '../../../src/model/runner.js';
import { layerAttention } from '../../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';
import {
  assistantFiles,
  gemma4AssistantConfig,
  randomGemma4AssistantWeights,
} from '../../fixtures/gemma4-config.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';
import { rng } from '../../helpers/random.js';

/** 70 ids below the vocabulary (512): past the sliding window (64) and its + 1. */
const PROMPT = Array.from({ length: 70 }, (_, i) => [5, 17, 99, 3, 250, 17, 99, 3][i % 8]! + (i % 5));
/** 200 ids: with 256 slots a sliding layer's ring holds 64 + 64 + 64 = 192 rows: P = 199 wraps. */
const LONG = Array.from({ length: 200 }, (_, i) => (i * 37 + 11) % 512);

describe('reading a KV cache out of its buffers', () => {
  it('kvRuns and kvSlotsInto give the slots kvRowOf places, in rings that wrap and in f16', () => {
    const rand = rng(3);
    for (const shape of [
      { capacity: 200, kvHeads: 2, headDim: 3 },
      { capacity: 300, kvHeads: 1, headDim: 6, ring: 70 },
      { capacity: 300, kvHeads: 3, headDim: 4, ring: 133, format: 'f16' },
      { capacity: 90, kvHeads: 2, headDim: 2, format: 'f16' },
    ] satisfies KvShape[]) {
      const row = shape.kvHeads * shape.headDim;
      for (let trial = 0; trial < 6; trial++) {
        const last = Math.floor(rand() * shape.capacity);
        const span = Math.min(last + 1, shape.ring ?? last + 1);
        const to = last + 1;
        const from = to - Math.floor(rand() * (span + 1));
        // A full cache of f16-exact values, as the ring the kernels would hold after slots 0..last.
        const full = Float32Array.from(
          { length: shape.capacity * row },
          () => Math.round((rand() - 0.5) * 64) / 8,
        );
        const held = shape.ring ? kvRingOf(shape, full, last) : full;
        const words = shape.format === 'f16' ? packHalves(held) : new Uint32Array(held.buffer);
        const runs = kvRuns(shape, from, to);
        expect(runs.reduce((n, r) => n + r.count, 0)).toBe(to - from);
        const per = shape.format === 'f16' ? row / 2 : row;
        const read = new Uint32Array(
          runs.flatMap((r) => {
            for (let j = 0; j < r.count; j++) expect(r.row + j).toBe(kvRowOf(shape, r.slot + j));
            expect(r.row + r.count).toBeLessThanOrEqual(kvRows(shape));
            return Array.from(words.subarray(r.row * per, (r.row + r.count) * per));
          }),
        );
        const got = new Float32Array(to * row);
        kvSlotsInto(shape, read, from, to, got, true);
        expect(Array.from(got.subarray(from * row))).toEqual(Array.from(full.subarray(from * row, to * row)));
        expect(got.subarray(0, from * row).every((v) => v === 0)).toBe(true);
      }
      if (shape.ring) expect(() => kvRuns(shape, 0, shape.ring + 1)).toThrow(InvalidInputError);
      expect(() => kvRuns(shape, 0, shape.capacity + 1)).toThrow(InvalidInputError);
    }
  });
});

/**
 * The GPU's tiny Gemma 4 target (fixtureFiles: hidden 64, vocabulary 512, a window of 64, KV-shared
 * layers) on the GPU (features kept) and on the reference runner, and an assistant for it.
 */
async function setup(ordered: boolean, capacity: number, seed = 5) {
  const ctx = await gpu();
  const { files } = fixtureFiles('gemma4', 'f32', seed);
  const opened = await openModel(memoryModelFiles('gemma-4-tiny', files));
  const reference = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity,
  });
  const target = await createGpuRunner(opened, { quant: 'f32', capacity, gpu: ctx, features: true });
  const s = opened.spec;
  const config = gemma4AssistantConfig(ordered, {
    hidden: s.hidden,
    vocab: s.vocabSize,
    window: s.slidingWindow!,
    rope: JSON.parse(new TextDecoder().decode(files.get('config.json')!)).rope_parameters,
  });
  const aFiles = assistantFiles(config, randomGemma4AssistantWeights(config, seed + 100));
  const assistant = await openAssistant(memoryModelFiles('assistant', aFiles), opened);
  return { ctx, files, opened, reference, target, assistant, aFiles };
}

/** Largest |got - want| / (1 + |want|) over two arrays of one length. */
function worst(got: Float32Array, want: Float32Array): number {
  expect(got.length).toBe(want.length);
  let w = 0;
  want.forEach((v, i) => {
    w = Math.max(w, Math.abs(got[i]! - v) / (1 + Math.abs(v)));
  });
  return w;
}

describe('Gemma 4 assistant beside a GPU target', () => {
  for (const ordered of [true, false]) {
    it(`${ordered ? 'masked-embedding' : 'full'} head: the target's K/V and embeddings as the reference's; the drafts' logits as beside the reference target`, {
      timeout: 300_000,
    }, async () => {
      const { target, reference, assistant } = await setup(ordered, 256);
      const L = LONG.length;
      // The target has run the context but its last token (the bonus, not yet verified).
      for (let at = 0; at < L - 1; at += 64) {
        const tokens = LONG.slice(at, Math.min(at + 64, L - 1));
        await target.forward({ tokens }, GREEDY, 'last');
        target.commit(tokens.map((_, i) => i));
        await reference.forward({ tokens }, GREEDY, 'last');
        reference.commit(tokens.map((_, i) => i));
      }
      const onGpu = await gpuTarget(target, 'assistant');
      const onCpu = referenceTarget(reference);
      // What each source layer's rows read at P = L - 1 (a sliding layer's: across the ring's wrap).
      const ranges = new Map<number, readonly [number, number]>();
      assistant.sources.forEach((src, l) => {
        ranges.set(src, assistantSlots(layerAttention(assistant.spec, l).window, L - 1));
      });
      // The sliding source's ring (192 rows) holds P - 65 .. P - 1 = 134 .. 198 across its wrap.
      const sliding = assistant.sources[0]!;
      expect(target.kvCache(sliding)!.shape.ring).toBe(192);
      expect(ranges.get(sliding)).toEqual([134, 199]);
      const [got, want] = [await onGpu.kvRows(ranges), await onCpu.kvRows(ranges)];
      for (const [src, [from, to]] of ranges) {
        const w = want.keys[src]!.length / reference.capacity;
        for (const [a, b] of [
          [got.keys[src]!, want.keys[src]!],
          [got.values[src]!, want.values[src]!],
        ] as const)
          expect(
            worst(a.subarray(from * w, to * w), b.subarray(from * w, to * w)),
            `layer ${src}`,
          ).toBeLessThan(1e-4);
      }
      const ids = [3, 511, 0, 42, 3];
      expect(worst(await onGpu.embedRows(ids), await onCpu.embedRows(ids))).toBe(0);
      // The assistant over each: the context's entries, three chained rounds, then a tree below it.
      // (The GPU one over a reader of its own: it holds nothing of the context yet.)
      const runners = [
        new AssistantRunner(assistant, await gpuTarget(target, 'assistant'), 256),
        new AssistantRunner(assistant, onCpu, 256),
      ];
      const steps = [
        { input: { tokens: LONG }, rows: 'last' as const, commit: LONG.map((_, i) => i) },
        { input: { tokens: [7] }, rows: 'last' as const, commit: [0] },
        { input: { tokens: [40] }, rows: 'last' as const, commit: [0] },
        { input: { tokens: [41, 2, 9, 50], parents: [-1, 0, 0, 2] }, rows: 'all' as const, commit: [] },
      ];
      // Readbacks per forward: the features (rows that read the target's), the embeddings, and the
      // K/V slots not yet held (none once the target's context is read: it has not moved).
      const trips = [3, 1, 1, 1];
      for (const [n, step] of steps.entries()) {
        const before = target.deviceCounts();
        const a = await runners[0]!.forward(step.input, GREEDY, step.rows);
        const counts = countsSince(target.deviceCounts(), before);
        console.log(
          `assistant beside the GPU, forward ${n}: ${counts.readbacks} readbacks, ${counts.readbackBytes} B, ${counts.submits} submits`,
        );
        expect(counts.readbacks, `step ${n}`).toBe(trips[n]);
        const b = await runners[1]!.forward(step.input, GREEDY, step.rows);
        expect(Array.from(a), `step ${n}`).toEqual(Array.from(b));
        const [la, lb] = [await runners[0]!.lastLogits(), await runners[1]!.lastLogits()];
        expect(worst(la, lb), `step ${n}`).toBeLessThan(1e-4);
        for (const r of runners) r.commit(step.commit);
      }
      expect(runners[0]!.blindRows).toBe(0);
      // A trim drops what the reader holds: other tokens after slot 150 read back as rewritten.
      const other = LONG.slice(150, L - 1).map((t) => (t + 1) % 512);
      for (const r of [target, reference]) {
        r.trim(150);
        await r.forward({ tokens: other }, GREEDY, 'last');
        r.commit(other.map((_, i) => i));
      }
      const [again, wantAgain] = [await onGpu.kvRows(ranges), await onCpu.kvRows(ranges)];
      for (const [src, [from, to]] of ranges) {
        const w = wantAgain.keys[src]!.length / reference.capacity;
        const slice = (x: Float32Array) => x.subarray(from * w, to * w);
        expect(worst(slice(again.keys[src]!), slice(wantAgain.keys[src]!)), `layer ${src}`).toBeLessThan(
          1e-4,
        );
        expect(worst(slice(again.values[src]!), slice(wantAgain.values[src]!)), `layer ${src}`).toBeLessThan(
          1e-4,
        );
      }
      for (const r of runners) r.dispose();
      onGpu.dispose();
      target.dispose();
    });
  }

  for (const shape of ['tree', 'chain'] as const) {
    it(`${shape}s through the engine: greedy and seeded ids equal plain decoding`, {
      timeout: 300_000,
    }, async () => {
      const { opened, target, assistant } = await setup(true, 128, 7);
      const runner = await openAssistantRunner(assistant, target, 128);
      const drafter = new ModelDrafter('assistant', runner);
      const chains: Drafter = {
        name: 'assistant chains',
        propose: (context, budget, sampler) => drafter.propose(context, budget, sampler, 'chain'),
        dispose: () => drafter.dispose(),
      };
      const engine = new Engine({
        id: 'gemma-4-tiny',
        runner: target,
        codec: codecOf(opened.tokenizer, opened.spec.vocabSize),
        drafter: shape === 'tree' ? drafter : chains,
      });
      for (const o of [
        { maxTokens: 12 },
        { maxTokens: 10, temperature: 1, seed: 3 },
        { maxTokens: 10, temperature: 0.7, topP: 0.9, seed: 11 },
      ] satisfies GenerateOptions[]) {
        const want = await ids(engine, PROMPT, { ...o, drafter: 'none' });
        for (const budget of [4, 12]) {
          expect(await ids(engine, PROMPT, { ...o, treeBudget: budget }), `budget ${budget}`).toEqual(want);
          const stats = engine.lastStats!;
          expect(stats.draft_passes).toBeGreaterThan(0);
          console.log(
            `assistant ${shape}s beside the GPU, T = ${o.temperature ?? 0}, budget ${budget}: ${stats.tokens_per_pass.toFixed(2)} tokens a pass`,
          );
        }
      }
      expect(runner.blindRows).toBe(0);
      await engine.unload();
    });
  }

  it("over an f16 KV cache: its rows read back as halves near the f32 cache's; speculation equals plain decoding", {
    timeout: 300_000,
  }, async () => {
    const { ctx, opened, target, assistant } = await setup(true, 128, 9);
    const half = await createGpuRunner(opened, {
      quant: 'f32',
      capacity: 128,
      gpu: ctx,
      features: true,
      kvFormat: 'f16',
    });
    for (const r of [target, half])
      for (const tokens of [PROMPT.slice(0, 64), PROMPT.slice(64)]) {
        await r.forward({ tokens }, GREEDY, 'last');
        r.commit(tokens.map((_, i) => i));
      }
    expect(half.kvCache(assistant.sources[0]!)!.shape.format).toBe('f16');
    const P = PROMPT.length;
    const ranges = new Map(assistant.sources.map((src) => [src, [0, P] as const]));
    const [wide, narrow] = [await gpuTarget(target, 'a'), await gpuTarget(half, 'a')];
    const [a, b] = [await wide.kvRows(ranges), await narrow.kvRows(ranges)];
    for (const src of assistant.sources) {
      // Halves carry 11 bits; the layers before the source read the halved cache too.
      const [k, v] = [worst(b.keys[src]!, a.keys[src]!), worst(b.values[src]!, a.values[src]!)];
      console.log(`f16 cache, layer ${src}: keys within ${k.toExponential(1)}, values ${v.toExponential(1)}`);
      expect(k, `keys ${src}`).toBeLessThan(1e-2);
      expect(v, `values ${src}`).toBeLessThan(1e-2);
    }
    for (const t of [wide, narrow]) t.dispose();
    target.dispose();
    half.trim(0);
    const engine = new Engine({
      id: 'gemma-4-tiny',
      runner: half,
      codec: codecOf(opened.tokenizer, opened.spec.vocabSize),
      drafter: new ModelDrafter('assistant', await openAssistantRunner(assistant, half, 128)),
    });
    for (const o of [
      { maxTokens: 10 },
      { maxTokens: 8, temperature: 1, seed: 5 },
    ] satisfies GenerateOptions[]) {
      const want = await ids(engine, PROMPT, { ...o, drafter: 'none' });
      expect(await ids(engine, PROMPT, { ...o, treeBudget: 8 })).toEqual(want);
      expect(engine.lastStats!.draft_passes).toBeGreaterThan(0);
    }
    await engine.unload();
  });

  it('over an int8 KV cache with rotated keys (the shared and sliding layers too): it reads the rows back turned; speculation equals plain decoding', {
    timeout: 300_000,
  }, async () => {
    const { ctx, files, aFiles } = await setup(true, 128, 11);
    const engine = await createEngine({
      model: memoryModelFiles('gemma-4-tiny', files),
      quant: 'f32',
      contextLength: 128,
      kvCache: 'int8',
      gpu: ctx,
      draft: { assistant: memoryModelFiles('assistant', aFiles) },
    });
    for (const o of [
      { maxTokens: 10 },
      { maxTokens: 8, temperature: 1, seed: 5 },
    ] satisfies GenerateOptions[]) {
      const want = await ids(engine, PROMPT, { ...o, drafter: 'none' });
      expect(await ids(engine, PROMPT, { ...o, treeBudget: 8 })).toEqual(want);
      expect(engine.lastStats!.draft_passes).toBeGreaterThan(0);
    }
    await engine.unload();
  });

  it('createEngine opens { assistant } beside a GPU target; a target runner without features is refused', {
    timeout: 300_000,
  }, async () => {
    const { ctx, files, opened, aFiles, assistant } = await setup(true, 128, 7);
    const load = (draft?: { assistant: ReturnType<typeof memoryModelFiles> }) =>
      createEngine({
        model: memoryModelFiles('gemma-4-tiny', files),
        quant: 'f32',
        contextLength: 128,
        gpu: ctx,
        draft,
      });
    const plain = await load();
    const want = await ids(plain, PROMPT, { maxTokens: 10 });
    await plain.unload();
    const engine = await load({ assistant: memoryModelFiles('assistant', aFiles) });
    expect(await ids(engine, PROMPT, { maxTokens: 10, treeBudget: 8 })).toEqual(want);
    expect(engine.lastStats!.draft_passes).toBeGreaterThan(0);
    await engine.unload();
    const bare = await createGpuRunner(opened, { quant: 'f32', capacity: 64, gpu: ctx });
    await expect(openAssistantRunner(assistant, bare, 64)).rejects.toThrow(/does not keep its features/);
    bare.dispose();
  });
});

async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}
