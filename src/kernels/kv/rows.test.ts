import { describe, expect, it } from 'vitest';
import { gpu, type KernelRun, runOnce } from '../../../test/helpers/gpu.js';
import { InvalidInputError } from '../../errors.js';
import { createBuffer, readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import {
  checkRowCompaction,
  RowCompact,
  RowScatter,
  type RowShape,
  rowsCompactRef,
  rowsScatterRef,
} from './rows.js';

/** The slot a path chosen on the GPU pads its slot list with. */
const PAD = 0xffffffff;

/**
 * Uploads `store` [capacity, row], runs once what `setup` encodes on it and returns the new store.
 */
async function runOnStore(
  ctx: GpuContext,
  store: Float32Array,
  setup: (run: KernelRun, store: GPUBuffer) => (pass: GPUComputePassEncoder) => void,
): Promise<Float32Array> {
  await Promise.all([RowScatter.prepare(ctx), RowCompact.prepare(ctx)]);
  return runOnce(ctx, 'rows', (run) => {
    const b = run.upload(store);
    return { encode: setup(run, b), read: () => readF32(ctx, b, store.length) };
  });
}

/** Runs {@link RowScatter} once (src: [slots.length, row]) and returns the store. */
function runRowScatter(
  ctx: GpuContext,
  shape: RowShape,
  store: Float32Array,
  src: Float32Array,
  slots: Uint32Array,
): Promise<Float32Array> {
  return runOnStore(ctx, store, (run, b) => {
    const w = run.own(new RowScatter(ctx, run.binds, shape));
    const [bSrc, bSlots] = [run.upload(src), run.upload(slots)];
    return (pass) => w.encode(pass, bSrc, bSlots, b, slots.length);
  });
}

/** Runs {@link RowCompact} once and returns the store. */
function runRowCompact(
  ctx: GpuContext,
  shape: RowShape,
  store: Float32Array,
  slots: Uint32Array,
  prefixLen: number,
): Promise<Float32Array> {
  return runOnStore(ctx, store, (run, b) => {
    const c = run.own(new RowCompact(ctx, run.binds, shape));
    const bSlots = run.upload(slots);
    return (pass) => c.encode(pass, b, bSlots, slots.length, prefixLen);
  });
}

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

/** `k` distinct values of [lo, hi), in random order. */
function distinct(r: () => number, lo: number, hi: number, k: number): number[] {
  const all = Array.from({ length: hi - lo }, (_, i) => lo + i);
  for (let i = all.length - 1; i > 0; i--) {
    const j = int(r, 0, i + 1);
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  return all.slice(0, k);
}

interface ScatterCase {
  capacity: number;
  row: number;
  slots: number[];
}

interface CompactCase {
  capacity: number;
  row: number;
  prefixLen: number;
  slots: number[];
}

/** A random scatter: rows of any width, 1 to 12 distinct slots, about one in five padded. */
function randomScatter(seed: number): ScatterCase {
  const r = rng(Math.imul(seed, 0x9e3779b9));
  const capacity = int(r, 1, 80);
  const row = int(r, 1, 200);
  const slots = distinct(r, 0, capacity, int(r, 1, Math.min(capacity, 12) + 1)).map((s) =>
    r() < 0.2 ? PAD : s,
  );
  return { capacity, row, slots };
}

/** A random tree path: strictly increasing slots ≥ prefixLen, sometimes padded at the end. */
function randomCompact(seed: number): CompactCase {
  const r = rng(Math.imul(seed, 0x9e3779b9));
  const capacity = int(r, 2, 80);
  const row = int(r, 1, 200);
  const prefixLen = int(r, 0, capacity);
  const path = distinct(r, prefixLen, capacity, int(r, 1, capacity - prefixLen + 1)).sort((a, b) => a - b);
  const pad = r() < 0.5 ? Math.min(int(r, 1, 4), capacity - prefixLen - path.length) : 0;
  return { capacity, row, prefixLen, slots: [...path, ...Array<number>(pad).fill(PAD)] };
}

describe('row store kernels vs the TS reference (exact copies)', () => {
  it.each<ScatterCase>([
    { capacity: 40, row: 24, slots: [5, 6, 7] },
    { capacity: 17, row: 7, slots: [16] }, // M = 1, row far below the workgroup
    { capacity: 9, row: 64, slots: [3] }, // M = 1, one exact workgroup
    { capacity: 100, row: 65, slots: [90, 3, 41, 42, 17] },
    { capacity: 30, row: 1, slots: [29, 0, 11] },
    { capacity: 12, row: 33, slots: [4, PAD, 7, PAD] }, // padded entries skipped
    ...[1, 2, 3, 4, 5, 6].map(randomScatter),
  ])('scatter: capacity $capacity row $row slots $slots', async ({ capacity, row, slots: slotList }) => {
    const ctx = await gpu();
    const shape = { capacity, row };
    const r = rng(capacity * 1000 + row);
    const store = rand(capacity * row, r);
    const slots = Uint32Array.from(slotList);
    const src = rand(slots.length * row, r);
    const got = await runRowScatter(ctx, shape, store, src, slots);
    rowsScatterRef(store, src, slots, row, capacity);
    expect(got).toEqual(store);
  });

  it.each<CompactCase>([
    // A chain: every row already in place, nothing moves.
    { capacity: 30, row: 33, prefixLen: 10, slots: [10, 11, 12, 13] },
    // A tree path overlapping its destinations (slots 11..13), row not a multiple of 64.
    { capacity: 30, row: 100, prefixLen: 10, slots: [11, 12, 14, 20] },
    // In place for two, then a gap; two exact workgroups per row.
    { capacity: 64, row: 128, prefixLen: 40, slots: [40, 41, 45, 50, 63] },
    // One row far away.
    { capacity: 9, row: 7, prefixLen: 2, slots: [8] },
    // Padded by a GPU-chosen path: rows 7 and 8 keep their contents.
    { capacity: 20, row: 65, prefixLen: 5, slots: [6, 9, PAD, PAD] },
    ...[1, 2, 3, 4, 5, 6].map(randomCompact),
  ])(
    'compaction: capacity $capacity row $row prefix $prefixLen path $slots',
    async ({ capacity, row, prefixLen, slots: slotList }) => {
      const ctx = await gpu();
      const shape = { capacity, row };
      checkRowCompaction(
        shape,
        slotList.filter((s) => s !== PAD),
        prefixLen,
      );
      const store = rand(capacity * row, rng(prefixLen * 1000 + row));
      const before = store.slice();
      const slots = Uint32Array.from(slotList);
      const got = await runRowCompact(ctx, shape, store, slots, prefixLen);
      rowsCompactRef(store, slots, row, prefixLen, capacity);
      expect(got).toEqual(store);
      if (slotList.every((s, a) => s === prefixLen + a)) expect(got).toEqual(before);
    },
  );

  it('scatter of a tree then compaction of its accepted path, in one pass', async () => {
    const ctx = await gpu();
    const shape = { capacity: 24, row: 70 };
    const r = rng(7);
    const store = rand(shape.capacity * shape.row, r);
    // Tree nodes at slots 8..13 (prefix 8), the accepted path: nodes at 8, 10, 13.
    const tree = Uint32Array.from([8, 9, 10, 11, 12, 13]);
    const src = rand(tree.length * shape.row, r);
    const path = Uint32Array.from([8, 10, 13, PAD]);
    const got = await runOnStore(ctx, store, (run, b) => {
      const w = run.own(new RowScatter(ctx, run.binds, shape));
      const c = run.own(new RowCompact(ctx, run.binds, shape));
      const [bSrc, bTree, bPath] = [run.upload(src), run.upload(tree), run.upload(path)];
      return (pass) => {
        w.encode(pass, bSrc, bTree, b, tree.length);
        c.encode(pass, b, bPath, path.length, 8);
      };
    });
    rowsScatterRef(store, src, tree, shape.row, shape.capacity);
    rowsCompactRef(store, path, shape.row, 8, shape.capacity);
    expect(got).toEqual(store);
  });
});

describe('row store input checks', () => {
  it('rejects compaction paths that are not strictly increasing or start below the prefix', () => {
    const shape = { capacity: 20, row: 4 };
    expect(() => checkRowCompaction(shape, [5, 4], 3)).toThrow(/slots\[1\] = 4/);
    expect(() => checkRowCompaction(shape, [2, 7], 3)).toThrow(/slots\[0\] = 2/);
    expect(() => checkRowCompaction(shape, [3, 20], 3)).toThrow(/capacity 20/);
    expect(() => checkRowCompaction(shape, [3, PAD], 3)).toThrow(InvalidInputError);
    expect(() => checkRowCompaction({ capacity: 20, row: 0 }, [3], 3)).toThrow(/row must be ≥ 1, got 0/);
    expect(() => checkRowCompaction(shape, [3, 4, 19], 3)).not.toThrow();
  });

  it('names the bad shape or argument', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const bad = (f: () => void, message: RegExp) => {
      expect(f).toThrow(InvalidInputError);
      expect(f).toThrow(message);
    };
    bad(() => new RowScatter(ctx, binds, { capacity: 0, row: 4 }), /capacity must be ≥ 1, got 0/);
    bad(() => new RowCompact(ctx, binds, { capacity: 4, row: 1.5 }), /row must be ≥ 1, got 1.5/);

    const shape = { capacity: 8, row: 5 }; // the store needs 160 bytes
    const w = new RowScatter(ctx, binds, shape);
    const c = new RowCompact(ctx, binds, shape);
    const store = createBuffer(ctx, 160, 'store');
    const short = createBuffer(ctx, 140, 'short-store');
    const src = createBuffer(ctx, 3 * 5 * 4, 'src'); // [3, row]
    const slots = createBuffer(ctx, 3 * 4, 'slots'); // [3]
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    bad(() => w.encode(pass, src, slots, store, 0), /rows must be ≥ 1, got 0/);
    bad(() => w.encode(pass, src, slots, store, 4), /src holds 60 bytes, need 80/);
    bad(() => w.encode(pass, store, slots, store, 4), /slots holds 12 bytes, need 16/);
    bad(() => w.encode(pass, src, slots, short, 3), /store holds 140 bytes, need 160/);
    bad(() => c.encode(pass, store, slots, 0, 2), /count must be ≥ 1, got 0/);
    bad(() => c.encode(pass, store, slots, 3, 6), /prefixLen 6 \+ count 3 exceeds capacity 8/);
    bad(() => c.encode(pass, store, slots, 1, -1), /prefixLen -1/);
    bad(() => c.encode(pass, store, slots, 4, 2), /slots holds 12 bytes, need 16/);
    bad(() => c.encode(pass, short, slots, 3, 2), /store holds 140 bytes, need 160/);
    pass.end();
    for (const b of [store, short, src, slots]) b.destroy();
    w.destroy();
    c.destroy();
  });
});
