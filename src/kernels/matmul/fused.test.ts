// The fused matmul variants (norm prologue, residual-add and SiLU / GELU-gate epilogues, stacked
// matrices) against the kernels they replace, bit for bit, and against the plain TS references.
import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32 } from '../../../test/helpers/random.js';
import { InvalidInputError } from '../../errors.js';
import { readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  CODE_BITS,
  concatRows,
  type QuantizedMatrix,
  quantize,
  sliceRows,
  type WeightFormat,
} from '../../quant/formats.js';
import { BindGroupCache } from '../bind.js';
import { AddInPlace, type GateActivation, SiluMul } from '../elementwise/elementwise.js';
import { RmsNorm, rmsNormRef } from '../norm/rmsnorm.js';
import { gatedMatmulRef, Matmul, matmulRef, prepareMatmul } from './matmul.js';
import { type GpuMatrix, uploadGatedPair, uploadMatrix } from './matrix.js';
import { gatedEpilogue, type MatmulOptions, matmulVariant, matmulWgsl } from './variant.js';

const FORMATS: WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];
// [M, N, K]: N not a multiple of the 8 columns of a GEMV workgroup; K = 688 (2.6875 super-blocks,
// 43 blocks: no multiple of a chunk of K; the narrow loads of q4_0, int4 and int2, see wideLoads);
// M = 17 runs the 8-row tile three times, the last short. K = 128, 256 and 1088 take the wide
// loads, 1088 (68 blocks) more than one per lane, in a short 8-row tile. N·K is a multiple of 256
// in each, so the shapes also make gated pairs (their up half aligned).
const SHAPES: [number, number, number][] = [
  [1, 18, 128],
  [2, 34, 256],
  [6, 16, 688],
  [17, 16, 688],
  [5, 16, 1088],
];
const EPS = 1e-5;

/** What one fused-matmul case reads: its weights, inputs, and the residual y starts from. */
interface Case {
  M: number;
  N: number;
  K: number;
  /** The matrix, or the gate and up of a gated pair. */
  w: QuantizedMatrix;
  up?: QuantizedMatrix;
  x: Float32Array; // [M, K]
  gamma: Float32Array; // [K]
  y0: Float32Array; // [M, N]
}

function makeCase(format: WeightFormat, [M, N, K]: [number, number, number], seed: number): Case {
  return {
    M,
    N,
    K,
    w: quantize(randomF32(N * K, seed), N, K, format),
    up: quantize(randomF32(N * K, seed + 1), N, K, format),
    x: randomF32(M * K, seed + 2, 3),
    gamma: randomF32(K, seed + 3),
    y0: randomF32(M * N, seed + 4, 10),
  };
}

type Fusion = Pick<MatmulOptions, 'epilogue'> & { norm?: boolean };

/** The gate activation of a gated fusion (its epilogue), else undefined. */
function gateOf(f: Fusion): GateActivation | undefined {
  return f.epilogue && gatedEpilogue(f.epilogue) ? f.epilogue : undefined;
}

/** Rows [row0, row0 + M) of a case through one fused Matmul (M = 1 with row0: a GEMV at an x offset). */
async function fused(ctx: GpuContext, c: Case, f: Fusion, M = c.M, row0 = 0): Promise<Uint32Array> {
  const opts = { epilogue: f.epilogue, ...(f.norm ? { norm: { onePlus: false } } : {}) };
  await prepareMatmul(ctx, c.w.format, c.w, M, opts);
  return runOnce(ctx, 'fused', (run) => {
    const w: GpuMatrix = run.own(
      gateOf(f) ? uploadGatedPair(ctx, c.w, c.up!, 'gu') : uploadMatrix(ctx, c.w, 'w'),
    );
    const norm = f.norm ? { weight: run.upload(c.gamma), eps: EPS } : undefined;
    const mm = run.own(
      new Matmul(ctx, run.binds, w, { maxM: M, epilogue: f.epilogue, ...(norm ? { norm } : {}) }),
    );
    const xb = run.upload(c.x);
    const yb = run.upload(c.y0.slice(row0 * c.N, (row0 + M) * c.N));
    return { encode: (pass) => mm.encode(pass, xb, yb, M, row0), read: () => readU32(ctx, yb, M * c.N) };
  });
}

