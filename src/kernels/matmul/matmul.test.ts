import { describe, expect, it } from 'vitest';
import { gpu, gpuHost, projectForms, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32, randomMatrix } from '../../../test/helpers/random.js';
import { InvalidInputError } from '../../errors.js';
import { createBuffer, readF32, readU32, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  CODE_BITS,
  latticeFormat,
  type QuantizedMatrix,
  quantize,
  splitAlign,
  type WeightFormat,
} from '../../quant/formats.js';
import { BindGroupCache } from '../bind.js';
import { gatedMatmulRef, Matmul, matmulRef, prepareMatmul } from './matmul.js';
import { uploadGatedPair, uploadMatrix } from './matrix.js';
import { gemmVariants, groupPairs, matmulTiles, splitLanes, wideLoads } from './plan.js';
import { matmulVariant, matmulWgsl } from './variant.js';

/** y [M, N] = x [M, K] · Wᵀ once through {@link Matmul}. */
async function runMatmul(
  ctx: GpuContext,
  q: QuantizedMatrix,
  x: Float32Array,
  M: number,
): Promise<Float32Array> {
  await prepareMatmul(ctx, q.format, q, M);
  return runOnce(ctx, 'matmul', (run) => {
    const mm = run.own(new Matmul(ctx, run.binds, run.own(uploadMatrix(ctx, q, 'w')), { maxM: M }));
    const [xb, yb] = [run.upload(x), run.empty(M * q.rows * 4)];
    return { encode: (pass) => mm.encode(pass, xb, yb, M), read: () => readF32(ctx, yb, M * q.rows) };
  });
}

// Every packing.
const FORMATS: WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];
// [M, N, K]: N and M not multiples of anything; K = 688 (the demo target's MLP width, 2.6875
// super-blocks) and N·K not a multiple of 256 in most, so groups and super-blocks span rows and the
// flat arrays end in padding. In the split-K layout, q4_0 and int4 take their wide loads (see
// wideLoads) at K = 96, 128, 256, 384 and 1088 and the narrow ones at 80 and 688; int2 its wide
// loads at 128, 256, 384 and 1088 and the narrow ones at 80, 96 and 688. K = 1088 has more wide
// loads per row than a workgroup has lanes.
const SHAPES: [number, number, number][] = [
  [1, 37, 128],
  [3, 70, 256],
  [13, 5, 384],
  [33, 9, 128],
  [2, 11, 688],
  [5, 3, 688],
  [1, 21, 80],
  [7, 6, 96],
  [3, 9, 1088],
  [1, 10, 1088],
];
// The matmul kernel uses no subgroup operation, so the tests run on the default device, once per
// layout (GpuContext.kernels: split-K on a GPU, serial on a software adapter); the last describe
// checks that a device without subgroups gives the same bits. The split-K shapes take lanes per
// output (splitLanes) from 4 to 64.
const LAYOUTS = projectForms([
  ['split-K', 'gpu'],
  ['serial', 'serial'],
] as const);

function expectClose(got: Float32Array, want: Float32Array, magnitude: Float32Array): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i]! - want[i]!);
    worst = Math.max(worst, err / (1e-4 * magnitude[i]! + 1e-30));
  }
  expect(worst).toBeLessThanOrEqual(1);
}

