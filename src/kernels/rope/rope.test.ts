import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import {
  queryTemperatureAt,
  queryTemperatureRef,
  Rope,
  type RopeOptions,
  ropeInvFreq,
  ropeRef,
  type YarnRopeScaling,
} from './rope.js';

/** Uploads q, k and positions, runs {@link Rope} once and reads the rotated q and k back. */
async function runRope(
  ctx: GpuContext,
  q: Float32Array,
  k: Float32Array,
  positions: Uint32Array,
  options: RopeOptions,
): Promise<{ q: Float32Array; k: Float32Array }> {
  await Rope.prepare(ctx, options.layout, options.attentionFactor, options.queryTemperature);
  return runOnce(ctx, 'rope', (run) => {
    const rope = run.own(new Rope(ctx, run.binds, options));
    const [bq, bk, bp] = [run.upload(q), run.upload(k), run.upload(positions)];
    return {
      encode: (pass) => rope.encode(pass, bq, bk, bp, positions.length),
      read: async () => ({ q: await readF32(ctx, bq, q.length), k: await readF32(ctx, bk, k.length) }),
    };
  });
}

function rand(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 4;
  });
}

function maxErr(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!)));
  return worst;
}

const llama3 = { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 };

// Both sides compute the same f32 angle (pos · inv_freq, one rounded multiply); they differ only
// in cos/sin of it: the reference's is exact (f64), the kernel's is a Cody-Waite reduction plus
// polynomials in f32 (a few ulps). The rotated pair then carries f32 rounding of a·c - b·s, so the
// tolerance is relative to the magnitude; WGSL's own cos/sin (error ~1e-4 on SwiftShader) would fail it.
const TOL = 2e-6;

