import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { openSafetensors, writeSafetensors } from '../../src/formats/safetensors.js';
import {
  convert,
  openWeftCheckpoint,
  safetensorsReader,
  sourceChecksum,
  type TensorReader,
} from '../../src/formats/weft-checkpoint.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { dequantize, quantize } from '../../src/quant/formats.js';
import { randomTensors, safetensorsBytes, sameF32, tinyConfig } from '../fixtures/write.js';

async function convertToBytes(source: TensorReader, options: Parameters<typeof convert>[2]) {
  const chunks: Uint8Array[] = [];
  const metadata = await convert(
    source,
    (c) => {
      chunks.push(c.slice());
    },
    options,
  );
  const out = new Uint8Array(chunks.reduce((a, c) => a + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return { bytes: out, metadata };
}

async function fixture(family: 'llama' | 'qwen3', seed = 1) {
  const spec = specFromConfig(tinyConfig(family));
  const tensors = randomTensors(spec, seed);
  const ck = await openSafetensors(memoryBytes(safetensorsBytes(tensors, 'F32'), 'src.safetensors'));
  return { spec, tensors, reader: safetensorsReader(ck) };
}

describe('weft-q checkpoints', () => {
  for (const quant of ['int8', 'int4', 'int2', 'f16'] as const) {
    it(`${quant}: packed matrices equal quantize() of the source, other tensors are exact`, async () => {
      const { tensors, reader } = await fixture('qwen3');
      const { bytes, metadata } = await convertToBytes(reader, { quant });
      expect(metadata.format).toBe('weft-q');
      expect(metadata.version).toBe('3');
      const ck = await openWeftCheckpoint(memoryBytes(bytes, 'w.safetensors'));
      expect(ck.metadata.source_sha256).toMatch(/^[0-9a-f]{64}$/);
      expect([...ck.tensors.keys()].sort()).toEqual(tensors.map((t) => t.name).sort());
      for (const t of tensors) {
        expect(ck.tensors.get(t.name)!.shape).toEqual(t.shape);
        const scheme = ck.schemes[t.name];
        if (scheme === undefined) {
          expect(sameF32(await ck.readF32(t.name), t.data)).toBeUndefined();
          continue;
        }
        const isEmbed = t.name === 'model.embed_tokens.weight';
        expect(scheme.format).toBe(isEmbed ? 'f16' : quant);
        const want = quantize(t.data, t.shape[0]!, t.shape[1]!, scheme.format);
        const got = await ck.readMatrix(t.name);
        expect(got).toEqual(want);
        expect(sameF32(await ck.readF32(t.name), dequantize(want))).toBeUndefined();
      }
    });
  }

  it('the source checksum depends on content only', async () => {
    const a = await fixture('llama', 3);
    const b = await fixture('llama', 3);
    const c = await fixture('llama', 4);
    expect(await sourceChecksum(a.reader)).toBe(await sourceChecksum(b.reader));
    expect(await sourceChecksum(a.reader)).not.toBe(await sourceChecksum(c.reader));
  });

  it('refuses shapes the format cannot pack before writing anything', async () => {
    // An embedding of odd width cannot be stored as f16 (two halves per word).
    const reader: TensorReader = {
      tensors: new Map([['model.embed_tokens.weight', { shape: [4, 7] }]]),
      readF32: async () => new Float32Array(28),
    };
    let written = 0;
    const e = await convert(
      reader,
      () => {
        written++;
      },
      { quant: 'int4' },
    ).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ModelFormatError);
    expect(String(e)).toMatch(/cannot pack as f16/);
    expect(written).toBe(0);
  });

  it('refuses files that are not weft-q or whose schemes do not match the tensors', async () => {
    const plain = writeSafetensors([{ name: 'a', dtype: 'F32', shape: [1], data: new Uint8Array(4) }], {
      format: 'pt',
    });
    await expect(openWeftCheckpoint(memoryBytes(plain, 'p'))).rejects.toThrow(
      /p: __metadata__.format = "pt"/,
    );
    const bad = writeSafetensors([{ name: 'w', dtype: 'I32', shape: [2, 1], data: new Uint8Array(8) }], {
      format: 'weft-q',
      version: '3',
      schemes: JSON.stringify({ w: { format: 'int8', rows: 2, cols: 16, shape: [2, 16], rotation: 'none' } }),
    });
    // int8 [2, 16] packs to 8 data words (one group of 32, padded) and needs w.scales.
    await expect(openWeftCheckpoint(memoryBytes(bad, 'b'))).rejects.toThrow(
      /b: w = \["I32",2,1\]: expected I32 \[8\]/,
    );
    const notJson = writeSafetensors([], { format: 'weft-q', version: '3', schemes: '{' });
    await expect(openWeftCheckpoint(memoryBytes(notJson, 'j'))).rejects.toThrow(ModelFormatError);
  });
});
