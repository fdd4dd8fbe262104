import { describe, expect, it } from 'vitest';
import { gpu, type KernelRun, runOnce } from '../../../test/helpers/gpu.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import {
  checkCompaction,
  KvCompact,
  type KvFormat,
  type KvLayerBuffers,
  type KvShape,
  KvWrite,
  kvCompactRef,
  kvRingOf,
  kvRows,
  kvWriteRef,
  packHalves,
  unpackHalves,
} from './kv.js';

/** Caches of one layer on the CPU, [capacity, kvHeads, headDim] each. */
interface KvLayerData {
  k: Float32Array;
  v: Float32Array;
}

/**
 * Uploads every layer's caches (f32 values, packed to halves for an f16 cache), runs once what
 * `setup` encodes on them and returns the new caches as f32.
 */
async function runOnCaches(
  ctx: GpuContext,
  shape: KvShape,
  layers: readonly KvLayerData[],
  setup: (run: KernelRun, caches: KvLayerBuffers[]) => (pass: GPUComputePassEncoder) => void,
): Promise<KvLayerData[]> {
  const f16 = shape.format === 'f16';
  const read = async (b: GPUBuffer, n: number) =>
    f16 ? unpackHalves(await readU32(ctx, b, n / 2), n) : readF32(ctx, b, n);
  return runOnce(ctx, 'kv', (run) => {
    const upload = (x: Float32Array) => run.upload(f16 ? packHalves(x) : x);
    const caches = layers.map((l) => ({ k: upload(l.k), v: upload(l.v) }));
    return {
      encode: setup(run, caches),
      read: () =>
        Promise.all(
          caches.map(async (c, i) => ({
            k: await read(c.k, layers[i]!.k.length),
            v: await read(c.v, layers[i]!.v.length),
          })),
        ),
    };
  });
}

/** Runs {@link KvWrite} once on one layer's caches and returns them. */
async function runKvWrite(
  ctx: GpuContext,
  shape: KvShape,
  cache: KvLayerData,
  k: Float32Array,
  v: Float32Array,
  slots: Uint32Array,
): Promise<KvLayerData> {
  await KvWrite.prepare(ctx, shape.format);
  const [out] = await runOnCaches(ctx, shape, [cache], (run, [c]) => {
    const w = run.own(new KvWrite(ctx, run.binds, shape));
    const [bk, bv, bs] = [run.upload(k), run.upload(v), run.upload(slots)];
    return (pass) => w.encode(pass, bk, bv, bs, c!, slots.length);
  });
  return out!;
}

/** Runs {@link KvCompact} once on every layer's caches (slots checked first) and returns them. */
async function runKvCompact(
  ctx: GpuContext,
  shape: KvShape,
  layers: readonly KvLayerData[],
  slots: Uint32Array,
  prefixLen: number,
): Promise<KvLayerData[]> {
  checkCompaction(shape, slots, prefixLen);
  await KvCompact.prepare(ctx);
  return runOnCaches(ctx, shape, layers, (run, caches) => {
    const c = run.own(new KvCompact(ctx, run.binds, shape));
    const bs = run.upload(slots);
    return (pass) => c.encode(pass, caches, bs, slots.length, prefixLen);
  });
}

const F16: KvFormat = 'f16';

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

function layer(shape: KvShape, r: () => number): KvLayerData {
  const n = kvRows(shape) * shape.kvHeads * shape.headDim;
  return { k: rand(n, r), v: rand(n, r) };
}

