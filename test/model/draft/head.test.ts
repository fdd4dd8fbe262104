import { describe, expect, it } from 'vitest';
import { type CreateEngineOptions, createEngine } from '../../../src/engine/create.js';
import type { Engine } from '../../../src/engine/engine.js';
import type { GenerateOptions } from '../../../src/engine/types.js';
import { ModelFormatError } from '../../../src/formats/errors.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { HeadRunner, headSpecFromConfig, openDraftHead } from '../../../src/model/draft/head.js';
import type { ModelFamily } from '../../../src/model/families/index.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY } from '../../../src/model/runner.js';
import { mapWeights } from '../../../src/model/weights.js';
import { fixtureFiles, headFixtureFiles } from '../../fixtures/write.js';

const FAMILIES: ModelFamily[] = ['llama', 'qwen2', 'qwen3'];
const PROMPTS = [
  [5, 17, 99, 3, 250, 11, 42],
  [7, 7, 7, 8, 9, 7, 7, 7, 8],
  [300, 12, 45, 12, 45, 12],
];

function engineFor(family: ModelFamily, draft?: CreateEngineOptions['draft']): Promise<Engine> {
  const { files } = fixtureFiles(family, 'f32', 11);
  return createEngine({
    model: memoryModelFiles(family, files),
    device: 'cpu',
    quant: 'f32',
    contextLength: 128,
    ...(draft ? { draft } : {}),
  });
}

async function ids(engine: Engine, prompt: number[], o: GenerateOptions): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
  return out;
}

/** A target on the CPU reference and a head over it, both from the fixtures. */
async function pair(family: ModelFamily, stride = 2) {
  const { files, tensors } = fixtureFiles(family, 'f32', 11);
  const opened = await openModel(memoryModelFiles(family, files));
  const target = new ReferenceRunner(
    opened.spec,
    mapWeights(Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }]))),
    { capacity: 64 },
  );
  const head = await openDraftHead(memoryModelFiles('head', headFixtureFiles(family, 3, stride)), opened);
  return { opened, target, head };
}

describe('draft head format', () => {
  const config = () => JSON.parse(new TextDecoder().decode(headFixtureFiles('llama').get('config.json')!));

  it('reads the config and refuses bad fields, naming the file, the field and the value', () => {
    expect(headSpecFromConfig(config(), 'h/config.json').draftVocab).toBe(256);
    const bad = (edit: (c: Record<string, unknown>) => void) => {
      const c = config();
      edit(c);
      return () => headSpecFromConfig(c, 'h/config.json');
    };
    expect(bad((c) => (c.model_type = 'llama'))).toThrow('h/config.json: model_type = "llama"');
    expect(bad((c) => (c.hidden_size = 0))).toThrow('hidden_size = 0: must be a positive integer');
    expect(bad((c) => (c.num_key_value_heads = 3))).toThrow(/num_key_value_heads = 3: must divide/);
    expect(bad((c) => (c.draft_vocab_size = 9999))).toThrow(/draft_vocab_size = 9999: exceeds/);
    expect(bad((c) => delete c.target)).toThrow(ModelFormatError);
  });

  it('refuses a head trained for another target, a bad d2t and a missing or misshapen tensor', async () => {
    const { files } = fixtureFiles('llama', 'f32', 11);
    const opened = await openModel(memoryModelFiles('llama', files));
    const edited = (edit: (c: Record<string, unknown>) => void) => {
      const f = headFixtureFiles('llama');
      const c = JSON.parse(new TextDecoder().decode(f.get('config.json')!));
      edit(c);
      f.set('config.json', new TextEncoder().encode(JSON.stringify(c)));
      return openDraftHead(memoryModelFiles('h', f), opened);
    };
    await expect(edited((c) => ((c.target as Record<string, number>).num_hidden_layers = 5))).rejects.toThrow(
      'h/config.json: target.num_hidden_layers = 5: the head was trained for another target (this one has 2)',
    );
    await expect(edited((c) => (c.intermediate_size = 40))).rejects.toThrow(
      /layer\.mlp\.gate_proj\.weight\.shape = \[48,64\]: expected \[40, 64\]/,
    );
    // d2t must be strictly increasing ids of the target's vocabulary.
    const f = headFixtureFiles('llama');
    const bytes = f.get('model.safetensors')!.slice();
    const view = new DataView(bytes.buffer);
    const d2tAt = bytes.length - 256 * 4; // d2t is the last tensor
    view.setInt32(d2tAt + 5 * 4, 2, true);
    f.set('model.safetensors', bytes);
    await expect(openDraftHead(memoryModelFiles('h', f), opened)).rejects.toThrow(
      /d2t\[5\] = 2: draft ids must be strictly increasing target ids in \[0, 512\)/,
    );
  });
});

