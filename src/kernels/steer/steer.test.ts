import { describe, expect, it } from 'vitest';
import { relErr } from '../../../test/helpers/compare.js';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { Steer, type SteerMode, steerRowsRef } from './steer.js';

function rand(n: number, seed: number, scale = 4): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
  });
}

function unit(n: number, seed: number): Float32Array {
  const v = rand(n, seed);
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);

/** Runs {@link Steer} once on x [rows, r.length], in place, and reads it back. */
async function runSteer(
  ctx: GpuContext,
  x: Float32Array,
  r: Float32Array,
  mode: SteerMode,
  scale: number,
): Promise<Float32Array> {
  await Steer.prepare(ctx);
  const H = r.length;
  return runOnce(ctx, 'steer', (run) => {
    const [bx, br] = [run.upload(x), run.upload(r)];
    const op = run.own(new Steer(ctx, run.binds, br, { hidden: H, offset: 0, mode, scale }));
    return { encode: (pass) => op.encode(pass, bx, x.length / H), read: () => readF32(ctx, bx, x.length) };
  });
}

describe('steer kernel vs the TS reference', () => {
  it.each([
    [1, 37],
    [5, 200],
    [64, 64],
  ])('ablate and add, rows=%i H=%i', async (rows, H) => {
    const ctx = await gpu();
    const x = rand(rows * H, rows + H);
    const r = unit(H, H);
    for (const [mode, scale] of [
      ['ablate', 1],
      ['add', -2.5],
    ] as const) {
      const want = x.slice();
      steerRowsRef(want, r, mode, scale);
      const got = await runSteer(ctx, x, r, mode, scale);
      expect(relErr(got, want)).toBeLessThan(1e-5);
      if (mode === 'ablate')
        for (let t = 0; t < rows; t++)
          expect(Math.abs(dot(got.subarray(t * H, (t + 1) * H), r))).toBeLessThan(1e-4);
    }
  });
});
