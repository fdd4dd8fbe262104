// Speculative decoding on the bundled demo pair (models/kjv-target, models/kjv-draft) through the
// CPU reference: the figure of merit, self-speculation at budget 16 greedy, reaches at
// least 3 tokens per target pass on held-out prompts and gives exactly the plain greedy ids.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { type CreateEngineOptions, createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { pathModel } from '../../src/formats/io/node-file.js';

/** Held-out prompts as bench:spec picks them: the first 8 words of evenly spaced long verses. */
async function heldoutPrompts(n: number): Promise<string[]> {
  const lines = (await readFile('models/kjv-heldout.txt', 'utf8')).split('\n').filter((l) => l.length > 40);
  return Array.from({ length: n }, (_, i) =>
    lines[Math.floor(((i + 0.5) * lines.length) / n)]!.split(' ').slice(0, 8).join(' '),
  );
}

async function demoEngine(draft: CreateEngineOptions['draft']): Promise<Engine> {
  return createEngine({
    model: await pathModel('models/kjv-target'),
    device: 'cpu',
    quant: 'f16',
    contextLength: 256,
    draft,
  });
}

async function run(engine: Engine, prompt: string, o: GenerateOptions) {
  const ids: number[] = [];
  for await (const c of engine.generate(prompt, o)) ids.push(...c.ids);
  return { ids, perPass: engine.lastStats!.tokens_per_pass };
}

describe('speculative decoding on the bundled demo pair', () => {
  it('self-int4 at budget 16, greedy: at least 3 tokens per pass, the plain greedy ids', {
    timeout: 120_000,
  }, async () => {
    const prompts = await heldoutPrompts(3);
    const self = await demoEngine({ self: 'int4' });
    const small = await demoEngine({ model: await pathModel('models/kjv-draft'), quant: 'f16' });
    const perPass = { self: 0, small: 0 };
    for (const prompt of prompts) {
      const plain = await run(self, prompt, { maxTokens: 32, drafter: 'none' });
      expect(plain.perPass).toBe(1);
      const spec = await run(self, prompt, { maxTokens: 32, treeBudget: 16 });
      expect(spec.ids, prompt).toEqual(plain.ids);
      perPass.self += spec.perPass / prompts.length;
      const drafted = await run(small, prompt, { maxTokens: 32, treeBudget: 16 });
      expect(drafted.ids, prompt).toEqual(plain.ids);
      perPass.small += drafted.perPass / prompts.length;
    }
    console.log(
      `[demo pair] tokens per pass at budget 16, greedy, 32 tokens x ${prompts.length} prompts: self-int4 ${perPass.self.toFixed(2)}, kjv-draft ${perPass.small.toFixed(2)}`,
    );
    expect(perPass.self).toBeGreaterThanOrEqual(3);
    // The separate 0.89M-parameter draft is weaker than the target's own int4 weights, but still a drafter.
    expect(perPass.small).toBeGreaterThan(1.5);
    await self.unload();
    await small.unload();
  });
});
