import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { InvalidInputError } from '../../errors.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { visWords } from '../attention/attention-split.js';
import { BindGroupCache } from '../bind.js';
import { type ShortConvShape, shortConvKernelRef } from './reference.js';
import { ShortConv } from './shortconv.js';

function rand(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
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

/** Rows [from, from + n) of x [rows, width]. */
function rowsOf(x: Float32Array, width: number, from: number, n: number): Float32Array {
  return x.slice(from * width, (from + n) * width);
}

interface Pass {
  /** [T, 3H] */
  proj: Float32Array;
  /** [T] */
  positions: Uint32Array;
}

/**
 * Encodes `passes` in order (one compute pass) on one ShortConv from `window`, the window
 * alternating between two buffers as the runner keeps it; reads back each pass's output and the
 * window after the last.
 */
async function runChain(
  ctx: GpuContext,
  shape: ShortConvShape,
  maxRows: number,
  weight: Float32Array,
  window: Float32Array,
  passes: Pass[],
): Promise<{ outs: Float32Array[]; window: Float32Array }> {
  const H = shape.channels;
  await ShortConv.prepare(ctx, shape);
  return runOnce(ctx, 'shortconv', (run) => {
    const op = run.own(new ShortConv(ctx, run.binds, shape, maxRows));
    // A row buffer holds maxRows rows, whatever T.
    const padded = (x: Float32Array | Uint32Array, n: number) => {
      const bytes = new Uint8Array(n * 4);
      bytes.set(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      return run.upload(bytes);
    };
    const w = run.upload(weight);
    const s = [run.upload(window), run.empty(window.byteLength)];
    const after = s[passes.length % 2]!;
    const bufs = passes.map((p) => ({
      T: p.positions.length,
      proj: padded(p.proj, maxRows * 3 * H),
      positions: padded(p.positions, maxRows),
      count: run.upload(Uint32Array.of(p.positions.length)),
      out: run.empty(maxRows * H * 4),
    }));
    return {
      encode: (pass) =>
        bufs.forEach((b, i) => {
          op.encode(pass, b.proj, b.positions, b.count, w, b.out, s[i % 2]!, s[(i + 1) % 2]!);
        }),
      read: async () => ({
        outs: await Promise.all(bufs.map((b) => readF32(ctx, b.out, b.T * H))),
        window: await readF32(ctx, after, window.length),
      }),
    };
  });
}

// H not a multiple of the workgroup (64), one below it, and a real model's width.
const SHAPES: [string, ShortConvShape][] = [
  ['H=100 K=3', { channels: 100, kernel: 3 }],
  ['H=37 K=4', { channels: 37, kernel: 4 }],
  ['H=1024 K=3', { channels: 1024, kernel: 3 }],
  ['H=65 K=2', { channels: 65, kernel: 2 }],
];

// f32 products summed in another order (and maybe fused) on the GPU than the reference's f64 sum
// of K terms rounded once: a few ulp. The window is a copy of products: exact.
const TOL = 1e-6;

describe('short-convolution kernel vs the TS reference', () => {
  const cases = SHAPES.flatMap(([name, shape], i) =>
    [1, 5, 37].flatMap((T) => [true, false].map((fresh) => [name, T, fresh, shape, i] as const)),
  );
  it.each(cases)('%s, T=%i, fresh=%s', async (_, T, fresh, shape, i) => {
    const ctx = await gpu();
    const { channels: H, kernel: K } = shape;
    const seed = 1000 * i + 10 * T + (fresh ? 1 : 0);
    const weight = rand(H * K, seed, 0.8);
    const window = rand((K - 1) * H, seed + 1);
    const start = fresh ? 0 : 11 + T;
    const pass = {
      proj: rand(T * 3 * H, seed + 2, 1.5),
      positions: Uint32Array.from({ length: T }, (_, t) => start + t),
    };
    const got = await runChain(ctx, shape, T + 2, weight, window, [pass]);
    const refWindow = window.slice();
    const want = shortConvKernelRef(shape, pass.proj, weight, refWindow, fresh);
    expect(maxRelErr(got.outs[0]!, want)).toBeLessThanOrEqual(TOL);
    expect(bits(got.window)).toEqual(bits(refWindow));
  });

  it.each(SHAPES.slice(0, 2).flatMap(([name, shape]) => [true, false].map((f) => [name, f, shape] as const)))(
    '%s, fresh=%s: a chain in one pass of 9 rows, in passes of 2 + 3 + 4 and of 1 are bit-identical',
    async (_, fresh, shape) => {
      const ctx = await gpu();
      const { channels: H, kernel: K } = shape;
      const weight = rand(H * K, 71, 0.8);
      const window = rand((K - 1) * H, 72);
      const proj = rand(9 * 3 * H, 73, 1.5);
      const start = fresh ? 0 : 40;
      const split = (sizes: number[]) => {
        let at = 0;
        return sizes.map((n) => {
          const p = {
            proj: rowsOf(proj, 3 * H, at, n),
            positions: Uint32Array.from({ length: n }, (_, t) => start + at + t),
          };
          at += n;
          return p;
        });
      };
      const whole = await runChain(ctx, shape, 9, weight, window, split([9]));
      const refWindow = window.slice();
      expect(
        maxRelErr(whole.outs[0]!, shortConvKernelRef(shape, proj, weight, refWindow, fresh)),
      ).toBeLessThan(TOL);
      expect(bits(whole.window)).toEqual(bits(refWindow));
      for (const sizes of [[2, 3, 4], Array<number>(9).fill(1)]) {
        const parts = await runChain(ctx, shape, 9, weight, window, split(sizes));
        const out = new Float32Array(9 * H);
        let at = 0;
        for (const o of parts.outs) {
          out.set(o, at);
          at += o.length;
        }
        expect(bits(out), sizes.join('+')).toEqual(bits(whole.outs[0]!));
        expect(bits(parts.window), sizes.join('+')).toEqual(bits(whole.window));
      }
    },
  );

  it.each(SHAPES.slice(0, 2).flatMap(([name, shape]) => [true, false].map((f) => [name, f, shape] as const)))(
    '%s, fresh=%s: a draft tree’s rows are bit-identical to their paths run as chains',
    async (_, fresh, shape) => {
      const ctx = await gpu();
      const { channels: H, kernel: K } = shape;
      const weight = rand(H * K, 91, 0.8);
      const window = rand((K - 1) * H, 92);
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
      const proj = rand(T * 3 * H, 93, 1.5);
      const start = fresh ? 0 : 30;
      const depthOf = (p: number): number => (p < 0 ? 0 : 1 + depthOf(parents[p]!));
      await ShortConv.prepare(ctx, shape);
      const tree = await runOnce(ctx, 'shortconv-tree', (run) => {
        const op = run.own(new ShortConv(ctx, run.binds, shape, T));
        const from = run.upload(window);
        const b = {
          proj: run.upload(proj),
          positions: run.upload(Uint32Array.from(parents, (p) => start + depthOf(p))),
          count: run.upload(Uint32Array.of(T)),
          weight: run.upload(weight),
          out: run.empty(T * H * 4),
          to: run.empty(window.byteLength),
          vis: run.upload(visWords(ends)),
        };
        return {
          encode: (pass) =>
            op.encode(pass, b.proj, b.positions, b.count, b.weight, b.out, from, b.to, {
              vis: b.vis,
              rows: T,
            }),
          read: async () => ({
            out: await readF32(ctx, b.out, T * H),
            from: await readF32(ctx, from, window.length),
            to: await readF32(ctx, b.to, window.length),
          }),
        };
      });
      // The committed window is only read, and the tree writes no window.
      expect(bits(tree.from)).toEqual(bits(window));
      expect(tree.to.every((v) => v === 0)).toBe(true);
      for (let r = 0; r < T; r++) {
        const path: number[] = [];
        for (let a = r; a >= 0; a = parents[a]!) path.unshift(a);
        const pathProj = Float32Array.from(path.flatMap((i) => [...rowsOf(proj, 3 * H, i, 1)]));
        const chain = await runChain(ctx, shape, path.length, weight, window, [
          { proj: pathProj, positions: Uint32Array.from(path, (_, d) => start + d) },
        ]);
        const last = path.length - 1;
        expect(bits(rowsOf(tree.out, H, r, 1)), `row ${r}`).toEqual(bits(rowsOf(chain.outs[0]!, H, last, 1)));
        const want = shortConvKernelRef(shape, pathProj, weight, window.slice(), fresh);
        expect(maxRelErr(rowsOf(tree.out, H, r, 1), rowsOf(want, H, last, 1))).toBeLessThanOrEqual(TOL);
      }
    },
  );

  it('encoding writes no buffer; bad shapes and buffers throw InvalidInputError naming the value', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const shape = SHAPES[0]![1];
    expect(() => new ShortConv(ctx, binds, { ...shape, kernel: 1 }, 4)).toThrow(InvalidInputError);
    expect(() => new ShortConv(ctx, binds, { ...shape, kernel: 17 }, 4)).toThrow(
      /kernel must be in 2\.\.16, got 17/,
    );
    expect(() => new ShortConv(ctx, binds, { ...shape, channels: 0 }, 4)).toThrow(
      /channels must be ≥ 1, got 0/,
    );
    expect(() => new ShortConv(ctx, binds, shape, 0)).toThrow(/maxRows must be ≥ 1, got 0/);
    expect(() =>
      shortConvKernelRef(shape, new Float32Array(5), new Float32Array(300), new Float32Array(200), true),
    ).toThrow(/proj holds 5 values/);
    await ShortConv.prepare(ctx, shape);
    const op = new ShortConv(ctx, binds, shape, 4);
    const H = shape.channels;
    const buf = (bytes: number) => ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE });
    const [proj, positions, count, weight, out, a, b, short] = [
      buf(4 * 3 * H * 4),
      buf(16),
      buf(4),
      buf(H * 3 * 4),
      buf(4 * H * 4),
      buf(2 * H * 4),
      buf(2 * H * 4),
      buf(4 * 3 * H * 4 - 4),
    ];
    const writes = ctx.counter.writes;
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    op.encode(pass, proj, positions, count, weight, out, a, b);
    expect(ctx.counter.writes).toBe(writes);
    expect(() => op.encode(pass, short, positions, count, weight, out, a, b)).toThrow(
      new RegExp(`proj holds ${4 * 3 * H * 4 - 4} bytes, need ${4 * 3 * H * 4}`),
    );
    expect(() => op.encode(pass, proj, positions, count, weight, out, a, a)).toThrow(
      /read from one buffer and written to another/,
    );
    expect(() => op.encode(pass, proj, positions, count, weight, out, a, b, { vis: count, rows: 5 })).toThrow(
      /a tree of 5 rows \(1\.\.4\)/,
    );
    pass.end();
    for (const x of [proj, positions, count, weight, out, a, b, short]) x.destroy();
    op.destroy();
  });
});
