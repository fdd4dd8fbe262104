// A quantized GGUF through createEngine's CPU reference path: placed as stored by default, so the
// reference runs on the file's own blocks dequantized with llama.cpp's formulas (dequantizeGgml),
// each matrix in its own format when the file mixes types (a Q4_K_M file's Q4_K and Q6_K); what
// has no weft layout (BF16) is rounded to the linears' format.
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { referenceTensors, roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { type GgufVariant, ggufFixture, sameF32 } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = [5, 17, 99, 3, 250, 11];
const N = 6;

async function engineIds(bytes: Uint8Array): Promise<number[]> {
  const model = memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));
  const engine = await createEngine({ model, device: 'cpu', contextLength: 64 });
  const out: number[] = [];
  for await (const c of engine.generate(PROMPT, { maxTokens: N })) out.push(...c.ids);
  await engine.unload();
  return out;
}

describe('createEngine on a quantized GGUF (CPU reference path)', () => {
  it.each([
    ['Q4_0', undefined],
    ['Q8_0', undefined],
    [
      'Q4_0 with a Q8_0 head and an F16 embedding',
      (n: string) =>
        n === 'lm_head.weight' ? 'Q8_0' : n === 'model.embed_tokens.weight' ? 'F16' : undefined,
    ],
  ] as const)('%s: greedy ids of the dequantized blocks', async (what, types) => {
    const variant: GgufVariant = what.startsWith('Q8_0') ? 'Q8_0' : 'Q4_0';
    const { bytes } = ggufFixture('llama', variant, 9, types ? { types } : {});
    const opened = await openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));
    const dequantized = await readAllF32(opened.weights);
    // Every matrix is placed as stored, so the reference is the dequantized file (up to the sign
    // of a q4_0 zero, see repackRows).
    const placed = await referenceTensors(opened, opened.packed!.format, 'none');
    const unsigned = (x: Float32Array) => x.map((v) => (v === 0 ? 0 : v));
    for (const [name, t] of Object.entries(placed))
      expect(sameF32(unsigned(t.data), unsigned(dequantized[name]!.data)), name).toBeUndefined();
    const ref = new ReferenceRunner(opened.spec, mapWeights(dequantized), {
      capacity: 64,
    });
    expect(await engineIds(bytes)).toEqual(greedy(ref, PROMPT, N));
  });

  it('Q4_K_M: the reference is the file dequantized, Q4_K and Q6_K matrices alike', async () => {
    const { bytes } = ggufFixture('llama', 'Q4_K_M', 9);
    const opened = await openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));
    expect(opened.packed).toEqual({ format: 'int4', rotation: 'none' });
    expect(opened.weights.storedFormat?.('lm_head.weight')).toBe('q6_k');
    const dequantized = await readAllF32(opened.weights);
    const got = await referenceTensors(opened, 'int4', 'none');
    for (const [name, t] of Object.entries(got))
      expect(sameF32(t.data, dequantized[name]!.data), name).toBeUndefined();
    const ref = new ReferenceRunner(opened.spec, mapWeights(got), { capacity: 64 });
    expect(await engineIds(bytes)).toEqual(greedy(ref, PROMPT, N));
  });

  it('Q4_K with a BF16 head: the reference keeps every stored matrix and rounds the head alone to int4', async () => {
    const types = (n: string) => (n === 'lm_head.weight' ? 'BF16' : undefined);
    const { bytes } = ggufFixture('llama', 'Q4_K', 9, { types });
    const opened = await openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));
    expect(opened.packed).toEqual({ format: 'int4', rotation: 'none' });
    const dequantized = await readAllF32(opened.weights);
    const got = await referenceTensors(opened, 'int4', 'none');
    for (const [name, t] of Object.entries(got)) {
      const stored = name !== 'lm_head.weight';
      expect(sameF32(t.data, dequantized[name]!.data) === undefined, name).toBe(stored);
    }
    const head = roundedThrough({ h: dequantized['lm_head.weight']! }, 'int4').h!;
    expect(sameF32(got['lm_head.weight']!.data, head.data)).toBeUndefined();
    // Another quant rounds every matrix (int8 of a Q4_K block is not the block).
    const int8 = await referenceTensors(opened, 'int8', 'none');
    expect(
      sameF32(
        int8['model.layers.0.self_attn.q_proj.weight']!.data,
        dequantized['model.layers.0.self_attn.q_proj.weight']!.data,
      ),
    ).toBeDefined();
    const ref = new ReferenceRunner(opened.spec, mapWeights(got), { capacity: 64 });
    expect(await engineIds(bytes)).toEqual(greedy(ref, PROMPT, N));
  });
});