describe('KV cache kernels vs the TS reference (exact copies)', () => {
  it.each([
    [{ capacity: 40, kvHeads: 2, headDim: 24 }, [5, 6, 7]],
    [{ capacity: 100, kvHeads: 1, headDim: 100 }, [90, 3, 41, 42, 17]],
    [{ capacity: 17, kvHeads: 4, headDim: 12 }, [16]],
    [{ capacity: 6, kvHeads: 2, headDim: 512 }, [5, 0, 3]], // Gemma 4's full-attention head
  ])('write at explicit slots: %o slots %o', async (shape, slotList) => {
    const ctx = await gpu();
    const r = rng(shape.capacity);
    const cache = layer(shape, r);
    const slots = Uint32Array.from(slotList);
    const row = shape.kvHeads * shape.headDim;
    const k = rand(slots.length * row, r);
    const v = rand(slots.length * row, r);
    const got = await runKvWrite(ctx, shape, cache, k, v, slots);
    kvWriteRef(shape, cache.k, cache.v, k, v, slots);
    expect(got.k).toEqual(cache.k);
    expect(got.v).toEqual(cache.v);
  });

  it.each([
    // Overlapping: sources and destinations share slots 11..13.
    [{ capacity: 30, kvHeads: 2, headDim: 16 }, 10, [11, 12, 13, 15]],
    // Already in place for the first two, then a gap.
    [{ capacity: 64, kvHeads: 3, headDim: 20 }, 40, [40, 41, 45, 50, 63]],
    // Single row far away; non-multiple-of-64 row of 7 floats.
    [{ capacity: 9, kvHeads: 1, headDim: 7 }, 2, [8]],
    [{ capacity: 12, kvHeads: 1, headDim: 512 }, 4, [5, 7, 11]],
  ])('compaction of every layer: %o prefix %i path %o', async (shape, prefixLen, slotList) => {
    const ctx = await gpu();
    const r = rng(prefixLen + slotList.length);
    const layers = [layer(shape, r), layer(shape, r), layer(shape, r)];
    const slots = Uint32Array.from(slotList);
    const got = await runKvCompact(ctx, shape, layers, slots, prefixLen);
    layers.forEach((l, i) => {
      kvCompactRef(shape, l.k, l.v, slots, prefixLen);
      expect(got[i]!.k).toEqual(l.k);
      expect(got[i]!.v).toEqual(l.v);
    });
  });

  it('rejects compaction paths that are not strictly increasing or start below the prefix', () => {
    const shape = { capacity: 20, kvHeads: 1, headDim: 4 };
    expect(() => checkCompaction(shape, [5, 4], 3)).toThrow(/slots\[1\] = 4/);
    expect(() => checkCompaction(shape, [2, 7], 3)).toThrow(/slots\[0\] = 2/);
    expect(() => checkCompaction(shape, [3, 20], 3)).toThrow(/capacity 20/);
    expect(() => checkCompaction(shape, [3, 4, 19], 3)).not.toThrow();
  });

  it.each([
    [{ capacity: 40, kvHeads: 2, headDim: 24, format: F16 }, [5, 6, 7]],
    [{ capacity: 100, kvHeads: 1, headDim: 98, format: F16 }, [90, 3, 41, 42, 17]],
    [{ capacity: 17, kvHeads: 3, headDim: 2, format: F16 }, [16, 0]],
    [{ capacity: 6, kvHeads: 1, headDim: 512, format: F16 }, [2, 5]],
  ])(
    'f16 cache: write rounds to halves exactly as the reference (nearest even) at explicit slots: %o slots %o',
    async (shape, slotList) => {
      const ctx = await gpu();
      const r = rng(shape.capacity + 1);
      const toHalf = (x: Float32Array) => unpackHalves(packHalves(x), x.length);
      const cache = layer(shape, r);
      cache.k = toHalf(cache.k);
      cache.v = toHalf(cache.v);
      const slots = Uint32Array.from(slotList);
      const row = shape.kvHeads * shape.headDim;
      const k = rand(slots.length * row, r);
      const v = rand(slots.length * row, r);
      // Ties (round to even, both ways), the largest finite half and overflow past it, half
      // subnormals, underflow to zero and signed zero. (Non-finite inputs are left out: WGSL lets a
      // device assume every f32 it reads is finite.)
      k.set([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 65504, 65520, -70000, 3e-6, -5e-8]);
      v.set([2 ** -25, 2 ** -26, 3 * 2 ** -26, -0, 0.1, 1e5]);
      const got = await runKvWrite(ctx, shape, cache, k, v, slots);
      kvWriteRef(shape, cache.k, cache.v, toHalf(k), toHalf(v), slots);
      for (const [a, b] of [
        [got.k, cache.k],
        [got.v, cache.v],
      ] satisfies [Float32Array, Float32Array][]) {
        const diff = Array.from(a).findIndex((x, i) => !Object.is(x, b[i]));
        expect(diff, `first difference at ${diff}: ${a[diff]} vs ${b[diff]}`).toBe(-1);
      }
    },
  );

  it('f16 cache: compaction moves packed rows exactly, overlapping included', async () => {
    const ctx = await gpu();
    const shape = { capacity: 30, kvHeads: 2, headDim: 6, format: F16 };
    const r = rng(9);
    const toHalf = (x: Float32Array) => unpackHalves(packHalves(x), x.length);
    const layers = [layer(shape, r), layer(shape, r)].map((l) => ({ k: toHalf(l.k), v: toHalf(l.v) }));
    const slots = Uint32Array.from([11, 12, 14, 20]);
    const got = await runKvCompact(ctx, shape, layers, slots, 10);
    layers.forEach((l, i) => {
      kvCompactRef(shape, l.k, l.v, slots, 10);
      expect(got[i]!.k).toEqual(l.k);
      expect(got[i]!.v).toEqual(l.v);
    });
  });
});