describe.each(LAYOUTS)('matmul, %s', (_layout, kernels) => {
  const context = () => gpu({ kernels });
  it.each(FORMATS)('%s equals dequantize + f32 matmul on random shapes', async (format) => {
    const ctx = await context();
    let seed = 11;
    for (const [M, N, K] of SHAPES) {
      const q = quantize(randomF32(N * K, seed++), N, K, format);
      const x = randomF32(M * K, seed++);
      const ref = matmulRef(q, x, M);
      expectClose(await runMatmul(ctx, q, x, M), ref.y, ref.magnitude);
    }
  });

  it.each(FORMATS)('%s: row r is bit-identical at M = 1 and in a batch', async (format) => {
    const ctx = await context();
    // N = 13 is not a multiple of a workgroup's 4 or 8 columns, K = 688 (43 blocks) not a multiple
    // of any chunk of K, and it takes the narrow loads of q4_0, int4 and int2; K = 1088 (68 blocks)
    // their wide loads, more than one per lane.
    for (const [N, K, T] of [
      [13, 688, 64],
      [13, 1088, 64],
    ] as const) {
      const q = quantize(randomF32(N * K, 3), N, K, format);
      const x = randomF32(T * K, 4);
      const rowsAlone = await rowsOneByOne(ctx, q.format, uploadMatrix(ctx, q, 'w'), x, T);
      // Batches of 2 to 64 rows run the 2-, 4- and 8-row tiles (17, 33 and 64: the 8-row tile once
      // per 8 rows, the last tile short) of an instance for 64 rows (matmulTiles), and the tiles of
      // instances for exactly that many rows.
      for (const rows of [2, 3, 6, 17, 33, 64])
        for (const maxM of [rows, 64]) {
          const batch = await batchBits(ctx, q, x.subarray(0, rows * K), rows, maxM);
          expect(Array.from(batch)).toEqual(Array.from(rowsAlone.subarray(0, rows * N)));
        }
    }
  });
});

// The GGUF block formats placed as stored: 4-bit nibbles with a min (q4_1) or standing for the IQ4
// table's values (iq4_nl, iq4_xs), and the planar 3-, 5- and 6-bit codes (q3_k; q5_0, q5_1, q5_k;
// q6_k), on shapes that take each one's wide and narrow loads (wideLoads: K % 32 for the 4-bit
// ones, % 64 for q6_k, % 128 for q3_k and the 5-bit ones; 688 none, 1088 those of the 4-bit ones
// and q6_k, 256 all), N no multiple of a workgroup's columns, M = 5 a short 8-row tile (the serial
// form: its 8-row tile, short), and flat blocks spanning rows at K = 688. Batch invariance and parts
// do not depend on how a block is decoded: q6_k, q3_k and q5_0 run them.
// The lattice i-quants (random code words: any is a valid block) read a block of u32 words at a
// time whatever K is.
const GGUF_FORMATS: WeightFormat[] = [
  'q4_1',
  'q5_0',
  'q5_1',
  'q5_k',
  'q6_k',
  'q3_k',
  'iq4_nl',
  'iq4_xs',
  'iq2_xxs',
  'iq2_xs',
  'iq2_s',
  'iq3_xxs',
  'iq3_s',
];
const GGUF_SHAPES: [number, number, number][] = [
  [5, 70, 256],
  [1, 21, 1088],
  [5, 11, 688],
];

// On a project that pins the GPU forms (lavapipe, where compiling is what a test costs), q4_1,
// q5_0 and q5_1 take the wide shape alone: their narrow reads are q4_0's / q5_k's code with their
// own grid, which every shape of the other project covers; iq4_nl and iq4_xs one wide and one
// narrow shape (their table lookup is the code both share); the lattice formats, read the same way
// at every K, one shape.
const ggufShapes = (format: WeightFormat) =>
  gpuHost().kernels === undefined || format === 'q5_k' || format === 'q6_k' || format === 'q3_k'
    ? GGUF_SHAPES
    : format === 'iq4_nl' || format === 'iq4_xs'
      ? [GGUF_SHAPES[0]!, GGUF_SHAPES[2]!]
      : GGUF_SHAPES.slice(0, 1);

