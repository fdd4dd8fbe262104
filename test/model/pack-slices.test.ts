// Packing a matrix a slice of rows at a time gives the words of packing it whole, in every format,
// whatever the slice size; and a safetensors matrix is placed that way, never decoded whole.
import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { PACK_SLICE_ELEMENTS, packInSlices, placedMatrix } from '../../src/model/quantized.js';
import { quantize, type WeightFormat } from '../../src/quant/formats.js';
import { fixtureFiles, rng, safetensorsBytes } from '../fixtures/write.js';

const FORMATS: readonly WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];

function randomMatrix(rows: number, cols: number, seed: number): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: rows * cols }, () => (r() < 0.01 ? 8 : 1) * (r() - 0.5));
}

describe('packInSlices', () => {
  it('equals packing whole, for every format, slice size and ragged last slice', async () => {
    // 37 rows of 80: no format's block divides a row, so slices start mid-row in block terms.
    for (const [rows, cols] of [
      [37, 80],
      [9, 512],
      [130, 48],
    ] as const) {
      const w = randomMatrix(rows, cols, rows + cols);
      const readRows = async (row0: number, count: number) => w.slice(row0 * cols, (row0 + count) * cols);
      for (const format of FORMATS) {
        const whole = quantize(w, rows, cols, format);
        for (const slice of [1, 256, 1000, rows * cols]) {
          const sliced = await packInSlices(readRows, rows, cols, format, slice);
          expect(sliced, `${format} [${rows}, ${cols}] slices of ${slice}`).toEqual(whole);
        }
      }
    }
  });

  it('places a safetensors matrix larger than a slice without decoding it whole', async () => {
    const { files, spec } = fixtureFiles('llama', 'f32', 3);
    // A [2048, 2304] matrix (4.7M elements, over PACK_SLICE_ELEMENTS) beside the fixture's tensors.
    const rows = 2048;
    const cols = 2304;
    expect(rows * cols).toBeGreaterThan(PACK_SLICE_ELEMENTS);
    const w = randomMatrix(rows, cols, 5);
    files.set(
      'extra.safetensors',
      safetensorsBytes([{ name: 'big.weight', shape: [rows, cols], data: w }], 'F32'),
    );
    const { openSafetensors } = await import('../../src/formats/safetensors.js');
    const { safetensorsReader } = await import('../../src/formats/weft-checkpoint.js');
    const model = memoryModelFiles('m', files);
    const reader = safetensorsReader(await openSafetensors(await model.open('extra.safetensors')));
    const placed = await placedMatrix(reader, 'big.weight', rows, cols, { rows, cols }, 'f16', 'none');
    // Compared word by word: toEqual on millions of words takes seconds.
    const want = quantize(w, rows, cols, 'f16').data;
    expect(placed.data.length).toBe(want.length);
    expect(placed.data.findIndex((x, i) => x !== want[i])).toBe(-1);
    expect(reader.stats!.largestF32).toBeLessThanOrEqual(PACK_SLICE_ELEMENTS);
    expect(reader.stats!.f32Bytes).toBe(4 * rows * cols); // every element read once
    // A model opened from safetensors reads its matrices the same way.
    const opened = await openModel(memoryModelFiles('m', files));
    expect(opened.weights.readRowsF32).toBeDefined();
    expect(spec.vocabSize).toBeGreaterThan(0);
  });
});
