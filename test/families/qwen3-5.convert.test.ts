// `weft convert` on a Qwen3.5 checkpoint as published (vision-language wrapper): the converted
// folder loads, holds the language model and its MTP layer (not the vision tower), and generates
// what the source generates at the same precision, with and without MTP drafts.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConvertArgs, runConvert } from '../../src/cli/convert.js';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { qwen35FixtureFiles } from '../fixtures/write.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-qwen35-convert-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function ids(engine: Engine, prompt: number[], n: number): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(prompt, { maxTokens: n, temperature: 0 })) out.push(...c.ids);
  return out;
}

describe('weft convert, Qwen3.5', () => {
  it.each(['int8', 'int4', 'int2'] as const)(
    '%s: the converted folder generates what the source generates at that precision',
    async (quant) => {
      const src = join(dir, `src-${quant}`);
      const out = join(dir, `out-${quant}`);
      const { files } = qwen35FixtureFiles(9);
      await mkdir(src, { recursive: true });
      for (const [name, bytes] of files) await writeFile(join(src, name), bytes);
      await runConvert(parseConvertArgs([src, out, '--quant', quant]), () => {});
      const opened = await openModel(await pathModel(out));
      expect(opened.format).toBe('weft-q');
      expect(opened.spec.family).toBe('qwen3_5');
      const names = [...opened.weights.tensors.keys()];
      expect(names.some((n) => n.startsWith('model.visual.'))).toBe(false);
      expect(names).toContain('model.layers.0.linear_attn.conv1d.weight');
      expect(names).toContain('mtp.fc.weight'); // the MTP layer comes along, for draft: 'mtp'
      const prompt = [5, 17, 99, 3, 250, 11];
      const a = await createEngine({ model: await pathModel(src), device: 'cpu', quant, contextLength: 64 });
      const b = await createEngine({
        model: await pathModel(out),
        device: 'cpu',
        contextLength: 64,
        draft: 'mtp',
      });
      const plain = await ids(b, prompt, 12);
      expect(plain).toEqual(await ids(a, prompt, 12));
      const drafted: number[] = [];
      for await (const c of b.generate(prompt, { maxTokens: 12, temperature: 0, drafter: 'draft' }))
        drafted.push(...c.ids);
      expect(drafted).toEqual(plain);
      await a.unload();
      await b.unload();
    },
  );
});
