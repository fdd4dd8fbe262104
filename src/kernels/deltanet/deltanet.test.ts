import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { InvalidInputError } from '../../errors.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { visWords } from '../attention/attention-split.js';
import { BindGroupCache } from '../bind.js';
import { DeltaNet } from './deltanet.js';
import {
  type DeltaNetShape,
  type DeltaNetState,
  type DeltaNetWeights,
  deltaNetRef,
  deltaNetSizes,
} from './reference.js';

function rand(n: number, seed: number, scale = 1, offset = 0): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale + offset;
  });
}

/** Worst |got - want| / (1 + |want|): relative for large values, absolute near zero. */
function maxRelErr(got: Float32Array, want: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < want.length; i++)
    worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
  return worst;
}

function bits(x: Float32Array): number[] {
  return Array.from(new Uint32Array(x.slice().buffer));
}

/** Random weights, and a random prior state (used unless a pass starts at position 0). */
function makeLayer(
  shape: DeltaNetShape,
  seed: number,
): { weights: DeltaNetWeights<Float32Array>; state: DeltaNetState<Float32Array> } {
  const { valueHeads: Hv, keyDim: dk, valueDim: dv, convKernel: K } = shape;
  const { channels: C } = deltaNetSizes(shape);
  return {
    weights: {
      convWeight: rand(C * K, seed, 0.6),
      aLog: rand(Hv, seed + 1, 1.5, -0.5),
      dtBias: rand(Hv, seed + 2, 1),
      normWeight: rand(dv, seed + 3, 0.3, 1),
    },
    state: { conv: rand((K - 1) * C, seed + 4, 1), recurrent: rand(Hv * dk * dv, seed + 5, 0.5) },
  };
}

/** Projection rows [T, P]: q|k|v in ±1, z in ±2, b and a in ±3. */
function makeProj(shape: DeltaNetShape, T: number, seed: number): Float32Array {
  const { channels: C, row: P } = deltaNetSizes(shape);
  const proj = rand(T * P, seed, 2);
  for (let t = 0; t < T; t++) {
    for (let c = 0; c < C; c++) proj[t * P + c]! /= 2;
    for (let c = C + shape.valueHeads * shape.valueDim; c < P; c++) proj[t * P + c]! *= 1.5;
  }
  return proj;
}

interface Pass {
  /** [T, P] */
  proj: Float32Array;
  /** [T] */
  positions: Uint32Array;
}

interface GpuResult {
  /** Each pass's out [T, valueWidth]. */
  outs: Float32Array[];
  /** The last pass's conv output [T, C]. */
  conv: Float32Array;
  state: DeltaNetState<Float32Array>;
}

