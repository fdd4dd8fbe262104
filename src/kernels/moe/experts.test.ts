import { describe, expect, it } from 'vitest';
import { gpu, projectForms, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32, randomMatrix, rng } from '../../../test/helpers/random.js';
import { InvalidInputError } from '../../errors.js';
import { createBuffer, readU32, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { alignedRowStep, type QuantizedMatrix, sliceRows, type WeightFormat } from '../../quant/formats.js';
import { BindGroupCache } from '../bind.js';
import {
  allocateExperts,
  type ExpertEpilogue,
  ExpertMatmul,
  expertMatmulRef,
  type GpuExperts,
  writeExpertRows,
} from './experts.js';
import { type RouteShape, routeTableLayout, routeTableRef } from './table.js';

// The kernel forms this project runs (both in Chromium, the GPU forms on lavapipe).
const LAYOUTS = projectForms([
  ['split-K', 'gpu'],
  ['serial', 'serial'],
] as const);

// The float and integer packings, and two GGUF block formats (one planar).
const FORMATS: WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2', 'q6_k'];
// E = 5 experts, 2 chosen per row, passes of up to 7 rows. Gate/up: N = 10 outputs (no multiple
// of a workgroup's columns) of K = 256; down: N = 20 of K = 128; each half's N·K a multiple of
// every format's block (512 at most), so experts and up halves start on blocks.
const ROUTE: RouteShape = { experts: 5, topK: 2, maxRows: 7 };
const GATE_UP = { N: 10, K: 256 };
const DOWN = { N: 20, K: 128 };

/** Each of T rows' topK distinct experts among `experts`, at random. */
function randomChoices(s: RouteShape, T: number, seed: number): Int32Array {
  const next = rng(seed);
  const out = new Int32Array(T * s.topK);
  for (let t = 0; t < T; t++) {
    const pool = Array.from({ length: s.experts }, (_, e) => e);
    for (let j = 0; j < s.topK; j++)
      out[t * s.topK + j] = pool.splice(Math.floor(next() * pool.length), 1)[0]!;
  }
  return out;
}

/** Random expert matrices [N, K]: each expert's matrix (gated: its gate), and its up (gated). */
interface Stack {
  readonly w: QuantizedMatrix[];
  readonly up?: QuantizedMatrix[];
}

function randomStack(format: WeightFormat, N: number, K: number, gated: boolean, seed: number): Stack {
  const w = Array.from({ length: ROUTE.experts }, (_, e) => randomMatrix(format, N, K, seed + 2 * e));
  if (!gated) return { w };
  return {
    w,
    up: Array.from({ length: ROUTE.experts }, (_, e) => randomMatrix(format, N, K, seed + 2 * e + 1)),
  };
}

/** The stack on the GPU, each matrix written in two slices where an aligned split exists. */
function uploadStack(ctx: GpuContext, s: Stack, maxBindingBytes?: number): GpuExperts {
  const { format, rows: N, cols: K } = s.w[0]!;
  const m = allocateExperts(ctx, format, ROUTE.experts, N, K, 'experts', s.up !== undefined, maxBindingBytes);
  const step = alignedRowStep(format, K);
  const cut = step * Math.max(1, Math.floor(N / 2 / step));
  for (let e = 0; e < ROUTE.experts; e++)
    for (const [half, q] of [
      [0, s.w[e]!],
      [1, s.up?.[e]],
    ] as const) {
      if (!q) continue;
      if (cut >= N) writeExpertRows(ctx, m, e, half, q, 0);
      else {
        writeExpertRows(ctx, m, e, half, sliceRows(q, 0, cut), 0);
        writeExpertRows(ctx, m, e, half, sliceRows(q, cut, N - cut), cut);
      }
    }
  return m;
}

/** One pass of T rows through an ExpertMatmul; the bits of y [T · topK, N]. */
async function runExperts(
  ctx: GpuContext,
  w: GpuExperts,
  epilogue: ExpertEpilogue,
  choices: Int32Array,
  x: Float32Array,
  T: number,
  gather: boolean,
): Promise<Uint32Array> {
  await ExpertMatmul.prepare(ctx, w.format, w.rows, w.cols, ROUTE, epilogue);
  const table = routeTableRef(ROUTE, choices);
  const n = T * ROUTE.topK * w.rows;
  return runOnce(ctx, 'experts', (run) => {
    const mm = run.own(new ExpertMatmul(ctx, run.binds, w, ROUTE, { epilogue }));
    const [xb, tb, yb] = [run.upload(x), run.upload(table), run.empty(n * 4)];
    return { encode: (pass) => mm.encode(pass, xb, yb, tb, T, gather), read: () => readU32(ctx, yb, n) };
  });
}

function expectClose(got: Uint32Array, want: Float32Array, magnitude: Float32Array): void {
  const y = new Float32Array(got.buffer, got.byteOffset, got.length);
  expect(y.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++)
    worst = Math.max(worst, Math.abs(y[i]! - want[i]!) / (1e-4 * magnitude[i]! + 1e-30));
  expect(worst).toBeLessThanOrEqual(1);
}

/** Runs one pass and checks it against expertMatmulRef. */
async function checkPass(
  ctx: GpuContext,
  s: Stack,
  w: GpuExperts,
  epilogue: ExpertEpilogue,
  T: number,
  gather: boolean,
  seed: number,
): Promise<Uint32Array> {
  const K = w.cols;
  const choices = randomChoices(ROUTE, T, seed);
  const x = randomF32((gather ? T : T * ROUTE.topK) * K, seed + 1, 2);
  const got = await runExperts(ctx, w, epilogue, choices, x, T, gather);
  const table = routeTableRef(ROUTE, choices);
  const gated = epilogue === 'store' ? undefined : { up: s.up!, activation: epilogue };
  const ref = expertMatmulRef(ROUTE, table, x, T, gather, s.w, gated);
  expectClose(got, ref.y, ref.magnitude);
  return got;
}

describe.each(LAYOUTS)('expert matmul, %s', (_layout, kernels) => {
  const context = () => gpu({ kernels });

  it.each(FORMATS)('%s: down (store) and gate/up (silu) equal the reference', async (format) => {
    const ctx = await context();
    const down = randomStack(format, DOWN.N, DOWN.K, false, 100);
    const dw = uploadStack(ctx, down);
    for (const [T, gather] of [
      [1, false],
      [3, false],
      [7, true],
    ] as const)
      await checkPass(ctx, down, dw, 'store', T, gather, 10 + T);
    dw.destroy();
    const gu = randomStack(format, GATE_UP.N, GATE_UP.K, true, 200);
    const gw = uploadStack(ctx, gu);
    for (const [T, gather] of [
      [1, true],
      [7, true],
      [3, false],
    ] as const)
      await checkPass(ctx, gu, gw, 'silu', T, gather, 20 + T);
    gw.destroy();
  });

  it.each(['f16', 'q6_k'] as const)('%s: gate/up (gelu) equals the reference', async (format) => {
    const ctx = await context();
    const gu = randomStack(format, GATE_UP.N, GATE_UP.K, true, 300);
    const gw = uploadStack(ctx, gu);
    for (const T of [1, 5]) await checkPass(ctx, gu, gw, 'gelu', T, true, 30 + T);
    gw.destroy();
  });

  it.each(['int4', 'q6_k', 'f16'] as const)(
    '%s: a row alone (T = 1) gives the bits it gets in a pass of 7',
    async (format) => {
      const ctx = await context();
      const gu = randomStack(format, GATE_UP.N, GATE_UP.K, true, 400);
      const gw = uploadStack(ctx, gu);
      const [T, k, N, K] = [7, ROUTE.topK, GATE_UP.N, GATE_UP.K];
      const choices = randomChoices(ROUTE, T, 41);
      const x = randomF32(T * K, 42, 2);
      const batch = await runExperts(ctx, gw, 'silu', choices, x, T, true);
      const positions = routeTableRef(ROUTE, choices).subarray(routeTableLayout(ROUTE).positions);
      for (let t = 0; t < T; t++) {
        const own = choices.subarray(t * k, (t + 1) * k);
        const alone = await runExperts(ctx, gw, 'silu', own, x.subarray(t * K, (t + 1) * K), 1, true);
        const mine = routeTableRef(ROUTE, own).subarray(routeTableLayout(ROUTE).positions);
        for (let j = 0; j < k; j++) {
          const [a, b] = [mine[j]!, positions[t * k + j]!];
          expect(Array.from(alone.subarray(a * N, (a + 1) * N))).toEqual(
            Array.from(batch.subarray(b * N, (b + 1) * N)),
          );
        }
      }
      gw.destroy();
    },
  );

  it.each([
    ['int4', 'store'],
    ['q6_k', 'silu'],
  ] as const)('%s (%s): experts in several parts give the bits of one part', async (format, epilogue) => {
    const ctx = await context();
    const { N, K } = epilogue === 'store' ? DOWN : GATE_UP;
    const s = randomStack(format, N, K, epilogue !== 'store', 500);
    const whole = uploadStack(ctx, s);
    // Two experts per part: parts of 2, 2 and 1.
    const split = uploadStack(ctx, s, 2 * (whole.parts[0]!.data.size / ROUTE.experts));
    expect(whole.parts.map((p) => p.experts)).toEqual([5]);
    expect(split.parts.map((p) => [p.e0, p.experts])).toEqual([
      [0, 2],
      [2, 2],
      [4, 1],
    ]);
    expect(split.bytes).toBe(whole.bytes);
    const before = ctx.counter.snapshot().dispatches;
    const got = await checkPass(ctx, s, split, epilogue, 7, true, 51);
    expect(ctx.counter.snapshot().dispatches - before).toBe(3);
    expect(Array.from(got)).toEqual(Array.from(await checkPass(ctx, s, whole, epilogue, 7, true, 51)));
    whole.destroy();
    split.destroy();
  });
});

describe('expert matmul input checks', () => {
  it('names the label and the numbers', async () => {
    const ctx = await gpu();
    expect(() => allocateExperts(ctx, 'int4', 4, 8, 40, 'blk.0.down')).toThrow(/blk\.0\.down.*K = 40/);
    // int4 [10, 80]: 800 elements, not a multiple of 256.
    expect(() => allocateExperts(ctx, 'int4', 4, 10, 80, 'blk.1.gate_up', true)).toThrow(InvalidInputError);
    expect(() => allocateExperts(ctx, 'int4', 4, 10, 80, 'blk.1.gate_up', true)).toThrow(
      /blk\.1\.gate_up.*800 elements, not a multiple of 256/,
    );
    expect(() => allocateExperts(ctx, 'f32', 4, 8, 32, 'small', false, 8 * 32 * 4 - 1)).toThrow(/exceeds/);
    const w = allocateExperts(ctx, 'int4', 5, 8, 32, 'e');
    const q = randomMatrix('int4', 8, 32, 1);
    expect(() => writeExpertRows(ctx, w, 5, 0, q, 0)).toThrow(/expert 5/);
    expect(() => writeExpertRows(ctx, w, 0, 1, q, 0)).toThrow(/half must be 0/);
    expect(() => writeExpertRows(ctx, w, 0, 0, sliceRows(q, 0, 8), 1)).toThrow(InvalidInputError);
    const binds = new BindGroupCache(ctx.device);
    expect(() => new ExpertMatmul(ctx, binds, w, ROUTE, { epilogue: 'silu' })).toThrow(/needs gated/);
    // A caller outside the type system asking for the residual add.
    const add: { epilogue?: ExpertEpilogue } = JSON.parse('{"epilogue": "add"}');
    expect(() => new ExpertMatmul(ctx, binds, w, ROUTE, add)).toThrow(/epilogue add/);
    expect(() => new ExpertMatmul(ctx, binds, w, { ...ROUTE, experts: 4 })).toThrow(/4 experts/);
    const mm = new ExpertMatmul(ctx, binds, w, ROUTE);
    const x = createBuffer(ctx, 7 * 32 * 4, 'x');
    const y = createBuffer(ctx, 14 * 8 * 4, 'y');
    const table = uploadBuffer(ctx, new Uint32Array(routeTableLayout(ROUTE).words), 'table');
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    expect(() => mm.encode(pass, x, y, table, 8, true)).toThrow(/T = 8/);
    expect(() => mm.encode(pass, x, y, table, 7, false)).toThrow(/x has 896 bytes, needs 1792/);
    const short = createBuffer(ctx, 16, 'short');
    expect(() => mm.encode(pass, x, y, short, 1, true)).toThrow(/routing table has 16 bytes, needs 208/);
    pass.end();
    for (const b of [x, y, table, short]) b.destroy();
    mm.destroy();
    w.destroy();
  });
});
