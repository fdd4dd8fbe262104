// Row-range reads, what the streaming placement reads a slice at a time: a GGUF or weft-q matrix's
// f32 rows (readRowsF32; GGUF llama Q/K rows un-permuted within the heads they cover, weft-q rows
// dequantized and un-rotated from the stored words around them) and the stored words of a range of
// rows (readPacked with a range, GGUF and weft-q) equal the same rows of the whole read.
import { describe, expect, it } from 'vitest';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openWeftCheckpoint, type TensorReader } from '../../src/formats/weft-checkpoint.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { openModel } from '../../src/model/load.js';
import { alignedRowStep, type QuantizedMatrix, sliceRows } from '../../src/quant/formats.js';
import { fixtureFiles, ggufFixture, weftCheckpointBytes } from '../fixtures/write.js';

/** Row ranges of a `rows`-row matrix: starts on multiples of `step`, ends anywhere or at the end. */
function ranges(rows: number, step: number): [number, number][] {
  const out: [number, number][] = [[0, rows]];
  for (const n of [1, 3, 7, 16, 21]) {
    const count = Math.ceil(n / step) * step;
    for (let row0 = 0; row0 + count <= rows; row0 += 2 * count) out.push([row0, count]);
  }
  const last = Math.floor((rows - 1) / step) * step;
  out.push([last, rows - last]);
  return out;
}

/** One aligned step of rows of a wanted matrix. */
function n0(want: { format: Parameters<typeof alignedRowStep>[0]; cols: number }): number {
  return alignedRowStep(want.format, want.cols);
}

async function expectRowsEqual(reader: TensorReader, name: string, shape: readonly number[]) {
  const [rows = 0, cols = 0] = shape;
  const whole = await reader.readF32(name);
  for (const [row0, n] of ranges(rows, 1)) {
    const got = await reader.readRowsF32!(name, row0, n);
    expect(Array.from(got), `${name} rows [${row0}, ${row0 + n})`).toEqual(
      Array.from(whole.subarray(row0 * cols, (row0 + n) * cols)),
    );
  }
}

describe('GGUF row reads', () => {
  it.each([
    ['llama', 'Q4_0'],
    ['llama', 'Q6_K'],
    ['llama', 'F16'],
    ['qwen2', 'F32'],
  ] as const)('%s %s: readRowsF32 equals the rows of readF32 (Q/K un-permuted)', async (family, variant) => {
    const { bytes } = ggufFixture(family, variant, 3);
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'm.gguf'));
    for (const name of [
      'model.layers.0.self_attn.q_proj.weight',
      'model.layers.1.self_attn.k_proj.weight',
      'model.layers.0.mlp.down_proj.weight',
      'model.embed_tokens.weight',
    ])
      await expectRowsEqual(ck, name, ck.tensors.get(name)!.shape);
  });

  it.each(['Q4_0', 'Q8_0', 'Q4_K', 'F16', 'Q6_K', 'Q5_0'] as const)(
    'llama %s: readPacked of a range is those rows of the stored matrix',
    async (variant) => {
      const { bytes } = ggufFixture('llama', variant, 4);
      const ck = await openGgufCheckpoint(memoryBytes(bytes, 'm.gguf'));
      for (const name of [
        'model.layers.0.self_attn.q_proj.weight',
        'model.layers.0.self_attn.k_proj.weight',
      ]) {
        const [rows = 0, cols = 0] = ck.tensors.get(name)!.shape;
        const format = ck.storedFormat(name)!;
        const want = { format, rows, cols, rotation: 'none' as const };
        const whole = (await ck.readPacked!(name, want))!;
        const before = ck.stats.f32Bytes;
        for (const [row0, n] of ranges(rows, alignedRowStep(format, cols))) {
          const got = await ck.readPacked!(name, want, { row0, rows: n });
          const slice = sliceRows(whole, row0, n);
          expect(got, `${variant} ${name} rows [${row0}, ${row0 + n})`).toEqual({
            ...slice,
            data: slice.data.slice(),
            ...(slice.scales ? { scales: slice.scales.slice() } : {}),
          });
        }
        expect(ck.stats.f32Bytes).toBe(before);
      }
    },
  );
});

