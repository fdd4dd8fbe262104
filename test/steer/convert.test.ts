// A steering file is tied to a model by `modelChecksum`; these check that the identity follows a
// model into its `weft convert` output and that a GGUF file has an identity of its own.
import { describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { modelChecksum, WEFT_WEIGHTS } from '../../src/model/load.js';
import { SteerMismatchError } from '../../src/steer/errors.js';
import { checkSteerModel, readSteerFile, writeSteerFile } from '../../src/steer/format.js';
import { fixtureFiles, ggufFixture } from '../fixtures/write.js';

/** Converts in memory: the output folder's files. */
async function converted(files: ReturnType<typeof memoryModelFiles>): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const chunks: Uint8Array[] = [];
  await convertModel(
    files,
    { quant: 'int4' },
    {
      file: async (name, bytes) => {
        out.set(name, bytes);
      },
      weights: async (chunk) => {
        chunks.push(chunk.slice());
      },
    },
  );
  const total = chunks.reduce((n, c) => n + c.byteLength, 0);
  const weights = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    weights.set(c, at);
    at += c.byteLength;
  }
  out.set(WEFT_WEIGHTS, weights);
  return out;
}

describe('modelChecksum across formats', () => {
  it('a converted model answers its source checksum, so its steering files apply', async () => {
    const source = memoryModelFiles('src', fixtureFiles('llama', 'f32', 3).files);
    const conv = memoryModelFiles('conv', await converted(source));
    const sum = await modelChecksum(source);
    expect(await modelChecksum(conv)).toBe(sum);
    const other = await modelChecksum(memoryModelFiles('other', fixtureFiles('llama', 'f32', 4).files));
    expect(other).not.toBe(sum);

    const v = new Float32Array(64).fill(1 / 8);
    const file = await readSteerFile(
      writeSteerFile({
        hidden: 64,
        modelChecksum: sum,
        layers: new Map([[0, v]]),
        shared: undefined,
        defaultLayers: [0],
        mode: 'ablate',
        scale: 1,
      }),
      'd.safetensors',
    );
    const convSum = await modelChecksum(conv);
    expect(() => checkSteerModel(file, convSum, 64)).not.toThrow();
    expect(() => checkSteerModel(file, other, 64)).toThrow(SteerMismatchError);
  });

  it('a GGUF file has its own checksum, kept by its conversion', async () => {
    const { bytes } = ggufFixture('qwen3', 'F16', 5);
    const gguf = memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));
    const sum = await modelChecksum(gguf);
    expect(sum).toMatch(/^[0-9a-f]{64}$/);
    expect(await modelChecksum(memoryModelFiles('conv', await converted(gguf)))).toBe(sum);
    const { bytes: other } = ggufFixture('qwen3', 'F16', 6);
    expect(await modelChecksum(memoryModelFiles('n.gguf', new Map([['n.gguf', other]])))).not.toBe(sum);
  });
});
