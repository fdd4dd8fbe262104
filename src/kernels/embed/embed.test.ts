import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomMatrix } from '../../../test/helpers/random.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { latticeFormat, type QuantizedMatrix, quantize, type WeightFormat } from '../../quant/formats.js';
import { uploadMatrix } from '../matmul/matrix.js';
import { Embedding, type EmbeddingOptions, embedRef } from './embed.js';

/**
 * Uploads the table (split into parts of at most `maxBindingBytes`, as `uploadMatrix` does) and
 * the ids, runs {@link Embedding} once and reads [ids.length, n] back.
 */
async function runEmbedding(
  ctx: GpuContext,
  q: QuantizedMatrix,
  ids: Uint32Array,
  maxBindingBytes?: number,
  options?: EmbeddingOptions,
): Promise<Float32Array> {
  await Embedding.prepare(ctx, q.format);
  return runOnce(ctx, 'embed', (run) => {
    const table = run.own(uploadMatrix(ctx, q, 'embed-table', maxBindingBytes));
    const op = run.own(new Embedding(ctx, run.binds, table, options));
    const [bi, bo] = [run.upload(ids), run.empty(ids.length * q.cols * 4)];
    return {
      encode: (pass) => op.encode(pass, bi, bo, ids.length),
      read: () => readF32(ctx, bo, ids.length * q.cols),
    };
  });
}

function rand(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 0.2;
  });
}

describe('embedding lookup vs dequantize (bit-exact)', () => {
  // Last column: the binding-size limit that splits the table into parts (undefined: one part).
  const cases: [WeightFormat, number, number, number[], number | undefined][] = [
    ['f32', 50, 80, [0, 49, 7, 7], undefined],
    ['f32', 50, 80, [0, 49, 7, 8, 20, 21], 7 * 80 * 4],
    ['f16', 300, 48, [299, 1, 150], undefined],
    ['int8', 100, 96, [3, 99, 0, 50, 51], 33 * 96],
    ['int8', 64, 128, [63, 2], undefined],
    ['int8', 13, 688, [12, 0, 5], 5 * 688],
    ['q4_0', 41, 688, [40, 1, 20], 9 * 344],
    ['int4', 77, 160, [76, 0, 10], 10 * 80],
    ['int4', 20, 64, [19, 5], undefined],
    ['int4', 37, 688, [36, 0, 16, 17], 20 * 344],
    ['int2', 33, 96, [32, 16, 0, 1], undefined],
    ['int2', 500, 48, [499, 250, 3], 64 * 12],
    ['int2', 19, 688, [18, 15, 16], undefined],
    // The GGUF block formats: parts on a q4_1 group, a q5_0 / q5_1 chunk of 128 and a pair of
    // q6_k super-blocks, flat blocks spanning rows at 688.
    ['q4_1', 37, 688, [36, 0, 16, 17], 9 * 344],
    ['q5_0', 41, 688, [40, 1, 20], 9 * 430],
    ['q5_1', 20, 96, [19, 5, 4], 8 * 60],
    ['q5_k', 37, 688, [36, 0, 16, 17], 20 * 430],
    ['q6_k', 33, 256, [32, 2, 0, 3], 6 * 192],
    ['q6_k', 19, 688, [18, 15, 16], undefined],
    // q3_k's pairs of super-blocks and 2-bit low plane; the IQ4 table's values on q4_0's layout
    // (iq4_nl) and under 6-bit sub-scales (iq4_xs).
    ['q3_k', 33, 256, [32, 2, 0, 3], 6 * 96],
    ['q3_k', 19, 688, [18, 15, 16], undefined],
    ['iq4_nl', 41, 688, [40, 1, 20], 9 * 344],
    ['iq4_xs', 37, 688, [36, 0, 16, 17], 20 * 344],
    // The lattice i-quants (random code words), parts on a pair of super-blocks, blocks spanning
    // rows at 688.
    ['iq2_xxs', 33, 256, [32, 2, 0, 3], 6 * 64],
    ['iq2_xs', 19, 688, [18, 15, 16], undefined],
    ['iq2_s', 33, 256, [32, 2, 0, 3], 6 * 80],
    ['iq3_xxs', 19, 688, [18, 15, 16], undefined],
    ['iq3_s', 33, 256, [32, 2, 0, 3], 6 * 108],
  ];
  it.each(cases)('%s table [%i, %i] ids %o, part limit %s bytes', async (format, V, n, idList, limit) => {
    const ctx = await gpu();
    const w = rand(V * n, V * n + idList.length);
    // Tiny values exercise f16 subnormals.
    w[3] = 3e-6;
    w[4] = -1e-7;
    const q = latticeFormat(format) ? randomMatrix(format, V, n, V * n) : quantize(w, V, n, format);
    const ids = Uint32Array.from(idList);
    const got = await runEmbedding(ctx, q, ids, limit);
    expect(Array.from(got)).toEqual(Array.from(embedRef(q, ids)));
  });
});

describe('embedding lookup times a scale (Gemma 3: √hidden) vs dequantize (bit-exact)', () => {
  // Widths as uploadMatrix takes them (multiples of 16) but not of 32, 64 or 256. Last column: the
  // part limit in bytes, as above.
  const cases: [WeightFormat, number, number, number[], number | undefined][] = [
    ['f32', 30, 112, [29, 0, 12, 13], 13 * 112 * 4],
    ['f16', 20, 1008, [19, 3], undefined],
    ['int8', 13, 112, [12, 0, 7], undefined],
    ['q4_0', 11, 1008, [10, 1], undefined],
    ['int4', 9, 112, [8, 2, 5], undefined],
    ['int2', 9, 1008, [8, 0], undefined],
  ];
  it.each(cases)('%s table [%i, %i] ids %o, part limit %s bytes', async (format, V, n, idList, limit) => {
    const ctx = await gpu();
    const q = quantize(rand(V * n, V * n + 7), V, n, format);
    const ids = Uint32Array.from(idList);
    const got = await runEmbedding(ctx, q, ids, limit, { scale: Math.sqrt(n) });
    expect(Array.from(got)).toEqual(Array.from(embedRef(q, ids, Math.sqrt(n))));
  });
});
