// `weft convert` and `weft export-gguf` end to end through bin/weft.js (built by `npm run build`),
// generating in headless Chromium: a converted folder gives the same greedy ids as the source at
// the same --quant, a GGUF file loads with --model, and an exported GGUF gives the source's ids.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { ggufFixture } from '../fixtures/write.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { weft } from '../helpers/cli.js';
import { greedy } from '../helpers/reference.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-convert-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const PROMPT = [5, 17, 99, 3, 250, 11, 42];

/** Greedy ids of `weft generate --json` (16 tokens). */
async function generate(model: string, quant: string): Promise<number[]> {
  const out = await weft([
    'generate',
    '--model',
    model,
    '--prompt-ids',
    PROMPT.join(','),
    '--max-tokens',
    '16',
    '--quant',
    quant,
    '--json',
  ]);
  expect(out.stderr).toBe('');
  expect(out.code).toBe(0);
  const json = JSON.parse(out.stdout) as { ids: number[] };
  return json.ids;
}

describe('weft convert', () => {
  it('int4: generate on the converted folder gives the same greedy ids as on the source at --quant int4', async () => {
    const src = join(dir, 'qwen2');
    await writeFixtureDir(src, 'qwen2', 'f32', 21);
    const out = join(dir, 'qwen2-int4');
    const conv = await weft(['convert', src, out, '--quant', 'int4']);
    expect(conv.code).toBe(0);
    expect(conv.stderr).toMatch(/weft convert: pack 100%/);
    expect(conv.stderr).toMatch(/weft convert: wrote .*qwen2-int4/);
    const want = await generate(src, 'int4');
    expect(want.length).toBeGreaterThan(0);
    expect(await generate(out, 'int4')).toEqual(want);
  });

  it('bad arguments exit 1 with one line naming the argument', async () => {
    const out = await weft(['convert', dir, join(dir, 'x'), '--quant', 'int5']);
    expect(out.code).toBe(1);
    expect(out.stderr).toBe('weft: InvalidInputError: --quant: "int5" is not one of int8, int4, int2\n');
  });
});

describe('weft generate --model file.gguf', () => {
  it('a Q8_0 GGUF generates the reference greedy ids of its own (dequantized) tensors', async () => {
    const { bytes } = ggufFixture('llama', 'Q8_0', 22);
    const gguf = join(dir, 'tiny-llama.Q8_0.gguf');
    await writeFile(gguf, bytes);
    const files = await pathModel(gguf);
    const opened = await openModel(files);
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const want = greedy(ref, PROMPT, 16);
    await files.close?.();
    const got = await generate(gguf, 'f32');
    // The GGUF's EOS may end generation early; compare what was generated.
    expect(got.length).toBeGreaterThan(0);
    expect(got).toEqual(want.slice(0, got.length));
  });
});

describe('weft export-gguf', () => {
  it('f16: the exported file gives the same greedy ids as the source at --quant f16', async () => {
    const src = join(dir, 'qwen3');
    await writeFixtureDir(src, 'qwen3', 'f32', 23);
    const out = join(dir, 'qwen3.f16.gguf');
    const exp = await weft(['export-gguf', src, out, '--type', 'f16']);
    expect(exp.code).toBe(0);
    expect(exp.stderr).toMatch(/wrote .*qwen3\.f16\.gguf/);
    expect(await generate(out, 'f16')).toEqual(await generate(src, 'f16'));
  });
});
