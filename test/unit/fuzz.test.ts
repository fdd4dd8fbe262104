import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { openGguf, openGgufCheckpoint } from '../../src/formats/gguf.js';
import { ggufTokenizer } from '../../src/formats/gguf-tokenizer.js';
import { openSafetensors, readTensorF32 } from '../../src/formats/safetensors.js';
import { bytesSource } from '../../src/formats/source.js';
import { specFromConfig } from '../../src/model/config.js';
import { loadTokenizer } from '../../src/tokenizer/tokenizer.js';
import { ggufFixture, randomTensors, rng, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

// Fuzzing the parsers with mutated real fixtures. Contract: every input either parses (and every
// tensor then reads) or throws ModelFormatError — never another error type, never a hang.
// Allocation bound: the parsers check every length and count against the bytes the file has left
// before allocating (an array of n items needs ≥ n·(minimum item size) bytes; a safetensors
// header ≤ min(100 MB, file size); tensor byte ranges inside the file), so memory stays within a
// small multiple of the file size (dequantised f32 is at most 7× a Q4_K tensor's bytes).
const ITERATIONS = 600;
const MAX_MS_PER_CASE = 2000;

type Mutation = { kind: string; bytes: Uint8Array };

/** One deterministic mutation of `base`, mostly aimed at the first `headerEnd` bytes. */
function mutate(
  base: Uint8Array,
  headerEnd: number,
  r: () => number,
  countOffsets: readonly number[],
): Mutation {
  const bytes = base.slice();
  const pick = (n: number) => Math.floor(r() * n);
  const inHeader = () => (r() < 0.85 ? pick(headerEnd) : pick(bytes.length));
  switch (pick(5)) {
    case 0: {
      const n = 1 + pick(8);
      for (let i = 0; i < n; i++) {
        const at = inHeader();
        bytes[at] = bytes[at]! ^ (1 << pick(8));
      }
      return { kind: 'flip', bytes };
    }
    case 1:
      return { kind: 'truncate', bytes: bytes.subarray(0, pick(bytes.length)) };
    case 2: {
      // A random u64 (often huge) over a random header position: lengths, counts, dims, offsets.
      const at = Math.min(inHeader(), bytes.length - 8);
      const big = r() < 0.5 ? 2n ** BigInt(pick(64)) : BigInt(pick(2 ** 31)) * BigInt(1 + pick(2 ** 20));
      new DataView(bytes.buffer).setBigUint64(at, big & (2n ** 64n - 1n), true);
      return { kind: 'u64', bytes };
    }
    case 3: {
      // Splice the declared length / counts themselves.
      const at = countOffsets[pick(countOffsets.length)]!;
      const v = r() < 0.5 ? BigInt(pick(bytes.length * 2)) : 2n ** BigInt(pick(64));
      new DataView(bytes.buffer).setBigUint64(at, v, true);
      return { kind: 'count', bytes };
    }
    default: {
      // Copy a chunk of the file over another place (shifts structure, duplicates names).
      const len = 1 + pick(64);
      const from = pick(bytes.length - len);
      bytes.copyWithin(inHeader(), from, from + len);
      return { kind: 'splice', bytes };
    }
  }
}

async function run(parse: (b: Uint8Array) => Promise<void>, m: Mutation): Promise<'ok' | 'refused'> {
  const start = performance.now();
  let outcome: 'ok' | 'refused' = 'ok';
  try {
    await parse(m.bytes);
  } catch (e) {
    if (!(e instanceof ModelFormatError)) {
      throw new Error(`${m.kind} mutation raised ${e instanceof Error ? e.name : typeof e}: ${String(e)}`);
    }
    outcome = 'refused';
  }
  const ms = performance.now() - start;
  if (ms > MAX_MS_PER_CASE) throw new Error(`${m.kind} mutation took ${ms.toFixed(0)} ms`);
  return outcome;
}

describe('fuzzing the parsers', () => {
  it(`safetensors: ${ITERATIONS} mutations parse or throw ModelFormatError`, async () => {
    const spec = specFromConfig(tinyConfig('qwen2'));
    const base = safetensorsBytes(randomTensors(spec, 2).slice(0, 12), 'BF16');
    const headerEnd = 8 + Number(new DataView(base.buffer).getBigUint64(0, true));
    const r = rng(1234);
    const outcomes = { ok: 0, refused: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const m = mutate(base, headerEnd, r, [0]);
      outcomes[
        await run(async (b) => {
          const ck = await openSafetensors(bytesSource(b, 'fuzz.safetensors'));
          for (const t of ck.tensors.values()) await readTensorF32(t);
        }, m)
      ]++;
    }
    // Both outcomes occur, so the mutations reach past the first check.
    expect(outcomes.ok).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(100);
  }, 120_000);

  it(`GGUF: ${ITERATIONS} mutations parse or throw ModelFormatError`, async () => {
    const { bytes: base } = ggufFixture('llama', 'Q8_0', 3);
    const headerEnd = (await openGguf(bytesSource(base, 'base.gguf'))).dataStart;
    const r = rng(4321);
    const outcomes = { ok: 0, refused: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const m = mutate(base, headerEnd, r, [8, 16]);
      outcomes[
        await run(async (b) => {
          const ck = await openGgufCheckpoint(bytesSource(b, 'fuzz.gguf'));
          for (const name of ck.tensors.keys()) await ck.readF32(name);
          const { tokenizerJson, tokenizerConfig } = ggufTokenizer(ck.file);
          loadTokenizer(tokenizerJson, tokenizerConfig).encode('the cat');
        }, m)
      ]++;
    }
    expect(outcomes.ok).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(100);
  }, 300_000);
});
