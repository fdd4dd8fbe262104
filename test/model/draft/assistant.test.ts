// Gemma 4's assistant drafter (src/model/draft/assistant.ts) on the CPU reference: its draft logits
// against the independent f64 oracle written from transformers' modeling_gemma4_assistant.py
// (test/fixtures/naive-gemma4-assistant.ts), chains and trees; speculation with it equal to plain
// decoding, greedy and seeded, chains and trees; and its refusals.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Drafter } from '../../../src/decode/drafter.js';
import { ModelDrafter } from '../../../src/decode/model-drafter.js';
import { codecOf, createEngine } from '../../../src/engine/create.js';
import { Engine } from '../../../src/engine/engine.js';
import type { GenerateOptions } from '../../../src/engine/types.js';
import { InvalidInputError } from '../../../src/errors.js';
import { ModelFormatError } from '../../../src/formats/errors.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { assistantSources, openAssistant } from '../../../src/model/draft/assistant.js';
import { AssistantRunner, referenceTarget } from '../../../src/model/draft/assistant-runner.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY } from '../../../src/model/runner.js';
import { mapWeights } from '../../../src/model/weights.js';
import {
  assistantFiles,
  GEMMA4_PLE,
  gemma4AssistantConfig,
  gemma4Weights,
  randomGemma4AssistantWeights,
} from '../../fixtures/gemma4-config.js';
import type { Gemma4Source } from '../../fixtures/naive-gemma4.js';
import { naiveGemma4AssistantDraft } from '../../fixtures/naive-gemma4-assistant.js';
import { configFixtureFiles, fixtureFiles } from '../../fixtures/write.js';
import { startHubServer } from '../../helpers/hub-server.js';

type Config = Record<string, unknown>;

/** 14 ids below the vocabulary (96): past the sliding window (5) and its + 1. */
const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21, 63, 7];

/** The GEMMA4_PLE target on the reference runner, its weights as the oracle reads them, and an assistant. */
async function setup(ordered: boolean, seed = 5) {
  const { files, tensors } = configFixtureFiles(GEMMA4_PLE, seed);
  const opened = await openModel(memoryModelFiles('gemma-4-tiny', files));
  const named = Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }]));
  const target = new ReferenceRunner(opened.spec, mapWeights(named), { capacity: 128 });
  const targetSource: Gemma4Source = gemma4Weights(named);
  const config = gemma4AssistantConfig(ordered);
  const weights = randomGemma4AssistantWeights(config, seed + 100);
  const aFiles = assistantFiles(config, weights);
  const assistant = await openAssistant(memoryModelFiles('assistant', aFiles), opened);
  return { files, opened, target, targetSource, config, weights, aFiles, assistant };
}

const argmax = (row: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};

/** Largest |got - want| over a row, and the row's largest |want|. */
function diff(got: ArrayLike<number>, want: readonly number[]): { diff: number; scale: number } {
  let d = 0;
  let s = 0;
  want.forEach((w, i) => {
    d = Math.max(d, Math.abs(got[i]! - w));
    s = Math.max(s, Math.abs(w));
  });
  return { diff: d, scale: s };
}