/** The same through the kernels the fusion replaces: RmsNorm, Matmul(s), SiluMul, AddInPlace. */
async function unfused(ctx: GpuContext, c: Case, f: Fusion): Promise<Uint32Array> {
  const { M, N, K } = c;
  const act = gateOf(f);
  await prepareMatmul(ctx, c.w.format, c.w, M);
  await RmsNorm.prepare(ctx);
  await SiluMul.prepare(ctx, false, act);
  await AddInPlace.prepare(ctx);
  return runOnce(ctx, 'unfused', (run) => {
    const mm = (q: QuantizedMatrix) =>
      run.own(new Matmul(ctx, run.binds, run.own(uploadMatrix(ctx, q, 'w')), { maxM: M }));
    const [wm, um] = [mm(c.w), mm(c.up!)];
    const rms = run.own(new RmsNorm(ctx, run.binds, { n: K, eps: EPS }));
    const gateMul = run.own(new SiluMul(ctx, run.binds, N, false, act));
    const add = run.own(new AddInPlace(ctx, run.binds));
    const [xb, gb, hb, yb] = [run.upload(c.x), run.upload(c.gamma), run.empty(M * K * 4), run.upload(c.y0)];
    const [tmp, upOut] = [run.empty(M * N * 4), run.empty(M * N * 4)];
    const out = act ? run.empty(M * N * 4) : yb;
    return {
      encode: (pass) => {
        if (f.norm) rms.encode(pass, xb, gb, hb, M);
        const input = f.norm ? hb : xb;
        if (act) {
          wm.encode(pass, input, tmp, M);
          um.encode(pass, input, upOut, M);
          gateMul.encode(pass, [tmp, upOut], out, M);
        } else if (f.epilogue === 'add') {
          wm.encode(pass, input, tmp, M);
          add.encode(pass, tmp, yb, M * N);
        } else wm.encode(pass, input, yb, M);
      },
      read: () => readU32(ctx, out, M * N),
    };
  });
}

/** The plain TS chain: rmsNormRef, matmulRef (f64 sums), then the gate or the add; and its magnitude. */
function reference(c: Case, f: Fusion): { y: Float32Array; magnitude: Float32Array } {
  const { M, K } = c;
  const x = f.norm ? rmsNormRef(c.x, c.gamma, { n: K, eps: EPS }) : c.x;
  const act = gateOf(f);
  if (act) return gatedMatmulRef(c.w, c.up!, x, M, act);
  const g = matmulRef(c.w, x, M);
  if (f.epilogue === 'add')
    return {
      y: g.y.map((v, i) => v + c.y0[i]!),
      magnitude: g.magnitude.map((a, i) => a + Math.abs(c.y0[i]!)),
    };
  return g;
}

function expectClose(got: Uint32Array, want: { y: Float32Array; magnitude: Float32Array }): void {
  const y = new Float32Array(got.buffer);
  let worst = 0;
  for (let i = 0; i < y.length; i++)
    worst = Math.max(worst, Math.abs(y[i]! - want.y[i]!) / (1e-4 * want.magnitude[i]! + 1e-30));
  expect(worst).toBeLessThanOrEqual(1);
}

const FUSIONS: [string, Fusion][] = [
  ['norm', { norm: true }],
  ['add', { epilogue: 'add' }],
  ['silu', { epilogue: 'silu' }],
  ['norm + silu', { norm: true, epilogue: 'silu' }],
  ['norm + add', { norm: true, epilogue: 'add' }],
];

// The matmul kernel uses no subgroup operation (its lanes' sums are added in a fixed order in
// workgroup memory, or each thread walks the whole K; the fusions are template branches of the same
// kernel), so the tests run on the default device (matmul.test.ts checks that a device without
// subgroups gives the same bits), once per layout (GpuContext.kernels): the unfused kernels run on
// the same device, so both sides take its layout.
const LAYOUTS = [
  ['split-K', 'gpu'],
  ['serial', 'serial'],
] as const;

