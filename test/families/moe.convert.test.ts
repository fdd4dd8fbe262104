// weft convert on the mixtures: a folder at int4 packs every expert (and the shared expert), keeps
// the routers f32, reads back as the same spec, and its CPU reference (the blocks as stored)
// gives the logits of the source rounded through int4.
import { describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { referenceTensors, roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { configFixtureFiles, tinyConfig } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';

async function convert(files: Map<string, Uint8Array>, name: string) {
  const out = new Map<string, Uint8Array>();
  const chunks: Uint8Array[] = [];
  await convertModel(
    memoryModelFiles(name, files),
    { quant: 'int4' },
    {
      file: async (n, bytes) => {
        out.set(n, bytes);
      },
      weights: async (chunk) => {
        chunks.push(chunk.slice());
      },
    },
  );
  const weights = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    weights.set(c, at);
    at += c.length;
  }
  out.set(WEFT_WEIGHTS, weights);
  return openModel(memoryModelFiles(`${name}-int4`, out));
}

describe('weft convert on the mixtures of experts', () => {
  it.each(['qwen3_moe', 'lfm2_moe', 'qwen3_5_moe'] as const)(
    '%s: an int4 folder packs the experts, keeps the routers f32, and its reference equals the source at int4',
    async (family) => {
      const { files } = configFixtureFiles(tinyConfig(family), 7);
      const source = await openModel(memoryModelFiles(family, files));
      const converted = await convert(files, family);
      expect(converted.spec).toEqual(source.spec);
      const names = [...converted.weights.tensors.keys()];
      const experts = names.filter((n) => /\.experts\.\d+\./.test(n));
      expect(experts.length).toBeGreaterThan(0);
      for (const n of experts) expect(converted.weights.storedFormat?.(n), n).toBe('int4');
      for (const n of names.filter((n) => /\.(gate|shared_expert_gate)\.weight$/.test(n)))
        expect(converted.weights.storedFormat?.(n), n).toBeUndefined();
      const prompt = [5, 17, 99, 3, 250, 11, 42, 8];
      const rounded = roundedThrough(await readAllF32(source.weights), 'int4');
      const want = new ReferenceRunner(source.spec, mapWeights(rounded), { capacity: 64 }).logitsFor(prompt);
      const tensors = await referenceTensors(converted, 'int4', 'none');
      const got = new ReferenceRunner(converted.spec, mapWeights(tensors), { capacity: 64 }).logitsFor(
        prompt,
      );
      expect(relErr(got, want)).toBeLessThan(1e-5);
    },
  );
});