/** Encodes `passes` in order (one compute pass) on one DeltaNet from `state`, and reads back. */
async function runGpu(
  ctx: GpuContext,
  shape: DeltaNetShape,
  maxRows: number,
  weights: DeltaNetWeights<Float32Array>,
  state: DeltaNetState<Float32Array>,
  passes: Pass[],
): Promise<GpuResult> {
  const { valueWidth: VW, channels: C, row: P } = deltaNetSizes(shape);
  await DeltaNet.prepare(ctx, shape);
  return runOnce(ctx, 'deltanet', (run) => {
    const net = run.own(new DeltaNet(ctx, run.binds, shape, maxRows));
    // A row buffer holds maxRows rows, whatever T (the kernels may read up to maxRows).
    const padded = (x: Float32Array | Uint32Array, n: number) => {
      const bytes = new Uint8Array(n * 4);
      bytes.set(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      return run.upload(bytes);
    };
    const w = {
      convWeight: run.upload(weights.convWeight),
      aLog: run.upload(weights.aLog),
      dtBias: run.upload(weights.dtBias),
      normWeight: run.upload(weights.normWeight),
    };
    // The state alternates between two pairs of buffers, as the runner keeps it.
    const s = [
      { conv: run.upload(state.conv), recurrent: run.upload(state.recurrent) },
      { conv: run.empty(state.conv.byteLength), recurrent: run.empty(state.recurrent.byteLength) },
    ];
    const after = s[passes.length % 2]!;
    const bufs = passes.map((p) => ({
      T: p.positions.length,
      proj: padded(p.proj, maxRows * P),
      positions: padded(p.positions, maxRows),
      count: run.upload(Uint32Array.of(p.positions.length)),
      out: run.empty(maxRows * VW * 4),
    }));
    const last = bufs.at(-1)!;
    return {
      encode: (pass) => {
        bufs.forEach((b, i) => {
          net.encode(pass, b.proj, b.positions, b.count, b.out, w, s[i % 2]!, s[(i + 1) % 2]!);
        });
      },
      read: async () => ({
        outs: await Promise.all(bufs.map((b) => readF32(ctx, b.out, b.T * VW))),
        conv: await readF32(ctx, net.conv, last.T * C),
        state: {
          conv: await readF32(ctx, after.conv, state.conv.length),
          recurrent: await readF32(ctx, after.recurrent, state.recurrent.length),
        },
      }),
    };
  });
}

/** Rows [from, from + n) of x [rows, width]. */
function rowsOf(x: Float32Array, width: number, from: number, n: number): Float32Array {
  return x.slice(from * width, (from + n) * width);
}

const SHAPES: [string, DeltaNetShape][] = [
  [
    'Hk=1 Hv=3 dk=12 dv=20 K=4',
    { keyHeads: 1, valueHeads: 3, keyDim: 12, valueDim: 20, convKernel: 4, eps: 1e-6 },
  ],
  [
    'Hk=2 Hv=4 dk=16 dv=8 K=3',
    { keyHeads: 2, valueHeads: 4, keyDim: 16, valueDim: 8, convKernel: 3, eps: 1e-5 },
  ],
  [
    'Hk=1 Hv=2 dk=256 dv=5 K=2',
    { keyHeads: 1, valueHeads: 2, keyDim: 256, valueDim: 5, convKernel: 2, eps: 1e-6 },
  ],
  [
    'Hk=2 Hv=4 dk=128 dv=128 K=4',
    { keyHeads: 2, valueHeads: 4, keyDim: 128, valueDim: 128, convKernel: 4, eps: 1e-6 },
  ],
];

// Relative tolerances (|got - want| / (1 + |want|)): f32 on both sides, but the GPU sums in another
// order, its inverseSqrt, exp and log are within a few ulp, and the recurrence carries differences
// from row to row (37 rows here). SwiftShader's worst: conv 1.4e-7, out 2.3e-6, state 1.8e-7.
// The conv state is a copy of inputs: exact.
const TOL = { conv: 1e-6, out: 2e-5, state: 1e-5 };

describe('Gated DeltaNet kernels vs the TS reference', () => {
  const cases = SHAPES.flatMap(([name, shape], i) =>
    [1, 5, 37].flatMap((T) => [true, false].map((fresh) => [name, T, fresh, shape, i] as const)),
  );
  it.each(cases)('%s, T=%i, fresh=%s', async (_, T, fresh, shape, i) => {
    const ctx = await gpu();
    const seed = 1000 * i + 10 * T + (fresh ? 1 : 0);
    const { weights, state } = makeLayer(shape, seed);
    const start = fresh ? 0 : 17 + T;
    const pass = {
      proj: makeProj(shape, T, seed + 7),
      positions: Uint32Array.from({ length: T }, (_, t) => start + t),
    };
    const got = await runGpu(ctx, shape, T + 2, weights, state, [pass]);
    const refState = { conv: state.conv.slice(), recurrent: state.recurrent.slice() };
    const want = deltaNetRef(shape, pass.proj, weights, refState, fresh);
    expect(maxRelErr(got.conv, want.conv)).toBeLessThanOrEqual(TOL.conv);
    expect(maxRelErr(got.state.conv, refState.conv)).toBe(0);
    expect(maxRelErr(got.outs[0]!, want.out)).toBeLessThanOrEqual(TOL.out);
    expect(maxRelErr(got.state.recurrent, refState.recurrent)).toBeLessThanOrEqual(TOL.state);
  });

  it.each(
    SHAPES.slice(0, 2).flatMap(([name, shape]) =>
      [true, false].map((fresh) => [name, fresh, shape] as const),
    ),
  )(
    '%s, fresh=%s: one pass of 7 rows, passes of 3 + 4 and 7 passes of 1 are bit-identical',
    async (_, fresh, shape) => {
      const ctx = await gpu();
      const { weights, state } = makeLayer(shape, 77);
      const { valueWidth: VW, channels: C, row: P } = deltaNetSizes(shape);
      const proj = makeProj(shape, 7, 78);
      const start = fresh ? 0 : 40;
      const split = (sizes: number[]) => {
        let at = 0;
        return sizes.map((n) => {
          const p = {
            proj: rowsOf(proj, P, at, n),
            positions: Uint32Array.from({ length: n }, (_, t) => start + at + t),
          };
          at += n;
          return p;
        });
      };
      const whole = await runGpu(ctx, shape, 7, weights, state, split([7]));
      for (const sizes of [
        [3, 4],
        [1, 1, 1, 1, 1, 1, 1],
      ]) {
        const parts = await runGpu(ctx, shape, 7, weights, state, split(sizes));
        const out = new Float32Array(7 * VW);
        let at = 0;
        for (const o of parts.outs) {
          out.set(o, at);
          at += o.length;
        }
        expect(bits(out)).toEqual(bits(whole.outs[0]!));
        expect(bits(parts.conv)).toEqual(bits(rowsOf(whole.conv, C, 7 - sizes.at(-1)!, sizes.at(-1)!)));
        expect(bits(parts.state.conv)).toEqual(bits(whole.state.conv));
        expect(bits(parts.state.recurrent)).toEqual(bits(whole.state.recurrent));
      }
    },
  );

  it.each(
    SHAPES.slice(0, 2).flatMap(([name, shape]) =>
      [true, false].map((fresh) => [name, fresh, shape] as const),
    ),
  )(
    '%s, fresh=%s: a draft tree’s rows are bit-identical to their paths run as chains',
    async (_, fresh, shape) => {
      const ctx = await gpu();
      const { weights, state } = makeLayer(shape, 91);
      const { valueWidth: VW, channels: C, row: P } = deltaNetSizes(shape);
      // Depth first: 0 → {1 → {2 → 3, 4}, 5 → 6}, 7 (a second root).
      const parents = [-1, 0, 1, 2, 1, 0, 5, -1];
      const T = parents.length;
      const ends = parents.map((_, i) => {
        let e = i;
        for (let j = i + 1; j < T; j++) {
          let a = parents[j]!;
          while (a > i) a = parents[a]!;
          if (a === i) e = j;
        }
        return e;
      });
      const proj = makeProj(shape, T, 92);
      const start = fresh ? 0 : 30;
      const depthOf = (p: number): number => (p < 0 ? 0 : 1 + depthOf(parents[p]!));
      const depth = parents.map(depthOf);
      await DeltaNet.prepare(ctx, shape);
      const tree = await runOnce(ctx, 'deltanet-tree', (run) => {
        const net = run.own(new DeltaNet(ctx, run.binds, shape, T));
        const w = {
          convWeight: run.upload(weights.convWeight),
          aLog: run.upload(weights.aLog),
          dtBias: run.upload(weights.dtBias),
          normWeight: run.upload(weights.normWeight),
        };
        const from = { conv: run.upload(state.conv), recurrent: run.upload(state.recurrent) };
        const to = {
          conv: run.empty(state.conv.byteLength),
          recurrent: run.empty(state.recurrent.byteLength),
        };
        const b = {
          proj: run.upload(proj),
          positions: run.upload(Uint32Array.from(depth, (d) => start + d)),
          count: run.upload(Uint32Array.of(T)),
          out: run.empty(T * VW * 4),
          vis: run.upload(visWords(ends)),
        };
        return {
          encode: (pass) =>
            net.encode(pass, b.proj, b.positions, b.count, b.out, w, from, to, { vis: b.vis, rows: T }),
          read: async () => ({
            out: await readF32(ctx, b.out, T * VW),
            conv: await readF32(ctx, net.conv, T * C),
            from: await readF32(ctx, from.recurrent, state.recurrent.length),
          }),
        };
      });
      // The committed state is only read.
      expect(bits(tree.from)).toEqual(bits(state.recurrent));
      for (let r = 0; r < T; r++) {
        const path: number[] = [];
        for (let a = r; a >= 0; a = parents[a]!) path.unshift(a);
        const chain = await runGpu(ctx, shape, path.length, weights, state, [
          {
            proj: Float32Array.from(path.flatMap((i) => [...rowsOf(proj, P, i, 1)])),
            positions: Uint32Array.from(path, (_, d) => start + d),
          },
        ]);
        const last = path.length - 1;
        expect(bits(rowsOf(tree.out, VW, r, 1)), `row ${r}`).toEqual(
          bits(rowsOf(chain.outs[0]!, VW, last, 1)),
        );
        expect(bits(rowsOf(tree.conv, C, r, 1)), `row ${r} conv`).toEqual(
          bits(rowsOf(chain.conv, C, last, 1)),
        );
      }
    },
  );

  it('encoding writes no buffer; bad shapes and buffers throw InvalidInputError naming the value', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const shape = SHAPES[1]![1];
    const bad: [Partial<DeltaNetShape>, RegExp][] = [
      [{ keyHeads: 3 }, /valueHeads \(4\) must be a multiple of keyHeads \(3\)/],
      [{ keyDim: 300 }, /keyDim must be ≤ 256, got 300/],
      [{ valueDim: 0 }, /valueDim must be ≥ 1, got 0/],
      [{ convKernel: 1 }, /convKernel must be in 2\.\.16, got 1/],
      [{ eps: -1 }, /eps must be ≥ 0, got -1/],
    ];
    for (const [change, message] of bad) {
      expect(() => new DeltaNet(ctx, binds, { ...shape, ...change }, 4)).toThrow(InvalidInputError);
      expect(() => new DeltaNet(ctx, binds, { ...shape, ...change }, 4)).toThrow(message);
    }
    expect(() => new DeltaNet(ctx, binds, shape, 0)).toThrow(/maxRows must be ≥ 1, got 0/);
    expect(() =>
      deltaNetRef(shape, new Float32Array(5), makeLayer(shape, 1).weights, makeLayer(shape, 1).state, true),
    ).toThrow(/proj holds 5 values/);

    await DeltaNet.prepare(ctx, shape);
    const net = new DeltaNet(ctx, binds, shape, 4);
    const { weights, state } = makeLayer(shape, 5);
    const { valueWidth: VW, row: P } = deltaNetSizes(shape);
    const buf = (bytes: number) => ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE });
    const w = {
      convWeight: buf(weights.convWeight.byteLength),
      aLog: buf(weights.aLog.byteLength),
      dtBias: buf(weights.dtBias.byteLength),
      normWeight: buf(weights.normWeight.byteLength),
    };
    const s = { conv: buf(state.conv.byteLength), recurrent: buf(state.recurrent.byteLength) };
    const s2 = { conv: buf(state.conv.byteLength), recurrent: buf(state.recurrent.byteLength) };
    const [proj, positions, count, out, short] = [
      buf(4 * P * 4),
      buf(16),
      buf(4),
      buf(4 * VW * 4),
      buf(4 * P * 4 - 4),
    ];
    const writes = ctx.counter.writes;
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    net.encode(pass, proj, positions, count, out, w, s, s2);
    expect(ctx.counter.writes).toBe(writes);
    expect(() => net.encode(pass, short, positions, count, out, w, s, s2)).toThrow(
      new RegExp(`proj holds ${4 * P * 4 - 4} bytes, need ${4 * P * 4}`),
    );
    expect(() => net.encode(pass, proj, positions, count, out, w, { ...s, recurrent: w.aLog }, s2)).toThrow(
      /from.recurrent holds 16 bytes, need 2048/,
    );
    expect(() => net.encode(pass, proj, positions, count, out, w, s, s)).toThrow(
      /read from one buffer and written to another/,
    );
    pass.end();
    for (const b of [
      proj,
      positions,
      count,
      out,
      short,
      ...Object.values(w),
      ...Object.values(s),
      ...Object.values(s2),
    ])
      b.destroy();
    net.destroy();
  });
});