describe.each(LAYOUTS)('fused matmul, %s', (_layout, kernels) => {
  const context = () => gpu({ kernels });
  describe.each(FUSIONS)('%s', (_name, f) => {
    it.each(FORMATS)('%s: the bits of the unfused kernels, close to the TS reference', async (format) => {
      const ctx = await context();
      for (const [i, shape] of SHAPES.entries()) {
        const c = makeCase(format, shape, 100 + 10 * i);
        const got = await fused(ctx, c, f);
        expect(Array.from(got)).toEqual(Array.from(await unfused(ctx, c, f)));
        expectClose(got, reference(c, f));
      }
    });
  });

  // GeGLU: the gelu epilogue is the silu one's code with another activation (gate_act.wgsl), so
  // two cases: the GEMV alone (wide loads), and after the norm in a short 4-row tile (narrow loads).
  it.each(FORMATS)(
    '%s: gelu, and norm + gelu: the unfused bits, close to the TS reference',
    async (format) => {
      const ctx = await context();
      const cases: [[number, number, number], Fusion][] = [
        [[1, 18, 128], { epilogue: 'gelu' }],
        [[3, 16, 688], { norm: true, epilogue: 'gelu' }],
      ];
      for (const [i, [shape, f]] of cases.entries()) {
        const c = makeCase(format, shape, 200 + 10 * i);
        const got = await fused(ctx, c, f);
        expect(Array.from(got)).toEqual(Array.from(await unfused(ctx, c, f)));
        expectClose(got, reference(c, f));
      }
    },
  );

  it.each(FORMATS)('%s: each fused row is bit-identical at M = 1 and in a batch', async (format) => {
    const ctx = await context();
    const c = makeCase(format, [64, 16, 688], 7);
    // Batches of 2, 3, 17, 33 and 64 rows (every tile, and the 8-row tile looped with a short last
    // tile) against the GEMV at rows in every tile position.
    const rows = [0, 1, 2, 7, 16, 32, 63];
    for (const [, f] of FUSIONS) {
      const alone: Uint32Array[] = [];
      for (const r of rows) alone.push(await fused(ctx, c, f, 1, r));
      for (const M of [2, 3, 17, 33, 64]) {
        const batch = await fused(ctx, c, f, M);
        rows.forEach((r, i) => {
          if (r < M)
            expect(Array.from(alone[i]!)).toEqual(Array.from(batch.subarray(r * c.N, (r + 1) * c.N)));
        });
      }
    }
  });
});

// The GGUF block formats a K-quant mix places as stored and the runner fuses: q6_k (6-bit planar
// codes), q5_k (5-bit, Q4_K's sub-scales) and q5_0 (5-bit, the fallback of a Q4_K row that is no
// whole super-block; q4_1 and q5_1 differ from these only in their grid, matmul.test.ts's). The
// fusions the runner picks (norm before q|k|v, add after o and down, the gate after a norm or a
// rotation; the activation is gate_act.wgsl's whatever the format), in the GEMV (wide loads) and
// in an 8-row tile run twice and once short (K = 1088: q6_k's wide loads, the 5-bit formats'
// narrow ones). N·K is a multiple of 512 so that a gated pair's up half starts on a block.
const GGUF_FORMATS: WeightFormat[] = ['q5_0', 'q5_k', 'q6_k'];
const GGUF_SHAPES: [number, number, number][] = [
  [1, 34, 256],
  [17, 16, 1088],
];
const RUNNER_FUSIONS: Fusion[] = [
  { norm: true },
  { epilogue: 'add' },
  { epilogue: 'silu' },
  { norm: true, epilogue: 'silu' },
];

describe.each(LAYOUTS)('fused matmul on GGUF block formats, %s', (_layout, kernels) => {
  // The serial form's q5_0 walks K as q5_k's does (a grid per 32, two blocks per GEMV trip), its
  // fusions costing SwiftShader 20 s of compiles: q5_k and q6_k stand for the planar codes there.
  it.each(kernels === 'serial' ? GGUF_FORMATS.filter((f) => f !== 'q5_0') : GGUF_FORMATS)(
    "%s: the runner's fusions give the unfused bits, close to the TS reference",
    async (format) => {
      const ctx = await gpu({ kernels });
      for (const f of RUNNER_FUSIONS)
        for (const [i, shape] of GGUF_SHAPES.entries()) {
          const c = makeCase(format, shape, 300 + 10 * i);
          const got = await fused(ctx, c, f);
          expect(Array.from(got)).toEqual(Array.from(await unfused(ctx, c, f)));
          expectClose(got, reference(c, f));
        }
    },
  );
});

