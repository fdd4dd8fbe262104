import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { InvalidInputError } from '../../errors.js';
import { createBuffer, readF32, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import { HeadFeatures, headFeaturesRef, VocabScatter, vocabScatterRef } from './draft-head.js';

/** A small LCG; random cases multiply their seed by a large odd constant to spread their first draws. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function rand(n: number, r: () => number): Float32Array {
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}

/** An integer in [lo, hi). */
function int(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo));
}

/** The inputs of one {@link HeadFeatures} pass. */
interface FeatureCase {
  H: number;
  known: number;
  positions: Uint32Array;
  slots: Uint32Array;
  /** [rows] 64-bit masks, low word first. */
  vis: Uint32Array;
  /** [knownRows, H] the target's features (knownRows ≥ known). */
  target: Float32Array;
  /** [capacity, H] the head's outputs. */
  own: Float32Array;
}

/** The kinds of rows the rule tells apart. */
type RowKind = 'zero' | 'target' | 'parent' | 'orphan';

/**
 * A mask whose smallest set bit in 1..63 is d (none for d = 64), bit 0 (the row itself) random,
 * and random bits above d.
 */
function maskWithParent(d: number, r: () => number): [number, number] {
  let lo = r() < 0.7 ? 1 : 0;
  let hi = 0;
  for (let b = d; b < 64; b++)
    if (b === d || r() < 0.3) {
      if (b < 32) lo |= 1 << b;
      else hi |= 1 << (b - 32);
    }
  return [lo >>> 0, hi >>> 0];
}

/** A parent distance: small ones (a chain, a shallow tree) most often, and every word's edges. */
function parentDistance(r: () => number): number {
  const edges = [1, 31, 32, 33, 63, 64];
  return r() < 0.4 ? edges[int(r, 0, edges.length)]! : int(r, 1, 65);
}

/** A random pass of `rows` rows over hidden size H, each row of the kind `kinds` picks. */
function featureCase(
  seed: number,
  H: number,
  rows: number,
  kinds: (r: () => number) => RowKind,
): FeatureCase {
  const r = rng(Math.imul(seed, 0x9e3779b9));
  const capacity = 140;
  const known = int(r, 1, 40);
  const positions = new Uint32Array(rows);
  const slots = new Uint32Array(rows);
  const vis = new Uint32Array(2 * rows);
  for (let i = 0; i < rows; i++) {
    const kind = kinds(r);
    const d = parentDistance(r);
    // A parent row needs me ≥ d; an orphan (its parent would lie before slot 0) me < d.
    const me = kind === 'orphan' ? int(r, 0, d) : int(r, Math.min(d, capacity - 1), capacity);
    positions[i] = kind === 'zero' ? 0 : kind === 'target' ? int(r, 1, known + 1) : int(r, known + 1, 200);
    slots[i] = me;
    [vis[2 * i], vis[2 * i + 1]] = maskWithParent(d, r);
  }
  return {
    H,
    known,
    positions,
    slots,
    vis,
    target: rand((known + 3) * H, r),
    own: rand(capacity * H, r),
  };
}

/** Every kind of row, about equally often. */
function anyKind(r: () => number): RowKind {
  return (['zero', 'target', 'parent', 'orphan'] as const)[int(r, 0, 4)]!;
}

/** Runs {@link HeadFeatures} once per `known` of `knowns` (default: the case's), in one batch; returns each output. */
async function runFeatures(ctx: GpuContext, c: FeatureCase, knowns = [c.known]): Promise<Float32Array[]> {
  const rows = c.positions.length;
  await HeadFeatures.prepare(ctx);
  ctx.counter.beginBatch();
  try {
    return await runOnce(ctx, 'head-features', (run) => {
      const f = run.own(new HeadFeatures(ctx, run.binds, { hidden: c.H }));
      const [positions, slots, vis] = [run.upload(c.positions), run.upload(c.slots), run.upload(c.vis)];
      const [target, own] = [run.upload(c.target), run.upload(c.own)];
      const outs = knowns.map(() => run.empty(rows * c.H * 4));
      return {
        encode: (pass) => {
          knowns.forEach((known, i) => {
            f.encode(pass, positions, slots, vis, target, own, outs[i]!, rows, known);
          });
        },
        read: () => Promise.all(outs.map((o) => readF32(ctx, o, rows * c.H))),
      };
    });
  } finally {
    ctx.counter.endBatch();
  }
}

function reference(c: FeatureCase, known = c.known): Float32Array {
  return headFeaturesRef(c.positions, c.slots, c.vis, c.target, c.own, c.H, known);
}

