import { describe, expect, it } from 'vitest';
import { ModelDrafter } from '../../src/decode/model-drafter.js';
import { verify } from '../../src/decode/speculate.js';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { TREE_RESULT_WORDS } from '../../src/kernels/tree/tree.js';
import { createGpuHeadRunner } from '../../src/model/draft/gpu-head.js';
import { HeadRunner, openDraftHead } from '../../src/model/draft/head.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type SamplerSpec } from '../../src/model/runner.js';
import { mapWeights } from '../../src/model/weights.js';
import { fixtureFiles, headFixtureFiles } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';
import { bundledModel } from '../helpers/models.js';

async function ids(engine: Engine, prompt: number[] | string, o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

/**
 * The last request emitted more than `min` tokens per target decode pass (the engine's
 * tokens_per_pass): a drafter whose drafts were all rejected gives exactly 1, the bonus token.
 */
function perPass(engine: Engine, label: string, min: number): number {
  const got = engine.lastStats!.tokens_per_pass;
  console.log(`[speculate] ${label}: ${got.toFixed(2)} tokens per pass`);
  expect(got, label).toBeGreaterThan(min);
  return got;
}

/** Every speculative step of the last request ran whole on the device: one readback of the result. */
function oneTripPerStep(engine: Engine): void {
  const d = engine.lastStats!.decode_counts!;
  expect(d.passes).toBeGreaterThan(0);
  expect(d.readbacks).toBe(d.passes);
  expect(d.readback_bytes).toBe(d.passes * TREE_RESULT_WORDS * 4);
}

describe.each(['llama', 'qwen2', 'qwen3'] as ModelFamily[])(
  'speculative decoding on WebGPU, %s',
  (family) => {
    it('greedy and seeded sampling equal plain decoding, with self-drafts and n-grams', async () => {
      const { files } = fixtureFiles(family, 'f32', 5);
      const engine = await createEngine({
        model: memoryModelFiles(family, files),
        quant: 'f32',
        contextLength: 128,
        draft: { self: 'int4' },
        gpu: await gpu(),
      });
      const prompt = [5, 17, 99, 3, 250, 17, 99, 3];
      const greedy = await ids(engine, prompt, { maxTokens: 16, drafter: 'none' });
      // The int4 self-draft's drafts are accepted (measured 2.1 to 2.5 tokens per pass greedy, 1.6
      // to 2.8 at T = 1, 2.7 to 3.0 in the best-first trees of 16 below). The n-gram drafter is
      // held to equality only: this fixture's greedy text does not repeat the prompt (1.0 to 1.15).
      for (const budget of [8]) {
        expect(await ids(engine, prompt, { maxTokens: 16, drafter: 'draft', treeBudget: budget })).toEqual(
          greedy,
        );
        oneTripPerStep(engine);
        perPass(engine, `${family} self-int4 greedy, budget ${budget}`, 1.6);
        expect(await ids(engine, prompt, { maxTokens: 16, drafter: 'ngram', treeBudget: budget })).toEqual(
          greedy,
        );
      }
      let sampled = 0;
      for (let seed = 1; seed <= 2; seed++) {
        const o: GenerateOptions = { maxTokens: 12, temperature: 1, seed };
        const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
        expect(await ids(engine, prompt, { ...o, drafter: 'draft', treeBudget: 6 })).toEqual(plain);
        oneTripPerStep(engine);
        sampled += perPass(engine, `${family} self-int4 T = 1, seed ${seed}`, 1.2) / 2;
      }
      expect(sampled).toBeGreaterThan(1.5);
      // Best-first trees from the draft model (logits read back from the GPU) stay exact.
      let branched = 0;
      const got: number[] = [];
      for await (const c of engine.generate(prompt, { maxTokens: 16, drafter: 'draft', treeBudget: 16 })) {
        got.push(...c.ids);
        if (c.tree?.parents.some((p, i) => p !== i - 1)) branched++;
      }
      expect(got).toEqual(greedy);
      expect(branched).toBeGreaterThan(0);
      perPass(engine, `${family} self-int4 greedy, best-first trees of 16`, 2);
      // The rejection rule needs the target's and the draft's probabilities from the GPU: the
      // same seed gives the same text, of the requested length.
      const r: GenerateOptions = {
        maxTokens: 10,
        temperature: 1,
        seed: 5,
        acceptance: 'rejection',
        treeBudget: 4,
      };
      const first = await ids(engine, prompt, { ...r, drafter: 'draft' });
      expect(first).toHaveLength(10);
      expect(await ids(engine, prompt, { ...r, drafter: 'draft' })).toEqual(first);
      expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1);
      await engine.unload();
    });
  },
);

