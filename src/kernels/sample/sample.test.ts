import { describe, expect, it } from 'vitest';
import { gpu, type KernelRun, runOnce } from '../../../test/helpers/gpu.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  allowedTokens,
  gumbelBits,
  gumbelFromUniform,
  gumbelKey,
  gumbelScore,
  type SampleOptions,
  sampleRef,
  uniformFromBits,
} from './gumbel.js';
import {
  GumbelNoiseGrid,
  Sampler,
  type SamplerCall,
  SplitSampler,
  TokenProb,
  tokenProbRef,
} from './sample.js';

/** Samples once per logits row [rows, vocab] with {@link Sampler} (greedy at temperature 0). */
async function runSample(
  ctx: GpuContext,
  logits: Float32Array,
  vocab: number,
  positions: Uint32Array,
  call: SamplerCall,
): Promise<Uint32Array> {
  const rows = positions.length;
  const greedy = call.temperature <= 0;
  await Sampler.prepare(ctx, greedy);
  return runOnce(ctx, 'sample', (run) => {
    const sampler = run.own(new Sampler(ctx, run.binds, { vocab, greedy }));
    const [bl, bp, bi] = [run.upload(logits), run.upload(positions), run.empty(rows * 4)];
    return {
      encode: (pass) => sampler.encode(pass, bl, bp, bi, rows, call),
      read: () => readU32(ctx, bi, rows),
    };
  });
}

/**
 * Samples logits rows [rows, vocab] with {@link Sampler} and with {@link SplitSampler}, each
 * `repeat` times in one pass, and returns both ids and the wall time of each run.
 */
async function runBoth(
  ctx: GpuContext,
  logits: Float32Array,
  vocab: number,
  positions: Uint32Array,
  call: SamplerCall,
  repeat = 1,
): Promise<{ one: Uint32Array; split: Uint32Array; oneMs: number; splitMs: number }> {
  const rows = positions.length;
  const greedy = call.temperature <= 0;
  await Promise.all([Sampler.prepare(ctx, greedy), SplitSampler.prepare(ctx)]);
  const timed = async (make: (run: KernelRun) => Pick<Sampler, 'encode'>) => {
    const t0 = performance.now();
    const ids = await runOnce(ctx, 'sample', (run) => {
      const op = make(run);
      const [bl, bp, bi] = [run.upload(logits), run.upload(positions), run.empty(rows * 4)];
      return {
        encode: (pass) => {
          for (let i = 0; i < repeat; i++) op.encode(pass, bl, bp, bi, rows, call);
        },
        read: () => readU32(ctx, bi, rows),
      };
    });
    return { ids, ms: performance.now() - t0 };
  };
  // Warm: pipelines compiled and the logits upload path exercised before timing.
  await timed((run) => run.own(new Sampler(ctx, run.binds, { vocab, greedy })));
  const a = await timed((run) => run.own(new Sampler(ctx, run.binds, { vocab, greedy })));
  await timed((run) => run.own(new SplitSampler(ctx, run.binds, { vocab, maxRows: rows })));
  const b = await timed((run) => run.own(new SplitSampler(ctx, run.binds, { vocab, maxRows: rows })));
  return { one: a.ids, split: b.ids, oneMs: a.ms, splitMs: b.ms };
}

/** The GPU's Gumbel noise of every (position, token < vocab) pair, via {@link GumbelNoiseGrid}. */
async function runGumbelNoise(
  ctx: GpuContext,
  seed: number,
  positions: Uint32Array,
  vocab: number,
): Promise<{ bits: Uint32Array; u: Float32Array; g: Float32Array }> {
  const n = positions.length * vocab;
  await GumbelNoiseGrid.prepare(ctx);
  return runOnce(ctx, 'noise', (run) => {
    const noise = run.own(new GumbelNoiseGrid(ctx, run.binds));
    const bp = run.upload(positions);
    const out = { bits: run.empty(n * 4), u: run.empty(n * 4), g: run.empty(n * 4) };
    return {
      encode: (pass) => noise.encode(pass, bp, out, positions.length, vocab, seed),
      read: async () => ({
        bits: await readU32(ctx, out.bits, n),
        u: await readF32(ctx, out.u, n),
        g: await readF32(ctx, out.g, n),
      }),
    };
  });
}

/** probs[r] = softmax(logits[r] / temperature)[tokens[r]] once with {@link TokenProb}. */
async function runTokenProb(
  ctx: GpuContext,
  logits: Float32Array,
  vocab: number,
  tokens: Uint32Array,
  temperature: number,
): Promise<Float32Array> {
  const rows = tokens.length;
  await TokenProb.prepare(ctx);
  return runOnce(ctx, 'sample-prob', (run) => {
    const op = run.own(new TokenProb(ctx, run.binds, vocab));
    const [bl, bt, bp] = [run.upload(logits), run.upload(tokens), run.empty(rows * 4)];
    return {
      encode: (pass) => op.encode(pass, bl, bt, bp, rows, temperature),
      read: () => readF32(ctx, bp, rows),
    };
  });
}