/** Runs {@link VocabScatter} once on `logits` [rows, V]; returns the new logits. */
async function runVocab(
  ctx: GpuContext,
  V: number,
  d2t: Uint32Array,
  small: Float32Array,
  logits: Float32Array,
  rows: number,
): Promise<Float32Array> {
  await VocabScatter.prepare(ctx);
  return runOnce(ctx, 'head-vocab', (run) => {
    const s = run.own(
      new VocabScatter(ctx, run.binds, { vocab: V, draftVocab: d2t.length }, run.upload(d2t)),
    );
    const [bSmall, bLogits] = [run.upload(small), run.upload(logits)];
    return {
      encode: (pass) => s.encode(pass, bSmall, bLogits, rows),
      read: () => readF32(ctx, bLogits, logits.length),
    };
  });
}

/** `Vd` strictly increasing ids of [0, V). */
function draftIds(V: number, Vd: number, r: () => number): Uint32Array {
  const all = Array.from({ length: V }, (_, i) => i);
  for (let i = V - 1; i > 0; i--) {
    const j = int(r, 0, i + 1);
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  return Uint32Array.from(all.slice(0, Vd).sort((a, b) => a - b));
}

describe('draft head kernels vs the TS reference (exact copies)', () => {
  it.each([
    // seed, H, rows
    [1, 40, 1],
    [2, 40, 64],
    [3, 96, 17],
    [4, 200, 64],
    [5, 64, 33],
    [6, 1, 20],
    [7, 129, 5],
  ])('features: case %i, H = %i, %i rows of every kind', async (seed, H, rows) => {
    const ctx = await gpu();
    const c = featureCase(seed, H, rows, anyKind);
    const [got] = await runFeatures(ctx, c);
    expect(got).toEqual(reference(c));
  });

  it.each<RowKind>(['zero', 'target', 'parent', 'orphan'])(
    'features: 64 rows that are all of kind %s, H = 96',
    async (kind) => {
      const ctx = await gpu();
      const c = featureCase(kind.length, 96, 64, () => kind);
      const want = reference(c);
      // Only zero and orphan rows are all zeros.
      expect(want.some((x) => x !== 0)).toBe(kind === 'target' || kind === 'parent');
      const [got] = await runFeatures(ctx, c);
      expect(got).toEqual(want);
    },
  );

  it('features: a chain (every mask bit set) takes the row one slot back; no bit in 1..63 set takes 64 back', async () => {
    const ctx = await gpu();
    const H = 40;
    const c = featureCase(11, H, 4, () => 'parent');
    c.slots.set([100, 70, 64, 63]);
    c.vis.set([0xffffffff, 0xffffffff, 1, 0, 0, 0, 1, 0]);
    const [got] = await runFeatures(ctx, c);
    const row = (s: number) => Array.from(c.own.subarray(s * H, (s + 1) * H));
    expect(Array.from(got!.subarray(0, H))).toEqual(row(99));
    expect(Array.from(got!.subarray(H, 2 * H))).toEqual(row(6));
    expect(Array.from(got!.subarray(2 * H, 3 * H))).toEqual(row(0));
    expect(Array.from(got!.subarray(3 * H))).toEqual(new Array(H).fill(0)); // slot 63 has no slot 64 back
    expect(got).toEqual(reference(c));
  });

  it('features: passes with different `known` in one submission each see their own value', async () => {
    const ctx = await gpu();
    const c = featureCase(21, 96, 40, anyKind);
    const knowns = [0, Math.floor(c.known / 2), c.known];
    const got = await runFeatures(ctx, c, knowns);
    const want = knowns.map((k) => reference(c, k));
    // The values differ, so a pass that saw another pass's `known` would fail.
    expect(want[0]).not.toEqual(want[2]);
    got.forEach((g, i) => {
      expect(g, `known ${knowns[i]}`).toEqual(want[i]);
    });
  });

  it.each([
    // V, Vd, rows
    [100, 37, 1],
    [100, 100, 3], // every id drafted
    [1000, 65, 5],
    [5000, 1031, 2],
    [300, 1, 7],
    [70_000, 4200, 2], // more than 64 workgroups of draft ids
  ])('vocab scatter: V = %i, Vd = %i, %i rows; untouched entries stay -inf', async (V, Vd, rows) => {
    const ctx = await gpu();
    const r = rng(V * 31 + Vd);
    const d2t = draftIds(V, Vd, r);
    const small = rand(rows * Vd, r);
    const logits = new Float32Array(rows * V).fill(Number.NEGATIVE_INFINITY);
    const got = await runVocab(ctx, V, d2t, small, logits, rows);
    vocabScatterRef(small, logits, d2t, V, Vd, rows);
    expect(got).toEqual(logits);
    const written = got.filter((x) => x !== Number.NEGATIVE_INFINITY).length;
    expect(written).toBe(rows * Vd);
  });

  it('vocab scatter over fewer rows than the buffer holds leaves the rows past them alone', async () => {
    const ctx = await gpu();
    const [V, Vd] = [257, 100];
    const r = rng(5);
    const d2t = draftIds(V, Vd, r);
    const small = rand(4 * Vd, r);
    const logits = new Float32Array(4 * V).fill(Number.NEGATIVE_INFINITY);
    const got = await runVocab(ctx, V, d2t, small, logits, 2);
    vocabScatterRef(small, logits, d2t, V, Vd, 2);
    expect(got).toEqual(logits);
    expect(got.subarray(2 * V).every((x) => x === Number.NEGATIVE_INFINITY)).toBe(true);
  });

  it('encodes write no buffer when the values repeat, and the vocab scatter never', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    await Promise.all([HeadFeatures.prepare(ctx), VocabScatter.prepare(ctx)]);
    const f = new HeadFeatures(ctx, binds, { hidden: 8 });
    const d2t = uploadBuffer(ctx, Uint32Array.from([1, 4, 6]), 'd2t');
    const s = new VocabScatter(ctx, binds, { vocab: 8, draftVocab: 3 }, d2t);
    const buf = createBuffer(ctx, 4 * 64 * 8, 'any'); // large enough for every binding
    const out = createBuffer(ctx, 4 * 64 * 8, 'out');
    const encode = (known: number, rows: number) => {
      const enc = ctx.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      f.encode(pass, buf, buf, buf, buf, buf, out, rows, known);
      s.encode(pass, buf, out, rows);
      pass.end();
      ctx.device.queue.submit([enc.finish()]);
    };
    encode(3, 4);
    const writes = ctx.counter.writes;
    encode(3, 7);
    expect(ctx.counter.writes).toBe(writes);
    encode(5, 7);
    expect(ctx.counter.writes).toBe(writes + 1);
    for (const b of [d2t, buf, out]) b.destroy();
    f.destroy();
    s.destroy();
  });
});

