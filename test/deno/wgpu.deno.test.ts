// weft under wgpu (Deno's WebGPU, Firefox's stack, with the naga shader compiler) on lavapipe, in
// the GPU forms: the bundled trained model's text at f16, int4 and w8a8 equals the CPU reference's
// (as it does under Dawn), and speculation with a self-draft, the bundled draft model and the
// bundled draft head equals plain decoding, greedy and seeded. Run by `npm run test:deno`.
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { gpu } from '../helpers/gpu.js';
import { bundledModel } from '../helpers/models.js';

const PROMPT = 'And God said unto Moses,';

async function text(engine: Engine, o: GenerateOptions): Promise<{ text: string; ids: number[] }> {
  let t = '';
  const ids: number[] = [];
  for await (const c of engine.generate(PROMPT, o)) {
    t += c.text;
    ids.push(...c.ids);
  }
  return { text: t, ids };
}

describe("the bundled trained model under wgpu: the reference's text", () => {
  for (const quant of ['f16', 'int4', 'w8a8'] as const)
    it(`${quant}: 32 greedy tokens equal the CPU reference's`, async () => {
      const ctx = await gpu();
      expect('Deno' in globalThis).toBe(true);
      const onGpu = await createEngine({ model: await bundledModel('kjv-target'), quant, gpu: ctx });
      const onCpu = await createEngine({ model: await bundledModel('kjv-target'), quant, device: 'cpu' });
      const o: GenerateOptions = { maxTokens: 32, temperature: 0, drafter: 'none' };
      const [g, c] = [await text(onGpu, o), await text(onCpu, o)];
      console.log(`[wgpu] ${quant}: ${JSON.stringify(g.text)}`);
      expect(g.ids).toHaveLength(32);
      expect(g.ids).toEqual(c.ids);
      await onGpu.unload();
      await onCpu.unload();
    });
});

describe('speculation under wgpu is lossless', () => {
  const greedy: GenerateOptions = { maxTokens: 24, temperature: 0, treeBudget: 8 };
  const seeded: GenerateOptions = { maxTokens: 16, temperature: 1, seed: 5, treeBudget: 8 };
  const drafts = [
    ['self int4', async () => ({ self: 'int4' as const })],
    ['draft model', async () => ({ model: await bundledModel('kjv-draft') })],
    ['draft head', async () => ({ head: await bundledModel('kjv-head') })],
  ] as const;
  for (const [label, draft] of drafts)
    it(`${label}: greedy and seeded ids equal plain decoding`, async () => {
      const engine = await createEngine({
        model: await bundledModel('kjv-target'),
        quant: 'int4',
        draft: await draft(),
        gpu: await gpu(),
      });
      for (const o of [greedy, seeded]) {
        const plain = await text(engine, { ...o, drafter: 'none' });
        const spec = await text(engine, { ...o, drafter: 'draft' });
        expect(spec.ids).toEqual(plain.ids);
        console.log(
          `[wgpu] ${label} ${o.temperature ? 'T=1' : 'greedy'}: ${engine.lastStats!.tokens_per_pass.toFixed(2)} tokens per pass`,
        );
        // The drafter drafted and some drafts were accepted (all rejected gives exactly 1).
        expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1);
      }
      await engine.unload();
    });
});