describe('Gemma 4 assistant vs the independent implementation', () => {
  for (const ordered of [true, false]) {
    it(`${ordered ? 'masked-embedding' : 'full'} head: a chain of 4 rounds and a tree's rows equal the oracle's logits`, async () => {
      const { opened, target, targetSource, config, weights, assistant } = await setup(ordered);
      const V = opened.spec.vocabSize;
      const L = PROMPT.length;
      // The target has run the context but its last token (the bonus, not yet verified).
      await target.forward({ tokens: PROMPT.slice(0, L - 1) }, GREEDY, 'last');
      target.commit(Array.from({ length: L - 1 }, (_, i) => i));
      const want = naiveGemma4AssistantDraft(GEMMA4_PLE, targetSource, config, weights, PROMPT, 4);
      const runner = new AssistantRunner(assistant, referenceTarget(target), 128);
      const rows: Float32Array[] = [];
      await runner.forward({ tokens: PROMPT }, GREEDY, 'last');
      runner.commit(PROMPT.map((_, i) => i));
      rows.push(await runner.lastLogits());
      for (const token of want.tokens.slice(0, 3)) {
        await runner.forward({ tokens: [token] }, GREEDY, 'last');
        runner.commit([0]);
        rows.push(await runner.lastLogits());
      }
      rows.forEach((row, r) => {
        const { diff: d, scale } = diff(row, want.logits[r]!);
        expect(scale).toBeGreaterThan(0.5);
        expect(d, `round ${r}`).toBeLessThanOrEqual(2e-5 * scale);
        expect(argmax(row), `round ${r}`).toBe(argmax(want.logits[r]!));
      });
      expect(runner.blindRows).toBe(0);
      // A tree below the context: a, then its children b and c; each row as the oracle's chain.
      runner.trim(L);
      const [a, b] = want.tokens;
      const c = (b! + 1) % V;
      await runner.forward({ tokens: [a!, b!, c], parents: [-1, 0, 0] }, GREEDY, 'all');
      const tree = await runner.lastLogits();
      const viaC = naiveGemma4AssistantDraft(GEMMA4_PLE, targetSource, config, weights, PROMPT, 3, [a!, c]);
      for (const [row, oracle] of [
        [0, want.logits[1]!],
        [1, want.logits[2]!],
        [2, viaC.logits[2]!],
      ] as const) {
        const { diff: d, scale } = diff(tree.subarray(row * V, (row + 1) * V), oracle);
        expect(d, `tree row ${row}`).toBeLessThanOrEqual(2e-5 * scale);
      }
    });
  }

  it('the masked head scores the best centroids’ tokens, every other token their minimum - 1', async () => {
    const { opened, target, assistant } = await setup(true);
    await target.forward({ tokens: PROMPT.slice(0, -1) }, GREEDY, 'last');
    target.commit(PROMPT.slice(0, -1).map((_, i) => i));
    const runner = new AssistantRunner(assistant, referenceTarget(target), 128);
    await runner.forward({ tokens: PROMPT }, GREEDY, 'last');
    const row = await runner.lastLogits();
    const floor = Math.min(...row);
    const scored = Array.from(row).filter((v) => v !== floor);
    // 3 centroids of 96 / 8 = 12 tokens each; the floor is the lowest scored value less 1.
    expect(scored.length).toBe(36);
    expect(floor).toBeCloseTo(Math.min(...scored) - 1, 5);
    expect(row.length).toBe(opened.spec.vocabSize);
  });
});

async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

/** An engine over the target with the assistant drafting trees, or chains only. */
async function engineWith(shape: 'tree' | 'chain') {
  const { opened, target, assistant } = await setup(true, 7);
  const runner = new AssistantRunner(assistant, referenceTarget(target), 128);
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
  return { engine, runner };
}