// Speculation with the whole step on the device (DeviceSpeculator), in this file so that it shares
// the llama pipelines compiled above: the tree it grows is the one the host loop grows
// (ModelDrafter.propose, the reference), its accepted path is the one `verify` finds, the output
// equals plain decoding, and a step costs one round trip.
describe('device speculation step', () => {
  it('grows the host loop’s tree and accepts its path, step after step (greedy and T = 1)', async () => {
    const ctx = await gpu();
    const { files } = fixtureFiles('llama', 'f32', 5);
    const opened = await openModel(memoryModelFiles('llama', files));
    const target = await createGpuRunner(opened, { quant: 'f32', capacity: 128, gpu: ctx });
    const drafter = new ModelDrafter(
      'self-int4',
      await createGpuRunner(opened, { quant: 'int4', capacity: 128, gpu: ctx }),
    );
    const samplers: SamplerSpec[] = [GREEDY, { temperature: 1, topP: 0.9, topK: 0, seed: 7 }];
    let branched = 0;
    let accepted = 0;
    for (const sampler of samplers) {
      // Tokens the device steps emitted: one per step, and one per accepted draft.
      let emitted = 0;
      target.trim(0);
      const prompt = [5, 17, 99, 3, 250, 17, 99, 3];
      await target.forward({ tokens: prompt.slice(0, -1) }, sampler, 'last');
      target.commit(prompt.slice(0, -1).map((_, i) => i));
      let context = [...prompt];
      for (let step = 0; step < 3; step++) {
        // The host loop (propose, then verify), undone; then the device step from the same state,
        // with every depth encoded (the host loop's bound, n - 1).
        const n = 8;
        const before = target.kvLength;
        const proposal = await drafter.propose(context, n, sampler, 'tree');
        const host = await verify(target, context.at(-1)!, proposal, sampler);
        const committed = target.kvLength;
        target.trim(before);
        const dev = (await drafter.speculate(target, context, n, sampler, { depths: n - 1 }))!;
        const where = `${sampler.temperature > 0 ? 'T=1' : 'greedy'} step ${step}`;
        expect(dev, where).toBeDefined();
        expect(dev.draft.tokens, where).toEqual(proposal.tokens);
        expect(dev.draft.parents, where).toEqual(proposal.parents);
        // The scores (path log-probabilities, for the demo's tree view): the host's from its
        // read-back logits, the device's from its own log-softmax, whose reduction order differs
        // in the GPU forms (lavapipe: a few ulps); equal ranking is what the tokens above show.
        expect(dev.draft.scores?.length, where).toBe(proposal.tokens.length);
        for (const [i, s] of dev.draft.scores!.entries())
          expect(Math.abs(s - proposal.scores![i]!), `${where} node ${i}`).toBeLessThanOrEqual(
            1e-5 * (1 + Math.abs(proposal.scores![i]!)),
          );
        expect(dev.accepted, where).toEqual(host.accepted);
        expect(dev.emitted, where).toEqual(host.emitted);
        expect(target.kvLength, where).toBe(committed);
        if (proposal.parents.some((p, i) => p !== i - 1)) branched++;
        accepted += host.accepted.length;
        emitted += dev.emitted.length;
        context = [...context, ...host.emitted];
      }
      // Tokens per target pass, each sampler's three steps: 5 / 3 measured (drafts accepted in the
      // second and third); all rejected would be exactly 1.
      const label = sampler.temperature > 0 ? 'T=1' : 'greedy';
      console.log(`[speculate] device step, ${label}: ${(emitted / 3).toFixed(2)} tokens per pass`);
      expect(emitted / 3, label).toBeGreaterThan(1.3);
    }
    expect(branched).toBeGreaterThan(0);
    expect(accepted).toBeGreaterThan(0);
    drafter.dispose();
    target.dispose();
  });

  const greedy: GenerateOptions = { maxTokens: 16, treeBudget: 8 };
  const sampled: GenerateOptions = { maxTokens: 12, treeBudget: 6, temperature: 1, seed: 3 };
  const cases = [
    ['int2', [greedy, sampled]],
    ['model', [greedy, sampled]],
  ] as const;
  for (const [draft, runs] of cases)
    it(`through the engine (draft ${draft}): ids equal plain decoding; one round trip of ${TREE_RESULT_WORDS * 4} B per step`, async () => {
      const { files } = fixtureFiles('llama', 'f32', 5);
      const engine = await createEngine({
        model: memoryModelFiles('llama', files),
        quant: 'f32',
        contextLength: 128,
        draft:
          draft === 'model' ? { model: memoryModelFiles('llama', files), quant: 'int8' } : { self: draft },
        gpu: await gpu(),
      });
      // Longer than one draft pass: the drafter takes the prompt in at prefill, not in a step.
      const prompt = Array.from({ length: 70 }, (_, i) => [5, 17, 99, 3, 250, 17, 99, 3][i % 8]! + (i % 5));
      // Tokens per target pass, the mean over the runs: drafts all rejected would give exactly 1.
      let tokensPerPass = 0;
      for (const o of runs) {
        const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
        expect(await ids(engine, prompt, { ...o, drafter: 'draft' })).toEqual(plain);
        const s = engine.lastStats!;
        tokensPerPass += s.tokens_per_pass / runs.length;
        const d = s.decode_counts!;
        // Every step: one submission's readback of the result words, nothing else.
        expect(d.passes).toBeGreaterThan(0);
        expect(d.readbacks).toBe(d.passes);
        expect(d.readback_bytes).toBe(d.passes * TREE_RESULT_WORDS * 4);
        console.log(
          `[device-step] llama draft ${draft} ${o.temperature ? 'T=1' : 'greedy'}: ${s.tokens_per_pass.toFixed(2)} tokens/pass, ` +
            `${s.readbacks_per_pass} readbacks/step, ${s.readback_bytes_per_pass} B/step, ${s.draft_passes} draft passes`,
        );
      }
      // The int8 draft model drafts well (3.75 tokens per pass greedy, 2.6 at T = 1, measured).
      // The int2 self-draft is weak on this random fixture's flat logits: one draft accepted in each
      // request (1.07 and 1.10), so it is held only to accepting some.
      expect(tokensPerPass).toBeGreaterThan(draft === 'model' ? 2 : 1);
      await engine.unload();
    });
});