/**
 * A tiny qwen3's weft-q checkpoint at `quant` and `rotate`, opened over a source that records the
 * bytes of every read in `reads`.
 */
async function countedWeftCheckpoint(quant: 'f16' | 'int8' | 'int4' | 'int2', rotate: 'none' | 'hadamard') {
  const { files } = fixtureFiles('qwen3', 'f32', 2);
  const source = await openModel(memoryModelFiles('m', files));
  const bytes = await weftCheckpointBytes(source.weights, { quant, rotate });
  const reads: number[] = [];
  const src = memoryBytes(bytes, 'w');
  const ck = await openWeftCheckpoint({
    ...src,
    read: (offset, n) => {
      reads.push(n);
      return src.read(offset, n);
    },
  });
  return { ck, reads };
}

describe('weft-q row reads', () => {
  it.each(['f16', 'int8', 'int4', 'int2'] as const)(
    '%s: readPacked of a range reads the words of those rows alone',
    async (quant) => {
      // Count the bytes each read asks for: a range reads its words, not the matrix.
      const { ck, reads } = await countedWeftCheckpoint(quant, 'hadamard');
      for (const [name, s] of Object.entries(ck.schemes)) {
        const want = { format: s.format, rows: s.rows, cols: s.cols, rotation: s.rotation };
        const whole = (await ck.readPacked!(name, want))!;
        for (const [row0, n] of ranges(s.rows, alignedRowStep(s.format, s.cols))) {
          reads.length = 0;
          const got = (await ck.readPacked!(name, want, { row0, rows: n }))!;
          const slice = sliceRows(whole, row0, n);
          expect(Array.from(got.data), `${quant} ${name} [${row0}, ${row0 + n}) data`).toEqual(
            Array.from(slice.data),
          );
          expect(got.scales && Array.from(got.scales)).toEqual(slice.scales && Array.from(slice.scales));
          expect(reads.reduce((a, b) => a + b, 0)).toBe(
            slice.data.byteLength + (slice.scales?.byteLength ?? 0),
          );
        }
        const other = s.format === 'f16' ? 'int8' : 'f16';
        expect(
          await ck.readPacked!(name, { ...want, format: other }, { row0: 0, rows: n0(want) }),
        ).toBeUndefined();
      }
    },
  );
});

describe('weft-q f32 row reads', () => {
  it.each([
    ['f16', 'none'],
    ['int8', 'hadamard'],
    ['int4', 'none'],
    ['int4', 'hadamard'],
    ['int2', 'hadamard'],
  ] as const)(
    '%s, rotation %s: readRowsF32 equals the rows of readF32, reading words near them alone',
    async (quant, rotate) => {
      const { ck, reads } = await countedWeftCheckpoint(quant, rotate);
      // Every tensor: packed matrices (their rows within aligned steps) and plain vectors.
      for (const [name, { shape }] of ck.tensors) {
        if (shape.length === 2) await expectRowsEqual(ck, name, shape);
        const s = ck.schemes[name];
        if (s === undefined) continue;
        // One row reads at most the aligned step of packed rows around it.
        const step = alignedRowStep(s.format, s.cols);
        const stepBytes = (whole: QuantizedMatrix) => {
          const one = sliceRows(whole, 0, Math.min(step, s.rows));
          return one.data.byteLength + (one.scales?.byteLength ?? 0);
        };
        const whole = (await ck.readPacked!(name, {
          format: s.format,
          rows: s.rows,
          cols: s.cols,
          rotation: s.rotation,
        }))!;
        reads.length = 0;
        await ck.readRowsF32!(name, 0, 1);
        expect(
          reads.reduce((a, b) => a + b, 0),
          `${name} row 0`,
        ).toBe(stepBytes(whole));
      }
      await expect(ck.readRowsF32!('model.layers.0.mlp.down_proj.weight', 0, 10_000)).rejects.toThrow(
        /rows out of/,
      );
    },
  );
});