// A ring cache (sliding-window layers): slot s at row s mod ring. Each case checks the kernel against
// its reference on the ring, and that the ring then holds what a full cache written the same way
// holds (kvRingOf), the last `ring` slots.
describe('KV cache kernels on a ring of rows', () => {
  const toHalf = (x: Float32Array) => unpackHalves(packHalves(x), x.length);

  it.each<[KvShape, number, number]>([
    // A 40-row prefill chunk straddling a wrap (1024 = 8 · 128), f32.
    [{ capacity: 1100, kvHeads: 2, headDim: 24, ring: 128 }, 1000, 40],
    // A decode step at slot 2000 of a ring of 192 that has wrapped 10 times, f16.
    [{ capacity: 2001, kvHeads: 1, headDim: 98, ring: 192, format: F16 }, 2000, 1],
    // Head 512, f16, 3 rows across the wrap at 192 (3 · 64).
    [{ capacity: 200, kvHeads: 1, headDim: 512, ring: 64, format: F16 }, 190, 3],
  ])('write: %o, %i cached + %i rows', async (shape, base, M) => {
    const ctx = await gpu();
    const r = rng(base + M);
    const row = shape.kvHeads * shape.headDim;
    const round = (x: Float32Array) => (shape.format === 'f16' ? toHalf(x) : x);
    const full = { k: round(rand(shape.capacity * row, r)), v: round(rand(shape.capacity * row, r)) };
    const ring = { k: kvRingOf(shape, full.k, base - 1), v: kvRingOf(shape, full.v, base - 1) };
    const slots = Uint32Array.from({ length: M }, (_, i) => base + i);
    const k = round(rand(M * row, r));
    const v = round(rand(M * row, r));
    const got = await runKvWrite(ctx, shape, ring, k, v, slots);
    kvWriteRef(shape, ring.k, ring.v, k, v, slots);
    expect(got.k).toEqual(ring.k);
    expect(got.v).toEqual(ring.v);
    const { ring: _, ...flat } = shape;
    kvWriteRef(flat, full.k, full.v, k, v, slots);
    expect(got.k).toEqual(kvRingOf(shape, full.k, base + M - 1));
    expect(got.v).toEqual(kvRingOf(shape, full.v, base + M - 1));
  });

  it.each<[KvShape, number, readonly number[]]>([
    // A 21-node tree at 1020 .. 1040 across the wrap at 1024 (row 0); destinations 1021, 1022,
    // 1024 and 1025 are sources of earlier entries (read before they are overwritten).
    [{ capacity: 1100, kvHeads: 2, headDim: 16, ring: 128 }, 1020, [1021, 1022, 1024, 1025, 1031, 1040]],
    [{ capacity: 700, kvHeads: 2, headDim: 6, ring: 192, format: F16 }, 570, [571, 575, 576, 600, 633]],
  ])('compaction: %o prefix %i path %o', async (shape, prefixLen, path) => {
    const ctx = await gpu();
    const r = rng(prefixLen);
    const row = shape.kvHeads * shape.headDim;
    const round = (x: Float32Array) => (shape.format === 'f16' ? toHalf(x) : x);
    const fulls = [0, 1].map(() => ({
      k: round(rand(shape.capacity * row, r)),
      v: round(rand(shape.capacity * row, r)),
    }));
    const last = path.at(-1)!; // the tree's rows were written up to its last node
    const rings = fulls.map((f) => ({ k: kvRingOf(shape, f.k, last), v: kvRingOf(shape, f.v, last) }));
    const slots = Uint32Array.from(path);
    const got = await runKvCompact(ctx, shape, rings, slots, prefixLen);
    const { ring: _, ...flat } = shape;
    rings.forEach((ring, i) => {
      kvCompactRef(shape, ring.k, ring.v, slots, prefixLen);
      expect(got[i]!.k).toEqual(ring.k);
      expect(got[i]!.v).toEqual(ring.v);
      const full = fulls[i]!;
      kvCompactRef(flat, full.k, full.v, slots, prefixLen);
      expect(got[i]!.k).toEqual(kvRingOf(shape, full.k, last));
      expect(got[i]!.v).toEqual(kvRingOf(shape, full.v, last));
    });
  });

  it('rejects a ring under 64 rows and a path that reaches past the ring', () => {
    const shape = { capacity: 300, kvHeads: 1, headDim: 4, ring: 64 };
    expect(() => kvRows({ ...shape, ring: 63 })).toThrow(
      /ring must be 0 \(none\) or an integer ≥ 64 \(the slots of one pass\), got 63/,
    );
    expect(() => kvRows({ ...shape, ring: 64.5 })).toThrow(/got 64.5/);
    expect(kvRows(shape)).toBe(64);
    expect(kvRows({ ...shape, ring: 0 })).toBe(300);
    expect(() => checkCompaction(shape, [100, 163], 100)).not.toThrow();
    expect(() => checkCompaction(shape, [100, 164], 100)).toThrow(/164 lies 64 slots past prefixLen 100/);
  });
});
