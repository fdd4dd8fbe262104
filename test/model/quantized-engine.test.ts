// The `rotate` option through createEngine's CPU reference path and the CLI's --rotate flag.
import { describe, expect, it } from 'vitest';
import { parseGenerateArgs } from '../../src/cli/main.js';
import { createEngine } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { roundedThrough, w8a8Inputs } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { formatOf, type Quant, type Rotation } from '../../src/quant/pack.js';
import { fixtureFiles } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = [5, 17, 99, 3, 250, 11];
const N = 6;
const files = () => memoryModelFiles('llama', fixtureFiles('llama', 'f32', 7).files);

/** Greedy continuation by the reference on the weights a runner with `quant` and `rotate` uses. */
async function expected(quant: Quant, rotate: Rotation): Promise<number[]> {
  const opened = await openModel(files());
  const tensors = roundedThrough(await readAllF32(opened.weights), formatOf(quant), rotate);
  const model = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64 });
  if (quant === 'w8a8') model.linearInput = w8a8Inputs(rotate);
  return greedy(model, PROMPT, N);
}

async function engineIds(quant: Quant, rotate: Rotation): Promise<number[]> {
  const engine = await createEngine({ model: files(), device: 'cpu', quant, rotate, contextLength: 64 });
  const out: number[] = [];
  for await (const c of engine.generate(PROMPT, { maxTokens: N })) out.push(...c.ids);
  await engine.unload();
  return out;
}

describe('createEngine rotate (CPU reference path)', () => {
  it.each([
    ['int2', 'hadamard'],
    ['w8a8', 'hadamard'],
    ['w8a8', 'none'],
  ] as const)(
    '%s with rotate %s generates what the reference on those weights does',
    async (quant, rotate) => {
      expect(await engineIds(quant, rotate)).toEqual(await expected(quant, rotate));
    },
  );

  it('rotation changes what int2 generates (the option reaches the weights)', async () => {
    // Seeded fixture, checked once: int2 rounding with and without rotation diverge within 6 tokens.
    const [rotated, plain] = [await expected('int2', 'hadamard'), await expected('int2', 'none')];
    expect(rotated).not.toEqual(plain);
    expect(await engineIds('int2', 'none')).toEqual(plain);
  });
});

describe('weft generate --rotate', () => {
  it("parses hadamard and none, defaults to undefined (the checkpoint's own), and rejects anything else", () => {
    const base = ['--model', 'm', '--prompt', 'x'];
    expect(parseGenerateArgs(base).rotate).toBeUndefined();
    expect(parseGenerateArgs([...base, '--rotate', 'hadamard']).rotate).toBe('hadamard');
    expect(parseGenerateArgs([...base, '--rotate', 'none']).rotate).toBe('none');
    expect(() => parseGenerateArgs([...base, '--rotate', 'givens'])).toThrow(InvalidInputError);
    expect(() => parseGenerateArgs([...base, '--rotate', 'givens'])).toThrow(/--rotate: "givens"/);
  });
});
