import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { blobBytes, memoryBytes, urlBytes } from '../../src/formats/io/bytes.js';
import { pathBytes } from '../../src/formats/io/node-file.js';
import {
  openSafetensors,
  openShardedSafetensors,
  readTensorBytes,
  readTensorChunks,
  readTensorF32,
  writeSafetensors,
} from '../../src/formats/safetensors.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../src/gpu/half.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { withGenerationConfig } from '../../src/model/spec/generation.js';
import { checkTensors } from '../../src/model/tensors.js';
import { randomTensors, rng, roundTrip, safetensorsBytes, sameF32, tinyConfig } from '../fixtures/write.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';

/** A safetensors file built byte by byte from a header object and raw data, for malformed cases. */
function rawFile(header: unknown, data: Uint8Array, lengthOverride?: bigint): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.byteLength + data.byteLength);
  new DataView(out.buffer).setBigUint64(0, lengthOverride ?? BigInt(json.byteLength), true);
  out.set(json, 8);
  out.set(data, 8 + json.byteLength);
  return out;
}

async function formatError(p: Promise<unknown>): Promise<ModelFormatError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ModelFormatError) return e;
    throw e;
  }
  throw new Error('expected a ModelFormatError');
}

describe('16-bit conversions', () => {
  it('decodes known binary16 and bfloat16 patterns', () => {
    expect(f16BitsToF32(0x3c00)).toBe(1);
    expect(f16BitsToF32(0xc000)).toBe(-2);
    expect(f16BitsToF32(0x7bff)).toBe(65504);
    expect(f16BitsToF32(0x0001)).toBe(2 ** -24);
    expect(f16BitsToF32(0x7c00)).toBe(Number.POSITIVE_INFINITY);
    expect(f16BitsToF32(0x7e00)).toBeNaN();
    expect(bf16BitsToF32(0x3f80)).toBe(1);
    expect(bf16BitsToF32(0xc0490)).toBe(bf16BitsToF32(0x0490));
    expect(bf16BitsToF32(0x4049)).toBeCloseTo(3.140625, 10);
  });
  it('encodes every half exactly and rounds ties to even', () => {
    for (let h = 0; h < 0x10000; h++) {
      const v = f16BitsToF32(h);
      if (Number.isNaN(v)) expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(v)))).toBe(true);
      else if (!(v === 0 && h === 0x8000)) expect(f32ToF16Bits(v)).toBe(h);
    }
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie, even stays
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie, odd rounds up
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // rounds past the largest half
    expect(f32ToF16Bits(2 ** -25)).toBe(0); // tie to even zero
    expect(f32ToF16Bits(2 ** -25 * 1.5)).toBe(1);
  });
  it('picks the nearest half for random f32 values (checked against both neighbours)', () => {
    const r = rng(7);
    for (let i = 0; i < 20000; i++) {
      const x = Math.fround((r() - 0.5) * 2 ** (Math.floor(r() * 40) - 24));
      const h = f32ToF16Bits(x);
      const err = Math.abs(f16BitsToF32(h) - x);
      for (const n of [h - 1, h + 1]) {
        if ((n & 0x7fff) > 0x7bff || n < 0) continue;
        expect(err).toBeLessThanOrEqual(Math.abs(f16BitsToF32(n) - x));
      }
    }
  });
  it('rounds bfloat16 to nearest even', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(Math.fround(1 + 2 ** -8))).toBe(0x3f80); // tie, even stays
    expect(f32ToBf16Bits(Math.fround(1 + 3 * 2 ** -8))).toBe(0x3f82);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
  });
});