// A draft head reads the target's features: the GPU runner keeps them per cache slot (a scatter in
// each pass, compacted with the KV rows), and they match the reference forward's.
describe('draft head over a GPU target', () => {
  it('the GPU runner keeps the reference features through a prefill and a tree commit; the head is lossless', async () => {
    const ctx = await gpu();
    const { files, tensors } = fixtureFiles('llama', 'f32', 5);
    const opened = await openModel(memoryModelFiles('llama', files));
    const target = await createGpuRunner(opened, { quant: 'f32', capacity: 128, gpu: ctx, features: true });
    const ref = new ReferenceRunner(
      opened.spec,
      mapWeights(Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }]))),
      { capacity: 128 },
    );
    const prompt = [5, 17, 99, 3, 250, 17, 99];
    const tree = { tokens: [7, 8, 9, 10, 11], parents: [-1, 0, 1, -1, 3] };
    for (const r of [target, ref]) {
      await r.forward({ tokens: prompt }, GREEDY, 'last');
      r.commit(prompt.map((_, i) => i));
      await r.forward(tree, GREEDY, 'all');
      r.commit([3, 4]); // the second branch: rows move in the cache
    }
    const got = await target.features(0, target.kvLength);
    const want = await ref.features(0, ref.kvLength);
    expect(got.length).toBe(9 * opened.spec.hidden);
    let worst = 0;
    want.forEach((w, i) => {
      worst = Math.max(worst, Math.abs(got[i]! - w) / (1 + Math.abs(w)));
    });
    expect(worst).toBeLessThan(1e-4);
    await expect(target.features(0, 10)).rejects.toThrow(
      'features: [0, 10) is not a range of the 9 committed positions',
    );
    target.dispose();

    const engine = await createEngine({
      model: memoryModelFiles('llama', files),
      quant: 'f32',
      contextLength: 128,
      draft: { head: memoryModelFiles('head', headFixtureFiles('llama', 3)) },
      gpu: ctx,
    });
    const long = Array.from({ length: 40 }, (_, i) => [5, 17, 99, 3, 250, 17, 99, 3][i % 8]! + (i % 5));
    // A random head: equality only, its drafts are not expected to be accepted (1.00 tokens per
    // pass). The next test holds the trained head's drafts to being accepted.
    for (const o of [
      { maxTokens: 16, treeBudget: 8 },
      { maxTokens: 12, treeBudget: 6, temperature: 1, seed: 3 },
    ] as GenerateOptions[]) {
      const plain = await ids(engine, long, { ...o, drafter: 'none' });
      expect(await ids(engine, long, { ...o, drafter: 'draft' })).toEqual(plain);
    }
    await engine.unload();
  });
});