describe.each(LAYOUTS)('matmul on GGUF block formats, %s', (_layout, kernels) => {
  const context = () => gpu({ kernels });
  it.each(GGUF_FORMATS)('%s equals dequantize + f32 matmul on random shapes', async (format) => {
    const ctx = await context();
    let seed = 51;
    for (const [M, N, K] of ggufShapes(format)) {
      const q = randomMatrix(format, N, K, seed++);
      const x = randomF32(M * K, seed++);
      const ref = matmulRef(q, x, M);
      expectClose(await runMatmul(ctx, q, x, M), ref.y, ref.magnitude);
    }
  });

  it.each(['q6_k', 'q5_0', 'q3_k', 'iq2_xs'] as const)(
    '%s: row r is bit-identical at M = 1 and in a batch',
    async (format) => {
      const ctx = await context();
      // K = 1088: q6_k's wide loads, q5_0's and q3_k's narrow ones; 17 rows: the 8-row tile twice
      // and a short one.
      const [N, K, T] = [13, 1088, 17];
      const q = randomMatrix(format, N, K, 3);
      const x = randomF32(T * K, 4);
      const rowsAlone = await rowsOneByOne(ctx, q.format, uploadMatrix(ctx, q, 'w'), x, T);
      const batch = await batchBits(ctx, q, x, T, 64);
      expect(Array.from(batch)).toEqual(Array.from(rowsAlone));
    },
  );

  it.each([
    ['q6_k', 256, [10, 10, 10, 7]],
    ['q3_k', 256, [10, 10, 10, 7]],
    ['iq3_s', 256, [10, 10, 10, 7]],
    ['q5_0', 128, [10, 10, 10, 7]],
  ] as const)('%s, K = %i: a split matrix gives the bits of a whole one', async (format, K, rows) => {
    const ctx = await context();
    // Parts start on a pair of q6_k or q3_k super-blocks (2 rows of 256) or a q5_0 chunk (1 row of
    // 128).
    const [N, T] = [37, 5];
    const q = randomMatrix(format, N, K, 25);
    const x = randomF32(T * K, 26);
    const limit = (10 * K * CODE_BITS[format]) / 8;
    const parts = uploadMatrix(ctx, q, 'w', limit);
    expect(parts.parts.map((p) => p.rows)).toEqual(rows);
    for (const p of parts.parts) expect((p.row0 * K) % splitAlign(format)).toBe(0);
    parts.destroy();
    expect(Array.from(await batchBits(ctx, q, x, T, T, limit))).toEqual(
      Array.from(await batchBits(ctx, q, x, T, T)),
    );
  });

  // The gated epilogue in the GPU forms on lavapipe (fused.test.ts runs every fusion of q5_0,
  // q5_k and q6_k against the unfused kernels).
  it('q6_k: a gated pair (gelu) equals dequantize + f32 matmuls + gelu_tanh(gate) · up', async () => {
    const ctx = await context();
    // N·K a multiple of 512 (q6_k's pair of super-blocks): the up half starts on a block.
    const [N, K, M] = [13, 512, 5];
    const gate = quantize(randomF32(N * K, 61), N, K, 'q6_k');
    const up = quantize(randomF32(N * K, 62), N, K, 'q6_k');
    const x = randomF32(M * K, 63, 3);
    await prepareMatmul(ctx, 'q6_k', gate, M, { epilogue: 'gelu' });
    const got = await runOnce(ctx, 'gelu', (run) => {
      const w = run.own(uploadGatedPair(ctx, gate, up, 'gu'));
      const mm = run.own(new Matmul(ctx, run.binds, w, { maxM: M, epilogue: 'gelu' }));
      const [xb, yb] = [run.upload(x), run.empty(M * N * 4)];
      return { encode: (pass) => mm.encode(pass, xb, yb, M), read: () => readF32(ctx, yb, M * N) };
    });
    const ref = gatedMatmulRef(gate, up, x, M, 'gelu');
    expectClose(got, ref.y, ref.magnitude);
  });
});