describe('speculation with the Gemma 4 assistant on the CPU reference', () => {
  for (const shape of ['tree', 'chain'] as const) {
    it(`${shape}s: greedy and seeded ids equal plain decoding`, { timeout: 120_000 }, async () => {
      const { engine, runner } = await engineWith(shape);
      for (const o of [
        { maxTokens: 16 },
        { maxTokens: 12, temperature: 1, seed: 3 },
        { maxTokens: 12, temperature: 0.7, topP: 0.9, seed: 11 },
      ] satisfies GenerateOptions[]) {
        const want = await ids(engine, PROMPT, { ...o, drafter: 'none' });
        for (const budget of [4, 12]) {
          expect(await ids(engine, PROMPT, { ...o, treeBudget: budget }), `budget ${budget}`).toEqual(want);
          const stats = engine.lastStats!;
          expect(stats.tokens_per_pass).toBeGreaterThanOrEqual(1);
          expect(stats.draft_passes).toBeGreaterThan(0);
          console.log(
            `assistant ${shape}s, T = ${o.temperature ?? 0}, budget ${budget}: ${stats.tokens_per_pass.toFixed(2)} tokens a pass`,
          );
        }
      }
      // Every row the drafter scored had its input hidden: the target's, or its parent's.
      expect(runner.blindRows).toBe(0);
    });
  }

  it('createEngine opens { assistant } and a { model } that is one', {
    timeout: 120_000,
  }, async () => {
    const { files, aFiles } = await setup(true, 7);
    const load = (draft: Parameters<typeof createEngine>[0]['draft']) =>
      createEngine({
        model: memoryModelFiles('gemma-4-tiny', files),
        device: 'cpu',
        quant: 'f32',
        contextLength: 128,
        draft,
      });
    const plain = await load(undefined);
    const want = await ids(plain, PROMPT, { maxTokens: 10 });
    for (const draft of [
      { assistant: memoryModelFiles('assistant', aFiles) },
      { model: memoryModelFiles('assistant', aFiles) },
    ]) {
      const engine = await load(draft);
      expect(await ids(engine, PROMPT, { maxTokens: 10, treeBudget: 8 })).toEqual(want);
      expect(engine.lastStats!.draft_passes).toBeGreaterThan(0);
    }
  });

  it("draft: 'assistant' takes the hub's org/name-assistant beside org/name, and asks for a ref otherwise", {
    timeout: 120_000,
  }, async () => {
    const { files, aFiles } = await setup(true, 7);
    const root = await mkdtemp(join(tmpdir(), 'weft-assistant-hub-'));
    for (const [dir, fs] of [
      ['gemma-4-tiny', files],
      ['gemma-4-tiny-assistant', aFiles],
    ] as const) {
      await mkdir(join(root, 'google', dir), { recursive: true });
      for (const [name, bytes] of fs) await writeFile(join(root, 'google', dir, name), bytes);
    }
    const hub = await startHubServer(root);
    try {
      const load = (draft?: 'assistant') =>
        createEngine({
          model: 'google/gemma-4-tiny',
          hubBase: hub.url,
          device: 'cpu',
          quant: 'f32',
          contextLength: 128,
          draft,
        });
      const want = await ids(await load(), PROMPT, { maxTokens: 10 });
      const engine = await load('assistant');
      expect(await ids(engine, PROMPT, { maxTokens: 10, treeBudget: 8 })).toEqual(want);
      expect(engine.lastStats!.draft_passes).toBeGreaterThan(0);
    } finally {
      await hub.close();
      await rm(root, { recursive: true, force: true });
    }
    await expect(
      createEngine({ model: memoryModelFiles('gemma-4-tiny', files), device: 'cpu', draft: 'assistant' }),
    ).rejects.toThrow(/org\/name-assistant.*"gemma-4-tiny".*draft: \{ assistant/);
  });
});

describe('Gemma 4 assistant refusals', () => {
  it('a target that is not Gemma 4, or of another width, vocabulary or head shape', async () => {
    const { opened, aFiles, config, weights, assistant } = await setup(true);
    const llama = await openModel(memoryModelFiles('llama', fixtureFiles('llama', 'f32', 3).files));
    expect(() => assistantSources(assistant.spec, llama.spec, 'a')).toThrow(InvalidInputError);
    expect(() => assistantSources(assistant.spec, llama.spec, 'a')).toThrow(/not a Gemma 4 model/);
    await expect(openAssistant(memoryModelFiles('a', aFiles), llama)).rejects.toThrow(ModelFormatError);
    const text = config.text_config;
    if (typeof text !== 'object' || text === null) throw new Error('the fixture has a text_config');
    const edited = (top: Config, textEdits: Config = {}) => {
      const c = { ...config, ...top, text_config: { ...text, ...textEdits } };
      return openAssistant(memoryModelFiles('a', assistantFiles(c, weights)), opened);
    };
    await expect(edited({ backbone_hidden_size: 40 })).rejects.toThrow(ModelFormatError);
    await expect(edited({ backbone_hidden_size: 40 })).rejects.toThrow(/backbone_hidden_size.*40/);
    await expect(edited({}, { vocab_size: 97 })).rejects.toThrow(/vocab_size/);
    await expect(edited({}, { global_head_dim: 16 })).rejects.toThrow(
      /layer 1 \(full\) has heads of 16 over 2 KV heads, the target's layer \d+ 32 over 2/,
    );
    await expect(edited({}, { num_kv_shared_layers: 1 })).rejects.toThrow(/num_kv_shared_layers/);
    await expect(edited({ num_centroids: 7 })).rejects.toThrow(/num_centroids.*must divide/);
  });
});
