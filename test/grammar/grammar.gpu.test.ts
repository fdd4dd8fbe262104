// Constrained decoding on WebGPU: the grammar's mask goes to the GPU with each step and the ids
// equal the CPU reference's under the same masks (greedy and seeded), for a fixture model with a
// byte-level tokenizer.
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { fixtureFiles, qwen35FixtureFiles } from '../fixtures/write.js';
import { gpu } from '../helpers/gpu.js';

async function run(engine: Engine, o: GenerateOptions): Promise<{ ids: number[]; text: string }> {
  const ids: number[] = [];
  let text = '';
  for await (const c of engine.generate([5, 17, 99, 3], o)) {
    ids.push(...c.ids);
    text += c.text;
  }
  return { ids, text };
}

/**
 * The GPU's ids under each case's constraint equal the CPU reference's, the text obeys it, plain
 * constrained decoding's steps read back 4 bytes, and speculation with jump-forward (alone, with a
 * self-draft or n-grams grown under the grammar) changes no id.
 */
async function expectConstrained(name: string, files: Map<string, Uint8Array>, cases: GenerateOptions[]) {
  const make = async (device: 'cpu' | 'gpu') =>
    createEngine({
      model: memoryModelFiles(name, files),
      quant: 'f32',
      contextLength: 128,
      ...(device === 'cpu'
        ? { device: 'cpu' as const }
        : { gpu: await gpu(), draft: { self: 'int4' as const } }),
    });
  const [onGpu, onCpu] = [await make('gpu'), await make('cpu')];
  // Decode tokens and passes over the cases, with jump-forward alone and with the self-draft.
  const sums = { none: { tokens: 0, passes: 0 }, draft: { tokens: 0, passes: 0 } };
  for (const o of cases) {
    const g = await run(onGpu, { ...o, drafter: 'none', jumpForward: false });
    const c = await run(onCpu, { ...o, drafter: 'none', jumpForward: false });
    expect(g.ids, JSON.stringify(o)).toEqual(c.ids);
    if (o.regex) expect(g.text).toMatch(/^[a-z]{3,9}( [0-9]{1,3})?$/);
    else
      expect(JSON.parse(g.text)).toMatchObject({
        a: expect.any(Number),
        b: expect.stringMatching(/^then?$/),
      });
    // The decode steps write one mask each and still read back only the sampled id.
    expect(onGpu.lastStats!.readback_bytes_per_pass).toBe(4);
    // Speculation under the grammar (drafts grown under it, every node masked; jump-forward's forced
    // chains) changes no id.
    for (const drafter of ['none', 'draft', 'ngram'] as const) {
      expect(
        (await run(onGpu, { ...o, drafter, treeBudget: 8 })).ids,
        `${drafter} + jump-forward ${JSON.stringify(o)}`,
      ).toEqual(g.ids);
      const d = onGpu.lastStats!.decode_counts!;
      if (drafter !== 'ngram') {
        sums[drafter].tokens += d.tokens;
        sums[drafter].passes += d.passes;
      }
    }
  }
  // Jump-forward alone already emits more than one token per pass (the grammar's forced tokens), so
  // the self-draft is held to more than that: its drafts grown under the grammar are accepted (1.7
  // to 6 times jump-forward's tokens per pass, measured over each call's cases). Drafts all
  // rejected would leave jump-forward's figure. (The n-grams: equality only; the random fixtures'
  // texts do not repeat.)
  const [jump, drafted] = [sums.none.tokens / sums.none.passes, sums.draft.tokens / sums.draft.passes];
  console.log(
    `[grammar] ${name}: tokens per decode pass, jump-forward alone ${jump.toFixed(2)}, with the self-draft ${drafted.toFixed(2)}`,
  );
  expect(drafted).toBeGreaterThan(1.25 * jump);
  await onGpu.unload();
  await onCpu.unload();
}

const schema = {
  type: 'object',
  properties: { a: { type: 'integer', minimum: 0, maximum: 999 }, b: { enum: ['the', 'then'] } },
  required: ['a', 'b'],
};

describe('constrained decoding on WebGPU', () => {
  it('GPU ids equal the CPU reference under the grammar mask, greedy and seeded, and speculative ids equal plain', {
    timeout: 120_000,
  }, async () => {
    const cases: GenerateOptions[] = [
      { jsonSchema: schema, maxTokens: 40 },
      { jsonSchema: schema, maxTokens: 40, temperature: 1, seed: 3 },
      { regex: '[a-z]{3,9}( [0-9]{1,3})?', maxTokens: 16, temperature: 1, seed: 7 },
    ];
    await expectConstrained('llama', fixtureFiles('llama', 'f32', 3).files, cases);
  });

  it('the same on a hybrid model (Qwen3.5: Gated DeltaNet layers), greedy', {
    timeout: 120_000,
  }, async () => {
    await expectConstrained('qwen35', qwen35FixtureFiles(3).files, [{ jsonSchema: schema, maxTokens: 40 }]);
  });

  it.each(['gemma3', 'gemma4', 'lfm2', 'ministral3'] as const)(
    'the same on %s, greedy',
    { timeout: 120_000 },
    async (family) => {
      await expectConstrained(family, fixtureFiles(family, 'f32', 3).files, [
        { jsonSchema: schema, maxTokens: 40 },
      ]);
    },
  );
});
