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