// GeGLU (Gemma's MLP), here too so that the lavapipe project runs the gated epilogue in the GPU
// forms and the f16 variant (fused.test.ts checks it against the unfused kernels, on SwiftShader).
describe.each(LAYOUTS)('gelu epilogue on a gated pair, %s', (_layout, kernels) => {
  it.each(FORMATS)('%s equals dequantize + f32 matmuls + gelu_tanh(gate) · up', async (format) => {
    const ctx = await gpu({ kernels });
    // N = 13 is no multiple of a workgroup's columns; N·K one of 256 (the up half starts on a
    // super-block). An instance for 3 rows: the GEMV, and the 4-row tile, short.
    const [N, K] = [13, 256];
    const gate = quantize(randomF32(N * K, 31), N, K, format);
    const up = quantize(randomF32(N * K, 32), N, K, format);
    const x = randomF32(3 * K, 33, 3);
    await prepareMatmul(ctx, format, gate, 3, { epilogue: 'gelu' });
    for (const M of [1, 3]) {
      const got = await runOnce(ctx, 'gelu', (run) => {
        const w = run.own(uploadGatedPair(ctx, gate, up, 'gu'));
        const mm = run.own(new Matmul(ctx, run.binds, w, { maxM: 3, epilogue: 'gelu' }));
        const [xb, yb] = [run.upload(x), run.empty(M * N * 4)];
        return { encode: (pass) => mm.encode(pass, xb, yb, M), read: () => readF32(ctx, yb, M * N) };
      });
      const ref = gatedMatmulRef(gate, up, x.subarray(0, M * K), M, 'gelu');
      expectClose(got, ref.y, ref.magnitude);
    }
  });
});

describe.each(LAYOUTS)('matmul on a device without subgroups, %s', (_layout, kernels) => {
  it.each(FORMATS)('%s: the same bits, GEMV and a 17-row batch', async (format) => {
    const [withSg, without] = [await gpu({ kernels }), await gpu({ kernels, disable: ['subgroups'] })];
    const [N, K] = [13, 688];
    const q = quantize(randomF32(N * K, 5), N, K, format);
    const x = randomF32(17 * K, 6);
    for (const M of [1, 17])
      expect(Array.from(await batchBits(without, q, x.subarray(0, M * K), M, M))).toEqual(
        Array.from(await batchBits(withSg, q, x.subarray(0, M * K), M, M)),
      );
  });
});

/** Runs the GEMV once per row of x (through xOffsetRows) and returns the bits of all rows. */
async function rowsOneByOne(
  ctx: GpuContext,
  format: WeightFormat,
  w: ReturnType<typeof uploadMatrix>,
  x: Float32Array,
  T: number,
): Promise<Uint32Array> {
  await prepareMatmul(ctx, format, w, 1);
  const binds = new BindGroupCache(ctx.device);
  const mm = new Matmul(ctx, binds, w, { maxM: 1 });
  const xb = uploadBuffer(ctx, x, 'x');
  const yb = createBuffer(ctx, w.rows * 4, 'y');
  const out = new Uint32Array(T * w.rows);
  for (let r = 0; r < T; r++) {
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    mm.encode(pass, xb, yb, 1, r);
    pass.end();
    ctx.device.queue.submit([enc.finish()]);
    out.set(await readU32(ctx, yb, w.rows), r * w.rows);
  }
  expect(binds.created).toBe(1); // steady state: the same bind group every row
  mm.destroy();
  w.destroy();
  xb.destroy();
  yb.destroy();
  return out;
}

/**
 * One GEMM of all T rows through an instance prepared for `maxM` rows; returns the result bits.
 * `maxBindingBytes` forces the matrix to be split into parts.
 */
async function batchBits(
  ctx: GpuContext,
  q: ReturnType<typeof quantize>,
  x: Float32Array,
  T: number,
  maxM: number,
  maxBindingBytes?: number,
): Promise<Uint32Array> {
  await prepareMatmul(ctx, q.format, q, maxM);
  return runOnce(ctx, 'matmul', (run) => {
    const w = run.own(uploadMatrix(ctx, q, 'w', maxBindingBytes));
    const mm = run.own(new Matmul(ctx, run.binds, w, { maxM }));
    const [xb, yb] = [run.upload(x), run.empty(T * q.rows * 4)];
    return { encode: (pass) => mm.encode(pass, xb, yb, T), read: () => readU32(ctx, yb, T * q.rows) };
  });
}