describe.each(LAYOUTS)('stacked matrices, %s', (_layout, kernels) => {
  it.each(FORMATS)('%s: q;k;v as one matrix gives each piece its own matmul bits', async (format) => {
    const ctx = await gpu({ kernels });
    const [M, K] = [3, 256];
    const pieces = [24, 8, 8].map((n, i) => quantize(randomF32(n * K, 40 + i), n, K, format));
    const x = randomF32(M * K, 50);
    const alone = await Promise.all(pieces.map((q) => plain(ctx, q, x, M)));
    const joined = await plain(ctx, concatRows(pieces), x, M);
    // Row m of the stacked output is [q | k | v].
    const N = 40;
    for (let m = 0; m < M; m++) {
      let at = 0;
      pieces.forEach((q, i) => {
        expect(Array.from(joined.subarray(m * N + at, m * N + at + q.rows))).toEqual(
          Array.from(alone[i]!.subarray(m * q.rows, (m + 1) * q.rows)),
        );
        at += q.rows;
      });
    }
  });

  it('throws InvalidInputError when a piece would not end on a block, or formats differ', () => {
    // int4: 3 rows of 128 = 384 elements, not a multiple of 256.
    const odd = quantize(randomF32(3 * 128, 1), 3, 128, 'int4');
    const even = quantize(randomF32(2 * 128, 2), 2, 128, 'int4');
    expect(() => concatRows([odd, even])).toThrow(InvalidInputError);
    expect(() => concatRows([odd, even])).toThrow(/not a multiple of 256/);
    expect(concatRows([even, odd]).rows).toBe(5); // the last piece may end anywhere
    expect(() => concatRows([even, quantize(randomF32(256, 3), 2, 128, 'int8')])).toThrow(/int8/);
    expect(() => concatRows([])).toThrow(InvalidInputError);
    // q4_0 needs 64: one row of 48 is not enough, four are.
    const q = quantize(randomF32(4 * 48, 4), 4, 48, 'q4_0');
    expect(() => sliceRows(q, 1, 2)).toThrow(/multiple of 64/);
    expect(sliceRows(q, 0, 4).data.length).toBe(q.data.length);
  });

  it('a gated pair needs its up half on a block and matching matrices', async () => {
    const ctx = await gpu();
    const gate = quantize(randomF32(3 * 128, 1), 3, 128, 'int4');
    const up = quantize(randomF32(3 * 128, 2), 3, 128, 'int4');
    expect(() => uploadGatedPair(ctx, gate, up, 'gu')).toThrow(/not a multiple of 256/);
    const g2 = quantize(randomF32(4 * 128, 1), 4, 128, 'int4');
    expect(() => uploadGatedPair(ctx, g2, quantize(randomF32(4 * 128, 2), 4, 128, 'int8'), 'gu')).toThrow(
      InvalidInputError,
    );
    const pair = uploadGatedPair(ctx, g2, quantize(randomF32(4 * 128, 2), 4, 128, 'int4'), 'gu');
    expect(() => new Matmul(ctx, new BindGroupCache(ctx.device), pair)).toThrow(/gated pair/);
    pair.destroy();
    const plainW = uploadMatrix(ctx, g2, 'w');
    expect(() => new Matmul(ctx, new BindGroupCache(ctx.device), plainW, { epilogue: 'gelu' })).toThrow(
      /epilogue gelu needs a gated pair/,
    );
    plainW.destroy();
  });

  it.each(FORMATS)('%s: a gated pair split into parts gives the bits of a whole one', async (format) => {
    const ctx = await gpu({ kernels });
    const c = makeCase(format, [2, 40, 256], 60);
    const f: Fusion = { epilogue: 'silu' };
    const whole = await fused(ctx, c, f);
    // Parts of 16 rows (two copies each): 16, 16, 8.
    const bytes = (2 * 16 * 256 * CODE_BITS[format]) / 8;
    const parts = uploadGatedPair(ctx, c.w, c.up!, 'gu', bytes);
    expect(parts.parts.map((p) => p.rows)).toEqual([16, 16, 8]);
    await prepareMatmul(ctx, format, { rows: 3, cols: 256 }, 2, { epilogue: 'silu' });
    const split = await runOnce(ctx, 'split', (run) => {
      const mm = run.own(new Matmul(ctx, run.binds, run.own(parts), { maxM: 2, epilogue: 'silu' }));
      const [xb, yb] = [run.upload(c.x), run.empty(2 * 40 * 4)];
      return { encode: (pass) => mm.encode(pass, xb, yb, 2), read: () => readU32(ctx, yb, 80) };
    });
    expect(Array.from(split)).toEqual(Array.from(whole));
  });
});

/** y = x · Wᵀ through a plain Matmul. */
async function plain(ctx: GpuContext, q: QuantizedMatrix, x: Float32Array, M: number): Promise<Uint32Array> {
  await prepareMatmul(ctx, q.format, q, M);
  return runOnce(ctx, 'plain', (run) => {
    const mm = run.own(new Matmul(ctx, run.binds, run.own(uploadMatrix(ctx, q, 'w')), { maxM: M }));
    const [xb, yb] = [run.upload(x), run.empty(M * q.rows * 4)];
    return { encode: (pass) => mm.encode(pass, xb, yb, M), read: () => readU32(ctx, yb, M * q.rows) };
  });
}

describe('f16 weights', () => {
  const device = (f16: boolean) => ({ features: { subgroups: true, f16, timestamps: false } });
  it('are widened by unpack2x16float on every device: no matmul enables f16', () => {
    // A variant that bitcast the words to vec2<f16> computed wrong values under wgpu (naga) on lavapipe.
    for (const f16 of [false, true])
      for (const format of FORMATS) {
        const [key, source] = matmulWgsl(
          format,
          1,
          matmulVariant(device(f16), format, { rows: 8, cols: 128 }),
        );
        expect(key).not.toMatch(/\bHALF\b/);
        expect(source().code).not.toMatch(/enable f16|vec2<f16>/);
      }
  });
});