describe('HeadRunner', () => {
  it('reads the target features: context entries change with them, tree rows equal their paths run alone', async () => {
    const { target, head } = await pair('qwen3');
    const context = [5, 17, 99, 3, 250, 11];
    target.prefill(context.slice(0, -1)); // the last token is the target's latest, not yet scored
    const runner = new HeadRunner(head, target, 64);
    await runner.forward({ tokens: context }, GREEDY, 'last');
    runner.commit(context.map((_, i) => i));
    const V = runner.spec.vocabSize;
    // A tree below the context (depth first): two children of its last token, one grandchild.
    const tree = { tokens: [40, 8, 42], parents: [-1, 0, -1] };
    await runner.forward(tree, GREEDY, 'all');
    const all = await runner.lastLogits();
    runner.trim(context.length);
    // Each node again, along its path only, one forward per depth (the parent's output feeds it).
    for (const [node, path] of [
      [0, [40]],
      [1, [40, 8]],
      [2, [42]],
    ] as const) {
      for (const [d, t] of path.entries()) {
        await runner.forward({ tokens: [t] }, GREEDY, 'last');
        if (d < path.length - 1) runner.commit([0]);
      }
      const alone = await runner.lastLogits();
      expect(Array.from(alone), `node ${node}`).toEqual(Array.from(all.subarray(node * V, (node + 1) * V)));
      runner.trim(context.length);
    }
    // Only the draft vocabulary (every second id) gets a finite logit.
    expect(all.subarray(0, V).every((x, id) => (id % 2 === 0) === Number.isFinite(x))).toBe(true);
    // The context entries read the target's features: another target context, other logits.
    await runner.forward(tree, GREEDY, 'all');
    target.trim(0);
    target.prefill([5, 17, 99, 3, 251]);
    runner.trim(0);
    await runner.forward({ tokens: [5, 17, 99, 3, 251, 11] }, GREEDY, 'last');
    runner.commit([0, 1, 2, 3, 4, 5]);
    await runner.forward(tree, GREEDY, 'all');
    expect(Array.from(await runner.lastLogits())).not.toEqual(Array.from(all));
  });

  it('throws on a target that keeps no features and on constrained rows', async () => {
    const { target, head } = await pair('llama');
    const { features: _, ...noFeatures } = target;
    expect(() => new HeadRunner(head, { ...noFeatures, spec: target.spec } as never)).toThrow(
      /does not keep its features/,
    );
    const runner = new HeadRunner(head, target, 64);
    await expect(runner.forward({ tokens: [1], masks: new Uint32Array(16) }, GREEDY, 'last')).rejects.toThrow(
      'draft head: constrained rows are not supported',
    );
  });
});

describe.each(FAMILIES)('speculation with a draft head on the CPU reference, %s', (family) => {
  it('greedy: every budget gives the plain greedy ids, with { head } and with a { model } that is a head', {
    timeout: 120_000,
  }, async () => {
    const headFiles = () => memoryModelFiles('head', headFixtureFiles(family, 3));
    const engine = await engineFor(family, { head: headFiles() });
    const viaModel = await engineFor(family, { model: headFiles() });
    for (const prompt of PROMPTS) {
      const want = await ids(engine, prompt, { maxTokens: 24, drafter: 'none' });
      // The head drafts: every step verifies a tree of up to the budget.
      let drafted = 0;
      for await (const c of engine.generate(prompt, { maxTokens: 24, treeBudget: 16 }))
        drafted += c.tree?.tokens.length ?? 0;
      expect(drafted).toBeGreaterThan(24);
      for (const budget of [4, 16]) {
        expect(await ids(engine, prompt, { maxTokens: 24, treeBudget: budget }), `budget ${budget}`).toEqual(
          want,
        );
        expect(engine.lastStats!.tokens_per_pass).toBeGreaterThanOrEqual(1);
      }
      expect(await ids(viaModel, prompt, { maxTokens: 24, treeBudget: 8 })).toEqual(want);
    }
  });
});

describe('speculative sampling with a draft head', () => {
  it('same seed at T = 1: speculative and plain sampling agree over 200 seeds', {
    timeout: 120_000,
  }, async () => {
    const engine = await engineFor('qwen3', { head: memoryModelFiles('head', headFixtureFiles('qwen3', 3)) });
    for (let seed = 0; seed < 200; seed++) {
      const o: GenerateOptions = { maxTokens: 8, temperature: 1, seed };
      const prompt = PROMPTS[seed % 3]!;
      const plain = await ids(engine, prompt, { ...o, drafter: 'none' });
      expect(await ids(engine, prompt, { ...o, treeBudget: 8 }), `seed ${seed}`).toEqual(plain);
    }
  });
});