/** A device as matmulVariant sees it: its features and kernel forms. */
const device = (kernels: 'gpu' | 'serial') => ({
  features: { subgroups: true, f16: false, timestamps: false },
  kernels,
});
/** A matrix of K columns (the rows only pick the split-K lanes). */
const shape = (cols: number) => ({ rows: 64, cols });

describe('splitLanes', () => {
  it('launches 64k threads or more for a decode matmul, every lane within one trip where 256k threads allow', () => {
    // Llama-3.2-1B at int4: q|k|v [3072, 2048], o [2048, 2048], gate|up [8192, 2048], down [2048, 8192].
    expect(splitLanes('int4', 3072, 2048)).toBe(32); // 64 units of 32 per row: 2 per lane
    expect(splitLanes('int4', 2048, 2048)).toBe(32);
    expect(splitLanes('int4', 8192, 2048)).toBe(16); // 4 units per lane: one trip
    expect(splitLanes('int4', 2048, 8192)).toBe(64);
    expect(splitLanes('f16', 2048, 8192)).toBe(64); // 8 per lane (4 trips of 2): 64 lanes at most
    expect(splitLanes('int2', 1024, 1024)).toBe(16); // 16 units of 64: one per lane, none idle
    expect(splitLanes('int4', 1024, 3072)).toBe(64); // Qwen3-0.6B's down: 96 units, 2 per lane
    expect(splitLanes('f32', 151936, 1024)).toBe(4); // an LM head: wide enough at the least
    for (const [format, N, K] of [
      ['int8', 2048, 2048],
      ['q4_0', 896, 4864],
      ['f16', 3, 16],
    ] as const) {
      const kl = splitLanes(format, N, K);
      expect(kl & (kl - 1)).toBe(0);
      expect(kl).toBeGreaterThanOrEqual(4);
      expect(kl).toBeLessThanOrEqual(64);
    }
  });

  it('the test shapes take lanes from 4 to 64 in the split-K layout', () => {
    const lanes = new Set(
      FORMATS.flatMap((f) =>
        SHAPES.map(([, N, K]) => matmulVariant(device('gpu'), f, { rows: N, cols: K }).lanes),
      ),
    );
    expect([...lanes].sort((a, b) => a - b)).toEqual([4, 8, 16, 32, 64]);
    expect(matmulVariant(device('serial'), 'f16', shape(128)).lanes).toBe(0);
  });
});

describe('wideLoads', () => {
  it('reads q4_0 and int4 codes 16 bytes at a time when K % 32 == 0, int2 when K % 64 == 0', () => {
    for (const format of ['q4_0', 'int4'] as const) {
      expect([32, 96, 704].map((K) => wideLoads(format, K))).toEqual([true, true, true]);
      expect([16, 80, 688].map((K) => wideLoads(format, K))).toEqual([false, false, false]);
    }
    expect([64, 128, 1088].map((K) => wideLoads('int2', K))).toEqual([true, true, true]);
    expect([32, 96, 688].map((K) => wideLoads('int2', K))).toEqual([false, false, false]);
    for (const format of ['f32', 'f16', 'int8'] as const) expect(wideLoads(format, 128)).toBe(false);
  });

  it('picks the WIDE variant (vec4<u32> codes) in the split-K layout only', () => {
    const [key, source] = matmulWgsl('int2', 1, matmulVariant(device('gpu'), 'int2', shape(128)));
    expect(key).toMatch(/\bWIDE\b/);
    expect(source().code).toMatch(/var<storage, read> w: array<vec4<u32>>/);
    const [narrowKey, narrow] = matmulWgsl('int2', 1, matmulVariant(device('gpu'), 'int2', shape(96)));
    expect(narrowKey).not.toMatch(/\bWIDE\b/);
    expect(narrow().code).toMatch(/var<storage, read> w: array<u32>/);
    expect(matmulVariant(device('serial'), 'int2', shape(128)).wide).toBe(false);
  });

  it('reads the planar codes a unit at a time: q6_k when K % 64 == 0, q3_k and the 5-bit formats when K % 128 == 0', () => {
    expect([64, 192, 1088].map((K) => wideLoads('q6_k', K))).toEqual([true, true, true]);
    expect([32, 96, 688].map((K) => wideLoads('q6_k', K))).toEqual([false, false, false]);
    for (const format of ['q5_0', 'q5_1', 'q5_k', 'q3_k'] as const) {
      expect([128, 256, 896].map((K) => wideLoads(format, K))).toEqual([true, true, true]);
      expect([64, 688, 1088].map((K) => wideLoads(format, K))).toEqual([false, false, false]);
    }
    for (const format of ['q4_1', 'iq4_nl', 'iq4_xs'] as const)
      expect([32, 1088].map((K) => wideLoads(format, K))).toEqual([true, true]);
    // The GGUF test shapes take both widths of each (the lattice formats have one).
    for (const format of GGUF_FORMATS.filter((f) => !latticeFormat(f)))
      expect(new Set(GGUF_SHAPES.map(([, , K]) => wideLoads(format, K)))).toEqual(new Set([true, false]));
  });

  it('the test shapes take both load widths of q4_0, int4 and int2', () => {
    for (const format of ['q4_0', 'int4', 'int2'] as const)
      expect(new Set(SHAPES.map(([, , K]) => wideLoads(format, K)))).toEqual(new Set([true, false]));
  });
});