describe('draft head kernel input checks', () => {
  it('names the bad shape or argument', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const bad = (fn: () => void, message: RegExp) => {
      expect(fn).toThrow(InvalidInputError);
      expect(fn).toThrow(message);
    };
    const d2t = createBuffer(ctx, 12, 'd2t'); // [3]
    bad(() => new HeadFeatures(ctx, binds, { hidden: 0 }), /hidden must be ≥ 1, got 0/);
    bad(() => new VocabScatter(ctx, binds, { vocab: 0, draftVocab: 3 }, d2t), /vocab must be ≥ 1, got 0/);
    bad(() => new VocabScatter(ctx, binds, { vocab: 8, draftVocab: 9 }, d2t), /draftVocab 9 exceeds vocab 8/);
    bad(() => new VocabScatter(ctx, binds, { vocab: 8, draftVocab: 4 }, d2t), /d2t holds 12 bytes, need 16/);

    const f = new HeadFeatures(ctx, binds, { hidden: 5 });
    const s = new VocabScatter(ctx, binds, { vocab: 8, draftVocab: 3 }, d2t);
    const b = (bytes: number) => createBuffer(ctx, bytes, 'b');
    const [u4, v8, h5x4, big] = [b(16), b(32), b(80), b(4096)];
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    bad(() => f.encode(pass, u4, u4, v8, big, big, big, 0, 1), /rows must be in 1..64, got 0/);
    bad(() => f.encode(pass, big, big, big, big, big, big, 65, 1), /rows must be in 1..64, got 65/);
    bad(() => f.encode(pass, u4, u4, v8, big, big, big, 4, -1), /known must be an integer ≥ 0, got -1/);
    bad(() => f.encode(pass, u4, u4, v8, big, big, big, 5, 1), /positions holds 16 bytes, need 20/);
    bad(() => f.encode(pass, big, u4, v8, big, big, big, 5, 1), /slots holds 16 bytes, need 20/);
    bad(() => f.encode(pass, u4, u4, u4, big, big, big, 4, 1), /vis holds 16 bytes, need 32/);
    bad(() => f.encode(pass, u4, u4, v8, h5x4, big, big, 4, 5), /target holds 80 bytes, need 100/);
    bad(() => f.encode(pass, u4, u4, v8, big, u4, big, 4, 1), /own holds 16 bytes, need 20/);
    bad(() => f.encode(pass, big, big, big, big, big, h5x4, 5, 1), /out holds 80 bytes, need 100/);
    bad(() => s.encode(pass, big, big, 0), /rows must be in 1\.\.\d+, got 0/);
    bad(() => s.encode(pass, u4, big, 2), /small holds 16 bytes, need 24/);
    bad(() => s.encode(pass, big, h5x4, 3), /logits holds 80 bytes, need 96/);
    pass.end();
    for (const x of [d2t, u4, v8, h5x4, big]) x.destroy();
    f.destroy();
    s.destroy();
  });
});
