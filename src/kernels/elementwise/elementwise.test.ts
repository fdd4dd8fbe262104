import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import {
  AddInPlace,
  type GateActivation,
  GatherRows,
  gatherRowsRef,
  geluTanh,
  SigmoidGate,
  type SigmoidGateOptions,
  SiluMul,
  sigmoidGateRef,
  siluMulRef,
} from './elementwise.js';
import { ScaleInPlace, Softcap, scaleRef, softcapRef } from './scale.js';

/** Runs {@link SiluMul} once (fused when `up` is null: `gate` is then [M, 2I]) and reads h [M, I]. */
async function runSiluMul(
  ctx: GpuContext,
  gate: Float32Array,
  up: Float32Array | null,
  M: number,
  I: number,
  activation: GateActivation = 'silu',
): Promise<Float32Array> {
  await SiluMul.prepare(ctx, up === null, activation);
  return runOnce(ctx, 'silu', (run) => {
    const op = run.own(new SiluMul(ctx, run.binds, I, up === null, activation));
    const inputs = [gate, ...(up ? [up] : [])].map((a) => run.upload(a));
    const h = run.empty(M * I * 4);
    return { encode: (pass) => op.encode(pass, inputs, h, M), read: () => readF32(ctx, h, M * I) };
  });
}

/** Runs {@link AddInPlace} once and returns y + x. */
async function runAdd(ctx: GpuContext, x: Float32Array, y: Float32Array): Promise<Float32Array> {
  await AddInPlace.prepare(ctx);
  return runOnce(ctx, 'add', (run) => {
    const op = run.own(new AddInPlace(ctx, run.binds));
    const [bx, by] = [run.upload(x), run.upload(y)];
    return { encode: (pass) => op.encode(pass, bx, by, x.length), read: () => readF32(ctx, by, x.length) };
  });
}

/** Runs {@link GatherRows} once on h [M, n] and reads out [rows.length, n]. */
async function runGatherRows(
  ctx: GpuContext,
  h: Float32Array,
  n: number,
  rows: Uint32Array,
): Promise<Float32Array> {
  await GatherRows.prepare(ctx);
  return runOnce(ctx, 'gather', (run) => {
    const op = run.own(new GatherRows(ctx, run.binds, n));
    const [bh, br, bo] = [run.upload(h), run.upload(rows), run.empty(rows.length * n * 4)];
    return {
      encode: (pass) => op.encode(pass, bh, br, bo, rows.length),
      read: () => readF32(ctx, bo, rows.length * n),
    };
  });
}

/** Runs {@link SigmoidGate} once on x [M, n] with src [M, stride] and reads x back. */
async function runSigmoidGate(
  ctx: GpuContext,
  x: Float32Array,
  src: Float32Array,
  o: SigmoidGateOptions,
): Promise<Float32Array> {
  await SigmoidGate.prepare(ctx);
  const M = x.length / o.n;
  return runOnce(ctx, 'sigmoid-gate', (run) => {
    const op = run.own(new SigmoidGate(ctx, run.binds, o));
    const [bx, bs] = [run.upload(x), run.upload(src)];
    return { encode: (pass) => op.encode(pass, bx, bs, M), read: () => readF32(ctx, bx, x.length) };
  });
}

/** Runs {@link Softcap} once in place on x and reads it back. */
async function runSoftcap(ctx: GpuContext, x: Float32Array, cap: number): Promise<Float32Array> {
  await Softcap.prepare(ctx);
  return runOnce(ctx, 'softcap', (run) => {
    const op = run.own(new Softcap(ctx, run.binds, cap));
    const bx = run.upload(x);
    return { encode: (pass) => op.encode(pass, bx, x.length), read: () => readF32(ctx, bx, x.length) };
  });
}

/** Runs {@link ScaleInPlace} once on x with the scalar s in a GPU buffer and reads x back. */
async function runScale(ctx: GpuContext, x: Float32Array, s: number): Promise<Float32Array> {
  await ScaleInPlace.prepare(ctx);
  return runOnce(ctx, 'scale', (run) => {
    const op = run.own(new ScaleInPlace(ctx, run.binds));
    const [bs, bx] = [run.upload(Float32Array.of(s)), run.upload(x)];
    return { encode: (pass) => op.encode(pass, bs, bx, x.length), read: () => readF32(ctx, bx, x.length) };
  });
}