describe('groupPairs', () => {
  it('walks int8, q4_0 and int4 a group per trip in the serial GEMV when K % 32 == 0', () => {
    for (const format of ['int8', 'q4_0', 'int4'] as const) {
      expect([32, 96, 1088].map((K) => groupPairs(format, K))).toEqual([true, true, true]);
      expect([16, 80, 688].map((K) => groupPairs(format, K))).toEqual([false, false, false]);
      expect(matmulVariant(device('serial'), format, shape(96)).pairs).toBe(true);
      expect(matmulVariant(device('gpu'), format, shape(96)).pairs).toBe(false);
      // The test shapes take both walks.
      expect(new Set(SHAPES.map(([, , K]) => groupPairs(format, K)))).toEqual(new Set([true, false]));
    }
    for (const format of ['f32', 'f16', 'int2'] as const) expect(groupPairs(format, 128)).toBe(false);
    const [key, source] = matmulWgsl('int4', 1, matmulVariant(device('serial'), 'int4', shape(96)));
    expect(key).toMatch(/\bPAIRS\b/);
    expect(source().code).toMatch(/blk \+= 2u/);
    // The tiles walk a block per trip (the same sums; see matmulVars).
    const [tileKey, tile] = matmulWgsl('int4', 8, matmulVariant(device('serial'), 'int4', shape(96)));
    expect(tileKey).not.toMatch(/\bPAIRS\b/);
    expect(tile().code).toMatch(/blk \+= 1u/);
  });
});

describe('matmulTiles', () => {
  it('compiles the 2-, 4- and 8-row tiles as far as the largest batch needs them (serial)', () => {
    expect(matmulTiles(2)).toEqual([2]);
    expect(matmulTiles(3)).toEqual([2, 4]);
    expect(matmulTiles(4)).toEqual([2, 4]);
    expect(matmulTiles(5)).toEqual([2, 4, 8]);
    expect(matmulTiles(64)).toEqual([2, 4, 8]);
  });

  it('compiles one tile, for min(maxM, 8) rows, in the split-K form', () => {
    expect(matmulTiles(2, false)).toEqual([2]);
    expect(matmulTiles(3, false)).toEqual([4]);
    expect(matmulTiles(5, false)).toEqual([8]);
    expect(matmulTiles(64, false)).toEqual([8]);
  });
});

