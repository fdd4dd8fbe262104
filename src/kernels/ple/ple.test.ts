import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { InvalidInputError } from '../../errors.js';
import { readF32 } from '../../gpu/buffers.js';
import { BindGroupCache } from '../bind.js';
import { PleCombine, type PleCombineOptions, PleGate, pleCombineRef, pleGateRef } from './ple.js';

function rand(n: number, seed: number, scale = 1, offset = 0): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale + offset;
  });
}

function maxRelErr(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!)));
  return worst;
}

// Tolerances as rmsnorm.test.ts's (the combine) and elementwise.test.ts's GeGLU (the gate: exp).
// [T, L, P, H]: P below, at and past the workgroup (64), not a multiple of it (24); H not a square.
const SHAPES: [number, number, number, number][] = [
  [1, 1, 16, 10],
  [3, 5, 24, 96],
  [7, 5, 256, 40],
  [3, 1, 100, 7],
];

describe('PleCombine vs the TS reference', () => {
  it.each(SHAPES)('T=%i L=%i P=%i H=%i', async (T, L, P, H) => {
    const ctx = await gpu();
    const opts: PleCombineOptions = { layers: L, width: P, hidden: H, eps: 1e-6 };
    const n = T * L * P;
    const proj = rand(n, n + H, 8);
    const tok = rand(n, n + 1, Math.sqrt(P));
    const norm = rand(P, P, 0.5, 1);
    await PleCombine.prepare(ctx);
    const got = await runOnce(ctx, 'ple-combine', (run) => {
      const k = run.own(new PleCombine(ctx, run.binds, opts));
      const [bp, bt, bw, bo] = [run.upload(proj), run.upload(tok), run.upload(norm), run.empty(n * 4)];
      return {
        encode: (pass) => k.encode(pass, bp, bt, bw, bo, T),
        read: () => readF32(ctx, bo, n),
      };
    });
    expect(maxRelErr(got, pleCombineRef(proj, tok, norm, opts))).toBeLessThan(2e-6);
  });

  it('one slice by hand: RMS of the normed half is 1 before the weight', () => {
    const P = 8;
    const proj = rand(P, 3, 5);
    const out = pleCombineRef(proj, new Float32Array(P), new Float32Array(P).fill(1), {
      layers: 1,
      width: P,
      hidden: 4,
      eps: 0,
    });
    const ss = out.reduce((s, v) => s + (v / Math.SQRT1_2) ** 2, 0);
    expect(Math.sqrt(ss / P)).toBeCloseTo(1, 5);
  });
});

describe('PleGate vs the TS reference', () => {
  it.each(SHAPES)('T=%i L=%i P=%i: every layer encoded in one pass', async (T, L, P) => {
    const ctx = await gpu();
    const opts = { layers: L, width: P };
    const g = rand(T * P, T * P, 4);
    const inputs = rand(T * L * P, L * P + 5, 3);
    // Past GELU's exp range and its flat tail: a model's gates reach both.
    g[0] = -12;
    if (g.length > 1) g[1] = 30;
    await PleGate.prepare(ctx);
    const got = await runOnce(ctx, 'ple-gate', (run) => {
      const k = run.own(new PleGate(ctx, run.binds, opts));
      const [bg, bi] = [run.upload(g), run.upload(inputs)];
      const outs = Array.from({ length: L }, () => run.empty(T * P * 4));
      return {
        encode: (pass) => {
          // Last layer first: no uniform of one layer may be overwritten by another's.
          for (let l = L - 1; l >= 0; l--) k.encode(pass, bg, bi, outs[l]!, T, l);
        },
        read: () => Promise.all(outs.map((b) => readF32(ctx, b, T * P))),
      };
    });
    got.forEach((out, l) => {
      expect(maxRelErr(out, pleGateRef(g, inputs, l, opts)), `layer ${l}`).toBeLessThan(1e-5);
    });
  });
});

describe('PLE input checks', () => {
  it('bad options and buffers throw InvalidInputError naming the value; gate encoding writes no buffer', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const opts: PleCombineOptions = { layers: 2, width: 24, hidden: 32, eps: 1e-6 };
    const bad: [Partial<PleCombineOptions>, RegExp][] = [
      [{ layers: 0 }, /PleCombine: layers must be a positive integer, got 0/],
      [{ width: 2.5 }, /PleCombine: width must be a positive integer, got 2.5/],
      [{ hidden: -1 }, /PleCombine: hidden must be a positive integer, got -1/],
      [{ eps: Number.NaN }, /PleCombine: eps must be ≥ 0, got NaN/],
    ];
    for (const [change, message] of bad) {
      expect(() => new PleCombine(ctx, binds, { ...opts, ...change })).toThrow(InvalidInputError);
      expect(() => new PleCombine(ctx, binds, { ...opts, ...change })).toThrow(message);
    }
    expect(() => new PleGate(ctx, binds, { layers: 2, width: 0 })).toThrow(
      /PleGate: width must be a positive integer, got 0/,
    );

    await Promise.all([PleCombine.prepare(ctx), PleGate.prepare(ctx)]);
    const combine = new PleCombine(ctx, binds, opts);
    const gate = new PleGate(ctx, binds, opts);
    const buf = (bytes: number) => ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.STORAGE });
    const T = 3;
    const all = T * 2 * 24 * 4;
    const [proj, tok, norm, out, g, gOut] = [buf(all), buf(all), buf(96), buf(all), buf(T * 96), buf(T * 96)];
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    combine.encode(pass, proj, tok, norm, out, T);
    const writes = ctx.counter.writes;
    gate.encode(pass, g, out, gOut, T, 0);
    gate.encode(pass, g, out, gOut, T, 1);
    expect(ctx.counter.writes).toBe(writes);

    expect(() => combine.encode(pass, proj, tok, norm, out, 0)).toThrow(
      /PleCombine: rows must be a positive integer, got 0/,
    );
    expect(() => combine.encode(pass, proj, tok, norm, out, 4)).toThrow(
      new RegExp(`PleCombine: proj holds ${all} bytes, need ${(all / 3) * 4}`),
    );
    const short = buf(92);
    expect(() => combine.encode(pass, proj, tok, short, out, T)).toThrow(
      /PleCombine: norm holds 92 bytes, need 96/,
    );
    expect(() => combine.encode(pass, proj, tok, norm, tok, T)).toThrow(
      /PleCombine: out and tok must be different buffers/,
    );
    expect(() => combine.encode(pass, proj, tok, norm, proj, T)).toThrow(InvalidInputError);

    expect(() => gate.encode(pass, g, out, gOut, T, 2)).toThrow(
      /PleGate: layer must be an integer in \[0, 2\), got 2/,
    );
    expect(() => gate.encode(pass, g, out, gOut, T, -1)).toThrow(/got -1/);
    expect(() => gate.encode(pass, g, g, gOut, T, 0)).toThrow(/PleGate: inputs holds 288 bytes, need 576/);
    expect(() => gate.encode(pass, g, out, out, T, 0)).toThrow(
      /PleGate: out and inputs must be different buffers/,
    );
    expect(() => gate.encode(pass, g, out, gOut, 1.5, 0)).toThrow(
      /PleGate: rows must be a positive integer, got 1.5/,
    );
    const maxRows = ctx.limits.maxComputeWorkgroupsPerDimension;
    expect(() => gate.encode(pass, g, out, gOut, maxRows + 1, 0)).toThrow(
      new RegExp(`PleGate: rows must be ≤ ${maxRows}`),
    );
    pass.end();
    for (const b of [proj, tok, norm, out, g, gOut, short]) b.destroy();
    combine.destroy();
    gate.destroy();
  });
});