function rand(n: number, seed: number, scale = 4): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
  });
}

/** The [M, 2I] rows gate | up of the fused layout. */
function interleave(gate: Float32Array, up: Float32Array, M: number, I: number): Float32Array {
  const gu = new Float32Array(M * 2 * I);
  for (let m = 0; m < M; m++) {
    gu.set(gate.subarray(m * I, (m + 1) * I), m * 2 * I);
    gu.set(up.subarray(m * I, (m + 1) * I), m * 2 * I + I);
  }
  return gu;
}

function maxRelErr(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!)));
  return worst;
}

describe('elementwise kernels vs the TS reference', () => {
  it.each([
    [3, 100],
    [1, 4097],
    [17, 65],
  ])('silu(gate) * up, separate and fused layouts, M=%i I=%i', async (M, I) => {
    const ctx = await gpu();
    const gate = rand(M * I, M * I);
    const up = rand(M * I, M + I);
    const sep = await runSiluMul(ctx, gate, up, M, I);
    expect(maxRelErr(sep, siluMulRef(gate, up, M, I))).toBeLessThan(1e-5);
    const gu = interleave(gate, up, M, I);
    const fused = await runSiluMul(ctx, gu, null, M, I);
    expect(maxRelErr(fused, siluMulRef(gu, null, M, I))).toBeLessThan(1e-5);
    expect(Array.from(fused)).toEqual(Array.from(sep));
  });

  it('gelu_tanh(gate) * up (GeGLU), separate and fused layouts, M=5 I=77', async () => {
    const ctx = await gpu();
    const [M, I] = [5, 77];
    // Gates in ±12: past g ~ -10, where the kernel's exp argument is clamped, and into the tail
    // where 1 + tanh(z) would cancel.
    const gate = rand(M * I, 7, 12);
    const up = rand(M * I, 8);
    const sep = await runSiluMul(ctx, gate, up, M, I, 'gelu');
    expect(maxRelErr(sep, siluMulRef(gate, up, M, I, 'gelu'))).toBeLessThan(1e-5);
    const fused = await runSiluMul(ctx, interleave(gate, up, M, I), null, M, I, 'gelu');
    expect(Array.from(fused)).toEqual(Array.from(sep));
    // The tanh approximation, not erf's GELU (-0.158655 at -1).
    expect(geluTanh(-1)).toBeCloseTo(-0.158808, 6);
  });

  it.each([1, 1000, 70001])('residual add y += x on %i floats (exact)', async (n) => {
    const ctx = await gpu();
    const x = rand(n, n);
    const y = rand(n, n + 1);
    const got = await runAdd(ctx, x, y);
    expect(Array.from(got)).toEqual(Array.from(y, (v, i) => Math.fround(v + x[i]!)));
  });

  it.each([
    [10, 64, [9, 0, 3]],
    [5, 1000, [4]],
    [300, 33, [1, 1, 299, 150, 2]],
  ])('gather rows of h [%i, %i]: %o (exact)', async (M, n, rows) => {
    const ctx = await gpu();
    const h = rand(M * n, M * n);
    const r = Uint32Array.from(rows);
    expect(Array.from(await runGatherRows(ctx, h, n, r))).toEqual(Array.from(gatherRowsRef(h, n, r)));
  });

  it.each([
    // Qwen3.5-like: heads 16, kvHeads 2, headDim 256: n = qWidth, gate after q|k|v.
    [2, 4096, 2 * 4096 + 2 * 512, 4096 + 2 * 512],
    [3, 37, 100, 50],
    [17, 130, 131, 1],
    [70, 1, 3, 2],
    [5, 65, 65, 0],
  ])('x *= sigmoid(gate), M=%i n=%i stride=%i offset=%i', async (M, n, stride, offset) => {
    const ctx = await gpu();
    const x = rand(M * n, M + n);
    const src = rand(M * stride, stride + offset, 8);
    const got = await runSigmoidGate(ctx, x, src, { n, stride, offset });
    expect(maxRelErr(got, sigmoidGateRef(x, src, { n, stride, offset }))).toBeLessThan(1e-5);
  });

  // Soft-capping's tanh: errors in f32 ulps of the cap (what a logit's error means to a softmax) and
  // relative ones (small logits), over ragged sizes; the first elements are edge values: zeros,
  // tiny, the polynomial's edge |x| = cap / 4, the saturating tail and values up to 1e30.
  it.each([
    [1, 30],
    [63, 30],
    [65, 30],
    [1000, 30],
    [70001, 30],
    [257, 1],
    [100, 50.5],
  ])('softcap x = c · tanh(x / c) in place on %i floats, c = %f', async (n, cap) => {
    const ctx = await gpu();
    const x = rand(n, n + cap, 3 * cap);
    const edges = [7.5, 0, -0, 1e-30, -1e-7, 1e-3, cap / 4, -cap / 4 + 1e-5, cap, -2 * cap, 44 * cap];
    x.set([...edges, 1e4, -1e5, 1e30, -1e30, 3e38, 2e-38, -cap * 0.2499, cap * 0.2501].slice(0, n));
    const got = await runSoftcap(ctx, x, cap);
    const want = softcapRef(x, cap);
    const ulp = 2 ** -23;
    let worstAbs = 0;
    let worstRel = 0;
    let at = 0;
    for (let i = 0; i < n; i++) {
      expect(Number.isNaN(got[i]!), `NaN at ${i} (x = ${x[i]})`).toBe(false);
      const e = Math.abs(got[i]! - want[i]!);
      if (e / cap > worstAbs) [worstAbs, at] = [e / cap, i];
      // Relative errors of normal f32 results (x / c of a denormal may flush to zero).
      if (Math.abs(want[i]!) >= 1e-30) worstRel = Math.max(worstRel, e / Math.abs(want[i]!));
      if (want[i] === 0) expect(got[i], `x = ${x[i]}`).toBe(0);
    }
    expect(worstAbs / ulp, `worst at ${at}: x = ${x[at]}, ${got[at]} vs ${want[at]}`).toBeLessThanOrEqual(4);
    expect(worstRel / ulp).toBeLessThanOrEqual(8);
  });

  it('Softcap checks its cap and sizes', async () => {
    const ctx = await gpu();
    await Softcap.prepare(ctx);
    const binds = new BindGroupCache(ctx.device);
    for (const cap of [0, -30, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => new Softcap(ctx, binds, cap)).toThrow(/cap must be finite and > 0/);
    const op = new Softcap(ctx, binds, 30);
    const x = ctx.device.createBuffer({ size: 64, usage: GPUBufferUsage.STORAGE });
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    expect(() => op.encode(pass, x, 17)).toThrow(/x holds 64 bytes, need 68/);
    expect(() => op.encode(pass, x, 0)).toThrow(/n must be ≥ 1/);
    pass.end();
    x.destroy();
    op.destroy();
  });

  it.each([
    [1, 0.5],
    [65, -3.25],
    [4097, 0.0625],
    [70001, 1.7],
  ])('x *= s[0] on %i floats, s = %f (exact)', async (n, s) => {
    const ctx = await gpu();
    const x = rand(n, n + 2, 100);
    expect(Array.from(await runScale(ctx, x, s))).toEqual(Array.from(scaleRef(x, s)));
  });

  it('SigmoidGate writes no buffer when encoding and checks its sizes', async () => {
    const ctx = await gpu();
    await SigmoidGate.prepare(ctx);
    const binds = new BindGroupCache(ctx.device);
    expect(() => new SigmoidGate(ctx, binds, { n: 8, stride: 10, offset: 3 })).toThrow(/offset \+ n/);
    const op = new SigmoidGate(ctx, binds, { n: 8, stride: 20, offset: 12 });
    const buf = (bytes: number) => ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE });
    const [x, src] = [buf(4 * 8 * 4), buf(3 * 20 * 4)];
    const writes = ctx.counter.writes;
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    op.encode(pass, x, src, 3);
    op.encode(pass, x, src, 1);
    expect(ctx.counter.writes).toBe(writes);
    expect(() => op.encode(pass, x, src, 4)).toThrow(/src holds 240 bytes, need 320/);
    expect(() => op.encode(pass, x, x, 1)).toThrow(/different buffers/);
    pass.end();
    for (const b of [x, src]) b.destroy();
    op.destroy();
  });
});