describe("gemmVariants (the W8A8 kernel's)", () => {
  it('serves every batch size with the smallest power-of-two variant among 4, 16 and the largest', () => {
    expect(gemmVariants(2)).toEqual([2]);
    expect(gemmVariants(3)).toEqual([4]);
    expect(gemmVariants(8)).toEqual([4, 8]);
    expect(gemmVariants(16)).toEqual([4, 16]);
    expect(gemmVariants(20)).toEqual([4, 16, 32]);
    expect(gemmVariants(64)).toEqual([4, 16, 64]);
  });
});

describe.each(LAYOUTS)('matrices split into parts, %s', (_layout, kernels) => {
  it.each(FORMATS)('%s: a split matrix gives the same bits as a whole one', async (format) => {
    const ctx = await gpu({ kernels });
    const [N, K, T] = [37, 128, 3];
    const q = quantize(randomF32(N * K, 21), N, K, format);
    const x = randomF32(T * K, 22);
    const whole = await batchBits(ctx, q, x, T, T);
    // 10 rows per part → parts of 10, 10, 10 and 7 rows.
    const rowBytes = (K * CODE_BITS[format]) / 8;
    const split = await batchBits(ctx, q, x, T, T, 10 * rowBytes);
    const parts = uploadMatrix(ctx, q, 'w', 10 * rowBytes);
    expect(parts.parts.map((p) => p.rows)).toEqual([10, 10, 10, 7]);
    parts.destroy();
    expect(Array.from(split)).toEqual(Array.from(whole));
    const ref = matmulRef(q, x, T);
    expectClose(new Float32Array(split.buffer), ref.y, ref.magnitude);
  });

  it.each(FORMATS)('%s, K = 688: parts start on a whole group pair / super-block', async (format) => {
    const ctx = await gpu({ kernels });
    const [N, K, T] = [37, 688, 2];
    const q = quantize(randomF32(N * K, 23), N, K, format);
    const x = randomF32(T * K, 24);
    // Room for 20 rows: int4/int2 parts hold 16 (row0·688 a multiple of 256), int8/q4_0 20 (of 64).
    const limit = (20 * K * CODE_BITS[format]) / 8;
    const parts = uploadMatrix(ctx, q, 'w', limit);
    const want = format === 'int4' || format === 'int2' ? [16, 16, 5] : [20, 17];
    expect(parts.parts.map((p) => p.rows)).toEqual(want);
    for (const p of parts.parts) expect((p.row0 * K) % splitAlign(format)).toBe(0);
    parts.destroy();
    const split = await batchBits(ctx, q, x, T, T, limit);
    expect(Array.from(split)).toEqual(Array.from(await batchBits(ctx, q, x, T, T)));
    expect(() => uploadMatrix(ctx, q, 'w', (K * CODE_BITS[format]) / 8 - 1)).toThrow(/exceed/);
  });
});

describe('matmul input checks', () => {
  it('names the bad argument', async () => {
    const ctx = await gpu();
    const q = quantize(randomF32(8 * 32, 1), 8, 32, 'int4');
    const w = uploadMatrix(ctx, q, 'w');
    const mm = new Matmul(ctx, new BindGroupCache(ctx.device), w, { maxM: 4 });
    const x = createBuffer(ctx, 2 * 32 * 4, 'x');
    const y = createBuffer(ctx, 4 * 8 * 4, 'y');
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    expect(() => mm.encode(pass, x, y, 5)).toThrow(/M = 5/);
    expect(() => mm.encode(pass, x, y, 3)).toThrow(InvalidInputError);
    expect(() => mm.encode(pass, x, y, 1, 2)).toThrow(/xOffsetRows|rows \[2, 3\)/);
    pass.end();
    expect(() => uploadMatrix(ctx, quantize(randomF32(24, 1), 1, 24, 'f32'), 'w')).toThrow(/multiple of 16/);
    // A Matmul takes up to PREFILL_MAX_M rows (a prompt chunk through the prefill GEMM).
    expect(() => new Matmul(ctx, new BindGroupCache(ctx.device), w, { maxM: 513 })).toThrow(/maxM = 513/);
    for (const b of [x, y]) b.destroy();
    mm.destroy();
    w.destroy();
  });
});