describe('RoPE kernel vs the TS reference', () => {
  const cases: [string, RopeOptions, number[]][] = [
    [
      'half, theta 1e4',
      { heads: 4, kvHeads: 2, headDim: 64, theta: 10000, layout: 'half' },
      [0, 1, 2, 3, 4, 5, 6],
    ],
    [
      'interleaved, theta 5e5',
      { heads: 3, kvHeads: 1, headDim: 24, theta: 500000, layout: 'interleaved' },
      [7, 100, 2],
    ],
    [
      'half, llama3 scaling, tree positions',
      { heads: 2, kvHeads: 1, headDim: 128, theta: 500000, layout: 'half', scaling: llama3 },
      [4000, 4001, 4001, 4002, 4999],
    ],
    [
      'half, headDim 10, large positions',
      { heads: 5, kvHeads: 5, headDim: 10, theta: 10000, layout: 'half' },
      [3000, 65],
    ],
    [
      'half, partial rotary 8 of headDim 24',
      { heads: 3, kvHeads: 1, headDim: 24, rotaryDim: 8, theta: 10000, layout: 'half' },
      [0, 9, 1000, 17],
    ],
    [
      'half, partial rotary 64 of headDim 256 (Qwen3.5)',
      { heads: 2, kvHeads: 1, headDim: 256, rotaryDim: 64, theta: 1e7, layout: 'half' },
      [5, 6, 7000],
    ],
    [
      'half, partial rotary 6 of headDim 10 (odd pair count)',
      { heads: 2, kvHeads: 2, headDim: 10, rotaryDim: 6, theta: 10000, layout: 'half' },
      [3, 40],
    ],
    [
      'half, proportional: 4 of 16 pairs rotated (headDim 32)',
      {
        heads: 3,
        kvHeads: 1,
        headDim: 32,
        theta: 10000,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 4, factor: 1 },
      },
      [0, 5, 900],
    ],
    [
      'half, proportional: 4 of 16 pairs rotated, factor 8 (headDim 32)',
      {
        heads: 2,
        kvHeads: 2,
        headDim: 32,
        theta: 1e6,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 4, factor: 8 },
      },
      [1, 4000],
    ],
    [
      "half, headDim 512, proportional: 64 of 256 pairs rotated (Gemma 4's full layers)",
      {
        heads: 2,
        kvHeads: 1,
        headDim: 512,
        theta: 1e6,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 64, factor: 1 },
      },
      [3, 70000],
    ],
  ];
  it.each(cases)('%s', async (_, opts, posList) => {
    const ctx = await gpu();
    const positions = Uint32Array.from(posList);
    const M = positions.length;
    const R = opts.rotaryDim ?? opts.headDim;
    const q = rand(M * opts.heads * opts.headDim, M + opts.headDim);
    const k = rand(M * opts.kvHeads * opts.headDim, 3 * M);
    const got = await runRope(ctx, q, k, positions, opts);
    const inv = ropeInvFreq(R, opts.theta, opts.scaling);
    ropeRef(q, opts.heads, opts.headDim, positions, inv, opts.layout, R);
    ropeRef(k, opts.kvHeads, opts.headDim, positions, inv, opts.layout, R);
    expect(maxErr(got.q, q)).toBeLessThan(TOL);
    expect(maxErr(got.k, k)).toBeLessThan(TOL);
  });

  it('proportional RoPE: the pairs past rotatedPairs pass through bit for bit, the others turn', async () => {
    const ctx = await gpu();
    const opts: RopeOptions = {
      heads: 2,
      kvHeads: 1,
      headDim: 32,
      theta: 10000,
      layout: 'half',
      scaling: { type: 'proportional', rotatedPairs: 4, factor: 1 },
    };
    const positions = Uint32Array.from([7, 31]);
    const q = rand(2 * 2 * 32, 5);
    const k = rand(2 * 32, 6);
    const got = await runRope(ctx, q, k, positions, opts);
    for (let h = 0; h < 2 * 2; h++)
      for (let i = 0; i < 16; i++)
        for (const e of [i, i + 16]) {
          const at = h * 32 + e;
          if (i >= 4) expect(got.q[at], `head ${h} element ${e}`).toBe(q[at]);
          else expect(got.q[at], `head ${h} element ${e}`).not.toBe(q[at]);
        }
  });

  it('partial rotary is full rotary of the first rotaryDim elements (HF), the rest untouched', () => {
    const [heads, D, R] = [3, 24, 8];
    const positions = Uint32Array.from([0, 5, 123]);
    const inv = ropeInvFreq(R, 10000);
    expect(Array.from(inv)).toEqual(
      Array.from({ length: R / 2 }, (_, i) => Math.fround(1 / Math.fround(10000 ** ((2 * i) / R)))),
    );
    const x = rand(positions.length * heads * D, 9);
    const head = (a: Float32Array, from: number, to: number) => {
      const out = new Float32Array(positions.length * heads * (to - from));
      for (let r = 0; r < positions.length * heads; r++)
        out.set(a.subarray(r * D + from, r * D + to), r * (to - from));
      return out;
    };
    const sub = head(x, 0, R);
    ropeRef(sub, heads, R, positions, inv, 'half');
    const got = x.slice();
    ropeRef(got, heads, D, positions, inv, 'half', R);
    expect(Array.from(head(got, 0, R))).toEqual(Array.from(sub));
    expect(Array.from(head(got, R, D))).toEqual(Array.from(head(x, R, D)));
  });

  it('rotaryDim is checked: even, at most headDim, and the whole head when interleaved', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const base: RopeOptions = { heads: 1, kvHeads: 1, headDim: 16, theta: 1e4, layout: 'half' };
    expect(() => new Rope(ctx, binds, { ...base, layout: 'interleaved', rotaryDim: 8 })).toThrow(
      /needs layout 'half'/,
    );
    expect(() => new Rope(ctx, binds, { ...base, rotaryDim: 5 })).toThrow(/even/);
    expect(() => new Rope(ctx, binds, { ...base, rotaryDim: 18 })).toThrow(/headDim 16/);
    new Rope(ctx, binds, { ...base, layout: 'interleaved', rotaryDim: 16 }).destroy();
  });

  it('position 0 is the identity and rotations preserve each pair norm', async () => {
    const ctx = await gpu();
    const opts: RopeOptions = { heads: 1, kvHeads: 1, headDim: 8, theta: 10000, layout: 'half' };
    const q = rand(16, 5);
    const k = rand(16, 6);
    const got = await runRope(ctx, q, k, Uint32Array.from([0, 1234]), opts);
    expect(Array.from(got.q.subarray(0, 8))).toEqual(Array.from(q.subarray(0, 8)));
    for (let i = 0; i < 4; i++) {
      const before = Math.hypot(q[8 + i]!, q[12 + i]!);
      expect(Math.hypot(got.q[8 + i]!, got.q[12 + i]!)).toBeCloseTo(before, 6);
    }
  });

  it('llama3 inv_freq follows _compute_llama3_parameters (low band / factor, high band kept, smooth between)', () => {
    const base = ropeInvFreq(128, 500000);
    const scaled = ropeInvFreq(128, 500000, llama3);
    // Values from Hugging Face (Llama 3.1, theta 5e5, headDim 128): first pair untouched, last divided by 8.
    expect(scaled[0]).toBe(1);
    expect(scaled[63]).toBeCloseTo(base[63]! / 8, 12);
    let smooth = 0;
    for (let i = 0; i < 64; i++) {
      const wavelen = (2 * Math.PI) / base[i]!;
      if (wavelen < 8192 / 4) expect(scaled[i]).toBe(base[i]);
      else if (wavelen > 8192) expect(scaled[i]).toBe(Math.fround(base[i]! / 8));
      else {
        smooth++;
        expect(scaled[i]!).toBeLessThan(base[i]!);
        expect(scaled[i]!).toBeGreaterThan(base[i]! / 8);
      }
    }
    expect(smooth).toBeGreaterThan(0);
  });

  it('llama3 inv_freq matches HF _compute_llama3_parameters run in float32 (Llama 3.1: theta 5e5, headDim 128)', () => {
    // Computed with numpy float32 mirroring the torch float32 code of transformers'
    // _compute_llama3_parameters (factor 8, low 1, high 4, original 8192); indices 29..34 are the smoothed band.
    const hf: [number, number][] = [
      [0, 1.0],
      [20, 0.016560440883040428],
      [29, 0.0021665706299245358],
      [31, 0.0008567514596506953],
      [34, 0.0001785077911335975],
      [40, 3.428102354519069e-5],
      [63, 3.068925877869333e-7],
    ];
    const got = ropeInvFreq(128, 500000, llama3);
    for (const [i, want] of hf) expect(Math.abs(got[i]! - want) / want, `inv_freq[${i}]`).toBeLessThan(1e-6);
  });

  it('a layer without RoPE (none: zero frequencies) leaves q and k bit for bit; linear scaling divides every frequency', async () => {
    const ctx = await gpu();
    const opts: RopeOptions = { heads: 3, kvHeads: 1, headDim: 32, theta: 10000, layout: 'half', none: true };
    const q = rand(5 * 3 * 32, 11);
    const k = rand(5 * 32, 12);
    const out = await runRope(ctx, q, k, Uint32Array.from([0, 9, 700, 4096, 90_000]), opts);
    expect(Array.from(out.q)).toEqual(Array.from(q));
    expect(Array.from(out.k)).toEqual(Array.from(k));
    const base = ropeInvFreq(32, 10000);
    const linear = ropeInvFreq(32, 10000, { type: 'linear', factor: 8 });
    for (let i = 0; i < base.length; i++) expect(linear[i]).toBe(Math.fround(base[i]! / 8));
  });

  it('YaRN inv_freq matches HF _compute_yarn_parameters run in float32 (Ministral 3: theta 1e6, headDim 128)', () => {
    // Computed with numpy float32 mirroring the torch float32 code of transformers'
    // _compute_yarn_parameters (factor 16, original 16384, betas 32 and 1, truncate): the
    // correction range is pairs 20 .. 37, kept below it and divided by 16 above it.
    const yarn: YarnRopeScaling = {
      type: 'yarn',
      factor: 16,
      originalMaxPositions: 16384,
      betaFast: 32,
      betaSlow: 1,
      truncate: true,
      attentionFactor: 1,
    };
    const hf: [number, number][] = [
      [0, 1.0],
      [10, 0.11547820270061493],
      [20, 0.01333521492779255],
      [23, 0.005823807325214148],
      [24, 0.004382954444736242],
      [25, 0.00328206573612988],
      [30, 0.000690702348947525],
      [40, 1.1114246262877714e-5],
      [45, 3.7768522815895267e-6],
      [63, 7.75586102008674e-8],
    ];
    const got = ropeInvFreq(128, 1e6, yarn);
    for (const [i, want] of hf) expect(Math.abs(got[i]! - want) / want, `inv_freq[${i}]`).toBeLessThan(1e-6);
  });

  it('YaRN with its attention factor and the query temperature (Ministral 3): q scaled past each floor, k not', async () => {
    const ctx = await gpu();
    const yarn: YarnRopeScaling = {
      type: 'yarn',
      factor: 16,
      originalMaxPositions: 32,
      betaFast: 32,
      betaSlow: 1,
      truncate: true,
      attentionFactor: 1.0696,
    };
    const opts: RopeOptions = {
      heads: 3,
      kvHeads: 1,
      headDim: 40,
      theta: 1000,
      layout: 'interleaved',
      scaling: yarn,
      attentionFactor: yarn.attentionFactor,
      queryTemperature: { beta: 0.1, floorScale: 32 },
    };
    const positions = Uint32Array.from([0, 31, 32, 33, 95, 96, 5000]);
    const q = rand(7 * 3 * 40, 31);
    const k = rand(7 * 40, 32);
    const out = await runRope(ctx, q, k, positions, opts);
    const inv = ropeInvFreq(40, 1000, yarn);
    const [wq, wk] = [q.slice(), k.slice()];
    ropeRef(wq, 3, 40, positions, inv, 'interleaved', 40, yarn.attentionFactor);
    ropeRef(wk, 1, 40, positions, inv, 'interleaved', 40, yarn.attentionFactor);
    queryTemperatureRef(wq, 3 * 40, positions, opts.queryTemperature!);
    expect(maxErr(out.q, wq)).toBeLessThan(TOL);
    expect(maxErr(out.k, wk)).toBeLessThan(TOL);
    // 1 + 0.1 ln 2 at 32 .. 63, 1 + 0.1 ln 4 at 96; the temperature shows against a plain run.
    expect(queryTemperatureAt(opts.queryTemperature!, 95)).toBe(
      Math.fround(1 + Math.fround(0.1 * Math.fround(Math.log(3)))),
    );
    const plain = await runRope(ctx, q, k, positions, { ...opts, queryTemperature: undefined });
    const row = 3 * 40;
    expect(maxErr(plain.q.subarray(0, 2 * row), out.q.subarray(0, 2 * row))).toBe(0);
    expect(maxErr(plain.q.subarray(2 * row), out.q.subarray(2 * row))).toBeGreaterThan(0.01);
    expect(Array.from(plain.k)).toEqual(Array.from(out.k));
  });

  it('LongRoPE: cos and sin times the attention factor, in f32 (Phi-3.5 / Phi-4-mini)', async () => {
    const ctx = await gpu();
    const opts: RopeOptions = {
      heads: 2,
      kvHeads: 1,
      headDim: 32,
      theta: 10000,
      layout: 'half',
      rotaryDim: 24,
      attentionFactor: 1.190238,
    };
    const positions = Uint32Array.from([0, 3, 50, 1000]);
    const q = rand(4 * 2 * 32, 21);
    const k = rand(4 * 32, 22);
    const out = await runRope(ctx, q, k, positions, opts);
    const inv = ropeInvFreq(24, 10000);
    const [wq, wk] = [q.slice(), k.slice()];
    ropeRef(wq, 2, 32, positions, inv, 'half', 24, opts.attentionFactor);
    ropeRef(wk, 1, 32, positions, inv, 'half', 24, opts.attentionFactor);
    expect(maxErr(out.q, wq)).toBeLessThan(TOL);
    expect(maxErr(out.k, wk)).toBeLessThan(TOL);
    // The factor shows: without it the rotated part is 1.19 times smaller.
    const plain = q.slice();
    ropeRef(plain, 2, 32, positions, inv, 'half', 24);
    expect(maxErr(out.q, plain)).toBeGreaterThan(0.05);
  });
});