// The head on the GPU: its own runner beside the target (its input stage reads the target's feature
// store where it lies), the same logits as the CPU head, and the whole speculative step on the device.
describe('draft head on the GPU', () => {
  it('gives the CPU head’s logits over a prefill and a tree run in waves; device steps are lossless with one round trip; a trained head’s drafts are accepted', async () => {
    const ctx = await gpu();
    const { files } = fixtureFiles('llama', 'f32', 5);
    const opened = await openModel(memoryModelFiles('llama', files));
    const target = await createGpuRunner(opened, { quant: 'f32', capacity: 128, gpu: ctx, features: true });
    const head = await openDraftHead(memoryModelFiles('head', headFixtureFiles('llama', 3)), opened);
    const onGpu = await createGpuHeadRunner(head, target, { capacity: 128, quant: 'f32' });
    const onCpu = new HeadRunner(head, target, 128);
    const V = opened.spec.vocabSize;
    const prompt = [5, 17, 99, 3, 250, 17, 99];
    await target.forward({ tokens: prompt }, GREEDY, 'last');
    target.commit(prompt.map((_, i) => i));
    // Rows 0 and 3 read the target's feature 6; rows 1, 2 and 4 their parents' outputs (waves 1, 2, 1).
    const tree = { tokens: [7, 8, 9, 10, 11], parents: [-1, 0, 1, -1, 3] };
    const compare = (got: Float32Array, want: Float32Array, rows: number) => {
      expect(got.length).toBe(rows * V);
      let worst = 0;
      let finite = 0;
      want.forEach((w, i) => {
        if (!Number.isFinite(w)) {
          expect(got[i]).toBe(w); // -∞ outside the draft vocabulary
          return;
        }
        finite++;
        worst = Math.max(worst, Math.abs(got[i]! - w) / (1 + Math.abs(w)));
      });
      expect(finite).toBe(rows * head.spec.draftVocab);
      expect(worst).toBeLessThan(1e-4);
    };
    for (const step of [
      { input: { tokens: prompt }, rows: prompt.length, commit: true },
      { input: tree, rows: tree.tokens.length, commit: false },
    ]) {
      const ids = await onGpu.forward(step.input, GREEDY, 'all');
      expect(Array.from(ids)).toEqual(Array.from(await onCpu.forward(step.input, GREEDY, 'all')));
      compare(await onGpu.lastLogits(), await onCpu.lastLogits(), step.rows);
      if (step.commit) for (const r of [onGpu, onCpu]) r.commit(step.input.tokens.map((_, i) => i));
    }
    onGpu.dispose();
    target.dispose();

    const engine = await createEngine({
      model: memoryModelFiles('llama', files),
      quant: 'f32',
      contextLength: 128,
      draft: { head: memoryModelFiles('head', headFixtureFiles('llama', 3)) },
      gpu: ctx,
    });
    const long = Array.from({ length: 70 }, (_, i) => [5, 17, 99, 3, 250, 17, 99, 3][i % 8]! + (i % 5));
    for (const o of [
      { maxTokens: 16, treeBudget: 8 },
      { maxTokens: 12, treeBudget: 6, temperature: 1, seed: 3 },
    ] as GenerateOptions[]) {
      const plain = await ids(engine, long, { ...o, drafter: 'none' });
      expect(await ids(engine, long, { ...o, drafter: 'draft' })).toEqual(plain);
      oneTripPerStep(engine);
      const s = engine.lastStats!;
      console.log(
        `[device-step] llama head on the GPU ${o.temperature ? 'T=1' : 'greedy'}: ${s.tokens_per_pass.toFixed(2)} tokens/pass, ` +
          `${s.readbacks_per_pass} readbacks/step, ${s.readback_bytes_per_pass} B/step, ${s.draft_passes} draft passes`,
      );
    }
    await engine.unload();

    // The random head above drafts nothing the target picks (1.00 tokens per pass, so it is held
    // to equality only): the demo target's trained head (models/kjv-head) does, through the same
    // device steps (3.57 tokens per pass greedy, 2.67 at T = 1, measured; all rejected would be 1).
    const trained = await createEngine({
      model: await bundledModel('kjv-target'),
      quant: 'f32',
      contextLength: 128,
      draft: { head: await bundledModel('kjv-head') },
      gpu: ctx,
    });
    const verse = 'And God said unto Moses, I AM THAT I AM: and';
    for (const o of [
      { maxTokens: 24, treeBudget: 8 },
      { maxTokens: 16, treeBudget: 6, temperature: 1, seed: 3 },
    ] as GenerateOptions[]) {
      const plain = await ids(trained, verse, { ...o, drafter: 'none' });
      expect(await ids(trained, verse, { ...o, drafter: 'draft' })).toEqual(plain);
      oneTripPerStep(trained);
      perPass(trained, `kjv-head on the GPU ${o.temperature ? 'T=1' : 'greedy'}`, 2);
    }
    await trained.unload();
  });
});
