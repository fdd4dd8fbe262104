import { afterAll, describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { ggufTokenizer } from '../../src/formats/gguf/tokenizer.js';
import { type FileBytes, memoryBytes } from '../../src/formats/io/bytes.js';
import { openSafetensors, readTensorF32 } from '../../src/formats/safetensors.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { loadTokenizer } from '../../src/tokenizer/tokenizer.js';
import { ggufFixture, randomTensors, rng, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

// Fuzzing the parsers with mutated real fixtures. Contract: every input either parses (and every
// tensor then reads) or throws ModelFormatError — never another error type, never a hang, and
// never more memory than the bounds below. The parsers check every length and count against the
// bytes the file has left before allocating, so each case is measured against its file's size:
// - every read through the FileBytes is at most the file size (a Blob, file or HTTP source
//   allocates what is asked), and all reads together at most READ_FACTOR × the file size: the
//   header once plus each tensor once. (GGUF reads a 1 MiB prefix and grows it ×4 up to the file
//   size, so a larger file may need up to 7/3 of its size for the header; the fixtures here are
//   under 1 MiB, which the tests check, so their prefix is read once.)
// - the f32 tensors read back total at most DECODED_FACTOR × the file size (dequantised f32 is
//   3.8× a Q8_0 tensor's bytes, 2× a BF16 one's);
// - the process's ArrayBuffer memory grows by at most DECODED_FACTOR × the file size + 1 MiB
//   across the case (sampled before and after, which also catches an allocation no read shows).
// A case that has not settled after MAX_MS_PER_CASE fails with its index and seed.
const ITERATIONS = 600;
const MAX_MS_PER_CASE = 2000;
const READ_FACTOR = 2;
const DECODED_FACTOR = 4;

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

/** A FileBytes over `bytes` that records the largest single read and the bytes read in all. */
function countingSource(
  bytes: Uint8Array,
  name: string,
): { source: FileBytes; largest: number; total: number } {
  const inner = memoryBytes(bytes, name);
  const counts = {
    largest: 0,
    total: 0,
    source: {
      name,
      size: inner.size,
      read(offset: number, length: number) {
        counts.largest = Math.max(counts.largest, length);
        counts.total += length;
        return inner.read(offset, length);
      },
    },
  };
  return counts;
}

/** Rejects after `ms`, so a case that never settles fails by itself; `clear` stops the timer. */
function deadline(ms: number, what: string): { expired: Promise<never>; clear(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return { expired, clear: () => clearTimeout(timer) };
}

/**
 * Runs case `index` (mutation seed `seed`): `parse` reads the mutated file through a counting
 * source and returns the bytes of f32 it decoded. Checks the outcome, the time and the bounds in
 * the header comment; returns whether the file parsed or was refused.
 */
async function run(
  parse: (source: FileBytes) => Promise<number>,
  m: Mutation,
  index: number,
  seed: number,
): Promise<'ok' | 'refused'> {
  const what = `case ${index} (seed ${seed}, ${m.kind} mutation, ${m.bytes.byteLength} bytes)`;
  const counted = countingSource(m.bytes, 'fuzz');
  const size = m.bytes.byteLength;
  const timer = deadline(MAX_MS_PER_CASE, what);
  const heldBefore = process.memoryUsage().arrayBuffers;
  const start = performance.now();
  let outcome: 'ok' | 'refused' = 'ok';
  let decoded = 0;
  try {
    decoded = await Promise.race([parse(counted.source), timer.expired]);
  } catch (e) {
    if (!(e instanceof ModelFormatError)) {
      throw new Error(`${what} raised ${e instanceof Error ? e.name : typeof e}: ${String(e)}`);
    }
    outcome = 'refused';
  } finally {
    timer.clear();
  }
  const ms = performance.now() - start;
  const grown = process.memoryUsage().arrayBuffers - heldBefore;
  if (ms > MAX_MS_PER_CASE) throw new Error(`${what} took ${ms.toFixed(0)} ms`);
  if (counted.largest > size) throw new Error(`${what} read ${counted.largest} bytes at once`);
  if (counted.total > READ_FACTOR * size) throw new Error(`${what} read ${counted.total} bytes in all`);
  if (decoded > DECODED_FACTOR * size) throw new Error(`${what} decoded ${decoded} bytes of f32`);
  if (grown > DECODED_FACTOR * size + 2 ** 20) throw new Error(`${what} grew ArrayBuffers by ${grown} bytes`);
  peak.read = Math.max(peak.read, counted.total / size);
  peak.decoded = Math.max(peak.decoded, decoded / size);
  peak.grown = Math.max(peak.grown, grown);
  return outcome;
}

/** The largest ratios and growth seen, printed once so the bounds' slack stays visible. */
const peak = { read: 0, decoded: 0, grown: 0 };

describe('fuzzing the parsers', () => {
  it(`safetensors: ${ITERATIONS} mutations parse or throw ModelFormatError`, async () => {
    const spec = specFromConfig(tinyConfig('qwen2'));
    const base = safetensorsBytes(randomTensors(spec, 2).slice(0, 12), 'BF16');
    const headerEnd = 8 + Number(new DataView(base.buffer).getBigUint64(0, true));
    expect(base.byteLength).toBeLessThan(2 ** 20);
    const outcomes = { ok: 0, refused: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const seed = 1234 + i;
      const m = mutate(base, headerEnd, rng(seed), [0]);
      const parse = async (source: FileBytes) => {
        const ck = await openSafetensors(source);
        let decoded = 0;
        for (const t of ck.tensors.values()) decoded += (await readTensorF32(t)).byteLength;
        return decoded;
      };
      outcomes[await run(parse, m, i, seed)]++;
    }
    // Both outcomes occur, so the mutations reach past the first check.
    expect(outcomes.ok).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(100);
  }, 120_000);

  it(`GGUF: ${ITERATIONS} mutations parse or throw ModelFormatError`, async () => {
    const { bytes: base } = ggufFixture('llama', 'Q8_0', 3);
    const headerEnd = (await openGguf(memoryBytes(base, 'base.gguf'))).dataStart;
    expect(base.byteLength).toBeLessThan(2 ** 20);
    const outcomes = { ok: 0, refused: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const seed = 4321 + i;
      const m = mutate(base, headerEnd, rng(seed), [8, 16]);
      const parse = async (source: FileBytes) => {
        const ck = await openGgufCheckpoint(source);
        let decoded = 0;
        for (const name of ck.tensors.keys()) decoded += (await ck.readF32(name)).byteLength;
        const { tokenizerJson, tokenizerConfig } = ggufTokenizer(ck.file);
        loadTokenizer(tokenizerJson, tokenizerConfig).encode('the cat');
        return decoded;
      };
      outcomes[await run(parse, m, i, seed)]++;
    }
    expect(outcomes.ok).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(100);
  }, 300_000);
  afterAll(() => {
    console.info(
      `fuzz peaks: reads ${peak.read.toFixed(2)}× the file, f32 ${peak.decoded.toFixed(2)}×, ArrayBuffers +${peak.grown} bytes`,
    );
  });
});