/** Deterministic uniform floats in [lo, hi) from a tiny LCG. */
function randn(n: number, seed: number, scale = 3): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32 - 0.5) * 2 * scale;
  }
  return out;
}

/**
 * Checks a GPU choice against the reference. Equal ids pass; otherwise the GPU's token must be
 * allowed and its reference score within a few f32 ulps of the best, i.e. a near-tie that the
 * GPU's `log` (not bit-identical to Math.log) may legitimately flip.
 */
function expectSameChoice(
  gpuId: number,
  logits: Float32Array,
  seed: number,
  pos: number,
  opts: SampleOptions,
): void {
  const ref = sampleRef(logits, seed, pos, opts);
  if (gpuId === ref) return;
  const ok = allowedTokens(logits, opts);
  expect(ok[gpuId], `token ${gpuId} is outside the allowed set`).toBe(true);
  const key = gumbelKey(seed, pos);
  const invT = Math.fround(1 / opts.temperature);
  const a = gumbelScore(logits[gpuId]!, invT, key, gpuId);
  const b = gumbelScore(logits[ref]!, invT, key, ref);
  expect(Math.abs(a - b)).toBeLessThanOrEqual(1e-5 * (1 + Math.abs(b)));
}

describe('GPU sampling', () => {
  it('Philox bits and U are bit-exact with the TS reference on 102,400 (position, token) pairs', async () => {
    const ctx = await gpu();
    const positions = Uint32Array.from({ length: 25 }, (_, i) => i * 997 + (i === 24 ? 0xfffffff0 : 0));
    const V = 4096;
    const seed = 0xc0ffee;
    const { bits, u, g } = await runGumbelNoise(ctx, seed, positions, V);
    let bitErrors = 0;
    let uErrors = 0;
    let maxG = 0;
    for (let p = 0; p < positions.length; p++) {
      const key = gumbelKey(seed, positions[p]!);
      for (let v = 0; v < V; v++) {
        const i = p * V + v;
        const b = gumbelBits(key, v);
        if (bits[i] !== b) bitErrors++;
        const ur = uniformFromBits(b);
        if (u[i] !== ur) uErrors++;
        const gr = gumbelFromUniform(ur);
        maxG = Math.max(maxG, Math.abs(g[i]! - gr) / (1 + Math.abs(gr)));
      }
    }
    expect(bitErrors).toBe(0);
    expect(uErrors).toBe(0);
    // G goes through the GPU's log: close, not necessarily identical.
    expect(maxG).toBeLessThan(1e-5);
  });

  it.each([
    [3, 1000],
    [2, 4999],
    [5, 257],
  ])('greedy argmax with ties to the lower id on R=%i, V=%i', async (R, V) => {
    const ctx = await gpu();
    const logits = randn(R * V, R * V);
    // Force a tie at the maximum in row 0: two equal maxima, the lower id must win.
    logits[7] = 100;
    logits[V - 3] = 100;
    const ids = await runSample(ctx, logits, V, new Uint32Array(R), { temperature: 0, seed: 0 });
    expect(ids[0]).toBe(7);
    for (let r = 0; r < R; r++)
      expect(ids[r]).toBe(sampleRef(logits.subarray(r * V, (r + 1) * V), 0, 0, { temperature: 0 }));
  });

  const cases: [string, number, number, SampleOptions][] = [
    ['T=1', 4, 1000, { temperature: 1 }],
    ['T=0.7 top-k 20', 3, 4999, { temperature: 0.7, topK: 20 }],
    ['T=1.3 top-p 0.8', 3, 777, { temperature: 1.3, topP: 0.8 }],
    ['T=1 top-k 50 top-p 0.9 min-p 0.05', 2, 3001, { temperature: 1, topK: 50, topP: 0.9, minP: 0.05 }],
    ['T=1 top-p 0.3', 2, 100, { temperature: 1, topP: 0.3 }],
  ];
  it.each(cases)(
    'Gumbel sampling %s on R=%i, V=%i equals the TS reference for many seeds and positions',
    async (_, R, V, opts) => {
      const ctx = await gpu();
      let trials = 0;
      for (let trial = 0; trial < 6; trial++) {
        const seed = 1000 + trial * 7919;
        const logits = randn(R * V, seed, 4);
        const positions = Uint32Array.from({ length: R }, (_, r) => trial * 101 + r * 13);
        const ids = await runSample(ctx, logits, V, positions, { ...opts, seed });
        for (let r = 0; r < R; r++) {
          expectSameChoice(ids[r]!, logits.subarray(r * V, (r + 1) * V), seed, positions[r]!, opts);
          trials++;
        }
      }
      expect(trials).toBe(6 * R);
    },
  );

  it('the sample changes with the seed and the position', async () => {
    const ctx = await gpu();
    const V = 64;
    const logits = new Float32Array(V * 16); // flat logits: the choice is the noise argmax
    const positions = Uint32Array.from({ length: 16 }, (_, i) => i);
    const a = await runSample(ctx, logits, V, positions, { temperature: 1, seed: 1 });
    const b = await runSample(ctx, logits, V, positions, { temperature: 1, seed: 2 });
    expect(new Set(a).size).toBeGreaterThan(4);
    expect(Array.from(a)).not.toEqual(Array.from(b));
    for (let r = 0; r < 16; r++)
      expectSameChoice(a[r]!, logits.subarray(r * V, (r + 1) * V), 1, r, { temperature: 1 });
  });

  const split: [string, number, number, SampleOptions][] = [
    ['greedy', 33, 3, { temperature: 0 }],
    ['greedy', 50000, 17, { temperature: 0 }],
    ['T=1', 4096, 3, { temperature: 1 }],
    ['T=0.7 top-k 20', 50000, 3, { temperature: 0.7, topK: 20 }],
    ['T=1 top-p 0.9', 4999, 17, { temperature: 1, topP: 0.9 }],
    ['T=1 top-k 50 top-p 0.9 min-p 0.05', 50000, 1, { temperature: 1, topK: 50, topP: 0.9, minP: 0.05 }],
    ['T=1.3 top-p 0.3', 2049, 17, { temperature: 1.3, topP: 0.3 }],
  ];
  it.each(split)(
    'split over workgroups, %s on V=%i, R=%i: the same ids as one workgroup per row',
    async (_, V, R, opts) => {
      const ctx = await gpu();
      for (let trial = 0; trial < 2; trial++) {
        const seed = 77 + trial * 7919;
        const logits = randn(R * V, seed + V, 4);
        // Ties at the top in every row, in different chunks of the split sampler (256 tokens).
        for (let r = 0; r < R; r++) for (const v of [V - 1, 3, V >> 1]) logits[r * V + v] = 6;
        const positions = Uint32Array.from({ length: R }, (_, r) => trial * 101 + r * 13);
        const { one, split } = await runBoth(ctx, logits, V, positions, { ...opts, seed });
        expect(Array.from(split)).toEqual(Array.from(one));
        if (opts.temperature <= 0) expect(one[0]).toBe(3);
      }
    },
  );

  it.each([1, 17])(
    'split sampler at V = 151936, R = %i: same ids, time against one workgroup per row',
    async (R) => {
      const ctx = await gpu();
      const V = 151936;
      const logits = randn(R * V, R, 4);
      const positions = Uint32Array.from({ length: R }, (_, r) => 500 + r);
      const calls: [string, SamplerCall][] = [
        ['greedy', { temperature: 0, seed: 0 }],
        ['T=1', { temperature: 1, seed: 3 }],
        ['T=0.7 top-p 0.9', { temperature: 0.7, topP: 0.9, seed: 4 }],
      ];
      for (const [name, call] of calls) {
        const { one, split, oneMs, splitMs } = await runBoth(ctx, logits, V, positions, call, 4);
        expect(Array.from(split)).toEqual(Array.from(one));
        console.log(
          `[sample-split] V=${V} R=${R} ${name}: one workgroup per row ${oneMs.toFixed(0)} ms, ` +
            `split ${splitMs.toFixed(0)} ms (4 runs each incl. upload and readback), ratio ${(oneMs / splitMs).toFixed(2)}`,
        );
      }
    },
  );

  it.each([
    [3, 1000, 1],
    [2, 4999, 0.6],
    [4, 77, 2],
  ])('token probability at temperature: R=%i V=%i T=%f', async (R, V, T) => {
    const ctx = await gpu();
    const logits = randn(R * V, V + R, 5);
    const tokens = Uint32Array.from({ length: R }, (_, r) => (r * 7919) % V);
    // Row 0 asks for its argmax, so one probability is large.
    let best = 0;
    for (let v = 1; v < V; v++) if (logits[v]! > logits[best]!) best = v;
    tokens[0] = best;
    const got = await runTokenProb(ctx, logits, V, tokens, T);
    for (let r = 0; r < R; r++) {
      const ref = tokenProbRef(logits.subarray(r * V, (r + 1) * V), tokens[r]!, T);
      expect(Math.abs(got[r]! - ref)).toBeLessThanOrEqual(1e-5 * ref + 1e-12);
    }
  });
});