describe('safetensors reading', () => {
  it('reads a hand-built file: header, metadata, dtypes and values', async () => {
    // [2] BF16 = 1, -2 ; [2,1] F32 = 0.5, 3 ; [3] I8 = -1, 0, 127
    const data = new Uint8Array([0x80, 0x3f, 0x00, 0xc0, 0, 0, 0, 0x3f, 0, 0, 0x40, 0x40, 0xff, 0, 0x7f]);
    const header = {
      __metadata__: { format: 'pt' },
      b: { dtype: 'BF16', shape: [2], data_offsets: [0, 4] },
      f: { dtype: 'F32', shape: [2, 1], data_offsets: [4, 12] },
      i: { dtype: 'I8', shape: [3], data_offsets: [12, 15] },
    };
    const ck = await openSafetensors(memoryBytes(rawFile(header, data), 'hand.safetensors'));
    expect(ck.metadata).toEqual({ format: 'pt' });
    expect([...ck.tensors.keys()]).toEqual(['b', 'f', 'i']);
    expect([...(await readTensorF32(ck.tensors.get('b')!))]).toEqual([1, -2]);
    expect([...(await readTensorF32(ck.tensors.get('f')!))]).toEqual([0.5, 3]);
    expect([...(await readTensorF32(ck.tensors.get('i')!))]).toEqual([-1, 0, 127]);
    expect(ck.tensors.get('f')!.shape).toEqual([2, 1]);
  });

  it('round-trips writeSafetensors for every dtype, from bytes and from a Blob', async () => {
    const spec = specFromConfig(tinyConfig('qwen2'));
    const tensors = randomTensors(spec, 3);
    for (const dtype of ['F32', 'F16', 'BF16'] as const) {
      const bytes = safetensorsBytes(tensors, dtype);
      for (const source of [
        memoryBytes(bytes, 'm.safetensors'),
        blobBytes(new Blob([bytes]), 'm.safetensors'),
      ]) {
        const ck = await openSafetensors(source);
        checkTensors(spec, ck.tensors, source.name);
        for (const t of tensors) {
          expect(
            sameF32(await readTensorF32(ck.tensors.get(t.name)!), roundTrip(t, dtype)),
            t.name,
          ).toBeUndefined();
        }
      }
    }
  });

  it('reads integer tensors by value: I32, and I64 (a torch long buffer such as a token ordering)', async () => {
    const ids = [0, 7, -3, 262_143, 95];
    const bytes = writeSafetensors([
      { name: 'i32', dtype: 'I32', shape: [5], data: new Uint8Array(Int32Array.from(ids).buffer) },
      // One byte of padding first: the I64 tensor's data starts off its 8-byte alignment.
      { name: 'pad', dtype: 'U8', shape: [1], data: new Uint8Array(1) },
      {
        name: 'i64',
        dtype: 'I64',
        shape: [5],
        data: new Uint8Array(BigInt64Array.from(ids, (v) => BigInt(v)).buffer),
      },
    ]);
    const ck = await openSafetensors(memoryBytes(bytes, 'ids.safetensors'));
    expect(Array.from(await readTensorF32(ck.tensors.get('i32')!))).toEqual(ids);
    expect(Array.from(await readTensorF32(ck.tensors.get('i64')!))).toEqual(ids);
  });

  it('reads a tensor in element-aligned chunks that reassemble to the whole', async () => {
    const spec = specFromConfig(tinyConfig('llama'));
    const tensors = randomTensors(spec, 4);
    const ck = await openSafetensors(memoryBytes(safetensorsBytes(tensors, 'BF16'), 'm'));
    const info = ck.tensors.get('model.embed_tokens.weight')!;
    const whole = await readTensorBytes(info);
    const parts: Uint8Array[] = [];
    let expectedOffset = 0;
    for await (const { offset, bytes } of readTensorChunks(info, 1001)) {
      expect(offset).toBe(expectedOffset);
      expect(bytes.byteLength).toBeLessThanOrEqual(1000); // 1001 rounded down to whole BF16 elements
      expectedOffset += bytes.byteLength;
      parts.push(bytes);
    }
    expect(parts.length).toBe(Math.ceil(whole.byteLength / 1000));
    const joined = new Uint8Array(expectedOffset);
    let at = 0;
    for (const p of parts) {
      joined.set(p, at);
      at += p.byteLength;
    }
    expect(joined).toEqual(whole);
  });

  it('reads over HTTP Range requests and refuses servers that ignore ranges', async () => {
    const spec = specFromConfig(tinyConfig('llama'));
    const tensors = randomTensors(spec, 8).slice(0, 5);
    const bytes = safetensorsBytes(tensors, 'F16');
    const requests: string[] = [];
    // A minimal server: HEAD gives the length, GET with Range gives 206 and the slice.
    const server =
      (honourRanges: boolean): typeof fetch =>
      async (_input, init) => {
        const range = new Headers(init?.headers).get('range');
        requests.push(`${init?.method ?? 'GET'} ${range ?? ''}`);
        if (init?.method === 'HEAD')
          return new Response(null, { headers: { 'content-length': String(bytes.length) } });
        const m = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
        if (!honourRanges || m === null) return new Response(bytes, { status: 200 });
        return new Response(bytes.slice(Number(m[1]), Number(m[2]) + 1), { status: 206 });
      };
    const source = await urlBytes('https://example.test/models/tiny/model.safetensors', server(true));
    expect(source.name).toBe('model.safetensors');
    expect(source.size).toBe(bytes.length);
    const ck = await openSafetensors(source);
    for (const t of tensors) {
      expect(sameF32(await readTensorF32(ck.tensors.get(t.name)!), roundTrip(t, 'F16'))).toBeUndefined();
    }
    expect(requests[0]).toBe('HEAD ');
    expect(requests[1]).toBe('GET bytes=0-7');
    const lazy = await urlBytes('https://example.test/m.safetensors', server(false));
    const e = await formatError(openSafetensors(lazy));
    expect(e.message).toMatch(/expected HTTP 206, got 200/);
  });

  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  const families: ModelFamily[] = ['llama', 'mistral', 'qwen2', 'qwen3'];
  for (const family of families) {
    for (const variant of ['f32', 'bf16', 'f16', 'sharded'] as const) {
      it(`loads the ${family} ${variant} fixture from disk through pathBytes`, async () => {
        const dir = await mkdtemp(join(tmpdir(), 'weft-st-'));
        dirs.push(dir);
        const { tensors } = await writeFixtureDir(dir, family, variant, 11);
        let spec = specFromConfig(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')));
        spec = withGenerationConfig(
          spec,
          JSON.parse(await readFile(join(dir, 'generation_config.json'), 'utf8')),
        );
        expect(spec.eosIds).toEqual([2, 302]);
        const opened: { close(): Promise<void> }[] = [];
        const open = async (file: string) => {
          const s = await pathBytes(join(dir, file));
          opened.push(s);
          return s;
        };
        const ck =
          variant === 'sharded'
            ? await openShardedSafetensors(
                JSON.parse(await readFile(join(dir, 'model.safetensors.index.json'), 'utf8')),
                open,
              )
            : await openSafetensors(await open('model.safetensors'));
        if (variant === 'sharded') expect(opened.length).toBe(2);
        checkTensors(spec, ck.tensors, dir);
        const dtype = variant === 'f32' ? 'F32' : variant === 'f16' ? 'F16' : 'BF16';
        for (const t of tensors) {
          expect(
            sameF32(await readTensorF32(ck.tensors.get(t.name)!), roundTrip(t, dtype)),
            t.name,
          ).toBeUndefined();
        }
        for (const s of opened) await s.close();
      });
    }
  }
});

describe('safetensors malformed input', () => {
  const good = { t: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } };
  const data8 = new Uint8Array(8);

  it('refuses a file shorter than its 8-byte length', async () => {
    const e = await formatError(openSafetensors(memoryBytes(new Uint8Array(5), 'short.safetensors')));
    expect(e.message).toMatch(/^short.safetensors: header length = 5: file shorter than 8 bytes/);
  });
  it('refuses a header length past the end of the file', async () => {
    const e = await formatError(openSafetensors(memoryBytes(rawFile(good, data8, 10_000n), 'x.safetensors')));
    expect(e.field).toBe('header length');
    expect(e.message).toMatch(/past the end/);
  });
  it('refuses a header length over 100 MB even if the file were that large', async () => {
    const e = await formatError(openSafetensors(memoryBytes(rawFile(good, data8, 2n ** 40n), 'x')));
    expect(e.value).toBe(2 ** 40);
  });
  it('refuses a truncated data section, naming the tensor', async () => {
    const full = rawFile(good, data8);
    const e = await formatError(
      openSafetensors(memoryBytes(full.subarray(0, full.length - 3), 'cut.safetensors')),
    );
    expect(e.file).toBe('cut.safetensors');
    expect(e.field).toBe('t.data_offsets');
    expect(e.message).toMatch(/data section size/);
  });
  it('refuses overlapping offsets', async () => {
    const header = {
      a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
      b: { dtype: 'F32', shape: [1], data_offsets: [4, 8] },
    };
    const e = await formatError(openSafetensors(memoryBytes(rawFile(header, data8), 'o')));
    expect(e.field).toBe('b.data_offsets');
    expect(e.message).toMatch(/overlaps tensor a/);
  });
  it('refuses unknown dtypes, bad shapes and size mismatches', async () => {
    const cases: [unknown, string, RegExp][] = [
      [{ t: { dtype: 'F64', shape: [1], data_offsets: [0, 8] } }, 't.dtype', /unknown dtype/],
      [{ t: { dtype: 'F32', shape: [-2], data_offsets: [0, 8] } }, 't.shape', /non-negative/],
      [{ t: { dtype: 'F32', shape: 'x', data_offsets: [0, 8] } }, 't.shape', /non-negative/],
      [{ t: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }, 't.data_offsets', /needs 12/],
      [{ t: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, 't.data_offsets', /begin <= end/],
      [{ t: { dtype: 'F32', shape: [2 ** 52, 2 ** 10], data_offsets: [0, 8] } }, 't.data_offsets', /needs/],
      [{ t: 5 }, 't', /object/],
      [{ __metadata__: { a: 1 } }, '__metadata__.a', /string/],
      [[1, 2], 'header', /JSON object/],
    ];
    for (const [header, field, problem] of cases) {
      const e = await formatError(openSafetensors(memoryBytes(rawFile(header, data8), 'bad.safetensors')));
      expect(e.field).toBe(field);
      expect(e.message).toMatch(problem);
    }
  });
  it('refuses a header that is not JSON', async () => {
    const bytes = rawFile(good, data8);
    bytes[8] = 0x7b + 1; // '|' instead of '{'
    const e = await formatError(openSafetensors(memoryBytes(bytes, 'j')));
    expect(e.message).toMatch(/not valid UTF-8 JSON/);
  });
  it('refuses an index naming a tensor its shard lacks', async () => {
    const shard = writeSafetensors([{ name: 'a', dtype: 'F32', shape: [1], data: new Uint8Array(4) }]);
    const index = { weight_map: { a: 's1.safetensors', b: 's1.safetensors' } };
    const e = await formatError(openShardedSafetensors(index, async (f) => memoryBytes(shard, f)));
    expect(e.file).toBe('s1.safetensors');
    expect(e.field).toBe('b');
    expect(e.message).toMatch(/missing/);
    await expect(
      openShardedSafetensors({ weight_map: 3 }, async (f) => memoryBytes(shard, f)),
    ).rejects.toThrow(ModelFormatError);
  });
  it('refuses a checkpoint missing a tensor or with a wrong shape for its spec', async () => {
    const spec = specFromConfig(tinyConfig('qwen3'));
    const tensors = randomTensors(spec, 5);
    const missing = tensors.filter((t) => t.name !== 'model.layers.1.self_attn.k_norm.weight');
    let ck = await openSafetensors(memoryBytes(safetensorsBytes(missing, 'F32'), 'm.safetensors'));
    expect(() => checkTensors(spec, ck.tensors, 'm.safetensors')).toThrow(
      /^m.safetensors: model.layers.1.self_attn.k_norm.weight = undefined: missing tensor/,
    );
    const wrong = tensors.map((t) =>
      t.name === 'model.norm.weight' ? { ...t, shape: [32, 2], data: t.data } : t,
    );
    ck = await openSafetensors(memoryBytes(safetensorsBytes(wrong, 'F32'), 'm.safetensors'));
    expect(() => checkTensors(spec, ck.tensors, 'm.safetensors')).toThrow(
      /model.norm.weight = \[32,2\]: wrong shape/,
    );
  });
});
