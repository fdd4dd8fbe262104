import { describe, expect, it } from 'vitest';
import { gpu, projectForms, runOnce } from '../../../test/helpers/gpu.js';
import { createBuffer, readF32, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import { decodeKvWords, type KvFormat, kvRingOf, packHalves } from '../kv/kv.js';
import { encodeKvIntRow, isKvInt, kvIntHeadWords } from '../kv/kv-quant.js';
import {
  ATTENTION_CHUNK,
  attentionChunks,
  MIN_ATTENTION_WINDOW,
  SplitAttention,
  visWords,
} from './attention-split.js';
import { type AttentionInputs, attentionRef, chainEnds, subtreeEnds } from './reference.js';

function slotsOf(base: number, rows: number): Uint32Array {
  return Uint32Array.from({ length: rows }, (_, r) => base + r);
}

/**
 * Runs {@link SplitAttention} once on {@link AttentionInputs} (k, v: a full cache); with `ring`, on
 * the ring of that many rows holding the same slots up to the pass's last (kvRingOf). Returns
 * [T, heads, headDim], the dispatch count and each dispatch's grid.
 */
async function runSplit(
  ctx: GpuContext,
  a: AttentionInputs,
  ring = 0,
): Promise<{ out: Float32Array; dispatches: number; grids: number[][] }> {
  const T = a.ends.length;
  await SplitAttention.prepare(ctx, a);
  const before = ctx.counter.dispatches;
  const grids: number[][] = [];
  const shape = { ...a, ring, maxRows: T };
  const cache = (x: Float32Array) => {
    const rows = ring ? kvRingOf(shape, x, a.base + T - 1) : x;
    return cacheWords(a, rows);
  };
  const out = await runOnce(ctx, 'attention-split', (run) => {
    const att = run.own(new SplitAttention(ctx, run.binds, shape));
    const q = run.upload(a.q);
    const k = run.upload(cache(a.k));
    const v = run.upload(cache(a.v));
    const [ends, slots, positions, out] = [
      run.upload(visWords(a.ends)),
      run.upload(slotsOf(a.base, T)),
      run.upload(Uint32Array.from(a.positions ?? slotsOf(a.base, T))),
      run.empty(a.q.byteLength),
    ];
    return {
      encode: (pass) => {
        const dispatch = pass.dispatchWorkgroups.bind(pass);
        pass.dispatchWorkgroups = (x, y = 1, z = 1) => {
          grids.push([x, y, z]);
          dispatch(x, y, z);
        };
        att.encode(pass, q, k, v, ends, slots, positions, out, T, a.base);
      },
      read: () => readF32(ctx, out, T * a.heads * a.headDim),
    };
  });
  return { out, dispatches: ctx.counter.dispatches - before, grids };
}

/** Cache rows [n, kvHeads, headDim] in the cache's format: f32, packed halves, or int8 / int4 words per slot. */
function cacheWords(a: AttentionInputs, rows: Float32Array): Float32Array | Uint32Array {
  const format = a.format ?? 'f32';
  if (format === 'f16') return packHalves(rows);
  if (!isKvInt(format)) return rows;
  const row = a.kvHeads * a.headDim;
  const per = kvIntHeadWords(format, a.headDim) * a.kvHeads;
  const out = new Uint32Array((rows.length / row) * per);
  for (let s = 0; s < rows.length / row; s++)
    out.set(
      encodeKvIntRow(format, a.kvHeads, a.headDim, rows.subarray(s * row, (s + 1) * row), false),
      s * per,
    );
  return out;
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function rand(n: number, r: () => number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
}

/** |a - b| ≤ tol · (1 + |b|) elementwise; reports the worst index. */
function expectClose(a: Float32Array, b: Float32Array, tol: number): void {
  expect(a.length).toBe(b.length);
  let worst = 0;
  let at = -1;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i]! - b[i]!) / (1 + Math.abs(b[i]!));
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  expect(worst, `worst error at ${at}: ${a[at]} vs ${b[at]}`).toBeLessThanOrEqual(tol);
}

/** A random tree of n nodes in depth-first order: node i's parent is on the path to node i-1. */
function randomTree(n: number, r: () => number): number[] {
  const parents = [-1];
  for (let i = 1; i < n; i++) {
    const path: number[] = [];
    for (let a = i - 1; a >= 0; a = parents[a]!) path.push(a);
    parents.push(path[Math.floor(r() * path.length)]!);
  }
  return parents;
}

/** Each node's position in a tree at `base`: base + its depth (what RoPE reads for a draft tree). */
function treePositions(parents: readonly number[], base: number): Uint32Array {
  const out = new Uint32Array(parents.length);
  parents.forEach((par, i) => {
    out[i] = par < 0 ? base : out[par]! + 1;
  });
  return out;
}

function inputs(
  seed: number,
  heads: number,
  kvHeads: number,
  headDim: number,
  base: number,
  ends: Uint32Array,
  format: KvFormat = 'f32',
): AttentionInputs {
  const r = rng(seed);
  const capacity = base + ends.length + 5;
  return {
    heads,
    kvHeads,
    headDim,
    capacity,
    base,
    ends,
    format,
    q: rand(ends.length * heads * headDim, r, 2),
    k: rand(capacity * kvHeads * headDim, r, 2),
    v: rand(capacity * kvHeads * headDim, r),
  };
}

/** The reference on the values the cache holds (halves for an f16 cache, rounded heads for int8 / int4). */
function reference(a: AttentionInputs): Float32Array {
  const format = a.format ?? 'f32';
  if (format === 'f32') return attentionRef(a);
  const held = (x: Float32Array) =>
    decodeKvWords(
      { capacity: a.capacity, kvHeads: a.kvHeads, headDim: a.headDim, format },
      cacheWords(a, x) as Uint32Array,
      false,
    );
  return attentionRef({ ...a, k: held(a.k), v: held(a.v) });
}

const TOL = 5e-5;
const CH = ATTENTION_CHUNK;

// Both forms of the partial kernel (GpuContext.kernels: workgroups sharing a chunk's keys on a GPU,
// one thread per query head on a software adapter), each against the reference, as far as the
// project runs them (projectForms).
const FORMS = projectForms([
  ['workgroup form', 'gpu'],
  ['serial form', 'serial'],
] as const);

describe.each(FORMS)(
  'split attention (chunks of absolute slots, then a merge) vs the TS reference, %s',
  (_form, kernels) => {
    const serial = kernels === 'serial';
    it.each([
      // heads, kvHeads, headDim, base, format
      [4, 4, 64, 37, 'f32'],
      [4, 2, 128, CH - 1, 'f32'],
      [8, 2, 80, CH, 'f32'],
      [8, 2, 64, 3 * CH + 17, 'f16'],
      [6, 6, 96, 700, 'f16'],
      [4, 1, 128, 2 * CH + 200, 'f32'],
      // Gemma 4's full layers: head 512, each thread summing two V columns.
      [2, 1, 512, 37, 'f32'],
      [4, 1, 512, CH + 3, 'f16'],
      // Integer caches: a scale word then the values per head (int4: two vec4s per word).
      [8, 2, 64, 3 * CH + 17, 'int8'],
      [4, 1, 128, CH + 3, 'int4'],
      [2, 1, 512, 37, 'int4'],
    ] as const)(
      'decode: heads=%i kvHeads=%i headDim=%i at slot %i, %s cache',
      async (heads, kvHeads, headDim, base, format) => {
        const ctx = await gpu({ kernels });
        const a = inputs(heads * 1000 + base, heads, kvHeads, headDim, base, chainEnds(1), format);
        const { out, dispatches } = await runSplit(ctx, a);
        expectClose(out, reference(a), TOL);
        // One dispatch while the keys fit one chunk, the partial pass and the merge past it.
        expect(dispatches).toBe(base + 1 <= CH ? 1 : 2);
      },
    );

    it.each([
      [4, 2, 64, 0, 17, 'f32'],
      [8, 2, 96, CH - 9, 17, 'f32'],
      [4, 1, 128, 2 * CH - 30, 40, 'f16'],
      [2, 1, 512, CH - 5, 9, 'f32'],
      [4, 1, 128, 2 * CH - 30, 40, 'int8'],
      [6, 3, 32, 0, 17, 'int4'],
    ] as const)(
      'causal prefill: heads=%i kvHeads=%i headDim=%i, %i cached + %i rows, %s cache',
      async (heads, kvHeads, headDim, base, M, format) => {
        const ctx = await gpu({ kernels });
        const a = inputs(base * 31 + M, heads, kvHeads, headDim, base, chainEnds(M), format);
        expectClose((await runSplit(ctx, a)).out, reference(a), TOL);
      },
    );

    it.each([
      // firstSlot, heads, kvHeads, headDim, base, rows, format
      [1, 4, 2, 64, 0, 17, 'f32'], // the row at slot 0 sees only itself
      [3, 4, 2, 64, 0, 17, 'f16'],
      [1, 8, 2, 96, 60, 20, 'f32'], // rows past slot 64 reach slot 0 through d ≥ 64, not a vis bit
      [3, 4, 1, 128, CH - 9, 17, 'f16'], // across a chunk boundary: the partial pass and the merge
      [1, 4, 2, 80, 2 * CH + 30, 40, 'f32'],
      [3, 6, 6, 96, 700, 1, 'f16'], // decode in the third chunk
    ] as const)(
      'firstSlot %i: heads=%i kvHeads=%i headDim=%i, %i cached + %i rows, %s cache',
      async (firstSlot, heads, kvHeads, headDim, base, M, format) => {
        const ctx = await gpu({ kernels });
        const a = {
          ...inputs(base * 17 + M + firstSlot, heads, kvHeads, headDim, base, chainEnds(M), format),
          firstSlot,
        };
        const want = reference(a);
        // The option changes the answer: a test of it cannot pass by ignoring it.
        expect(want).not.toEqual(reference({ ...a, firstSlot: 0 }));
        expectClose((await runSplit(ctx, a)).out, want, TOL);
      },
    );

    it('firstSlot 1 on a tree at slot 0: the root sees only itself, its descendants skip it', async () => {
      const ctx = await gpu({ kernels });
      const parents = randomTree(12, rng(77));
      const a = { ...inputs(77, 4, 2, 64, 0, subtreeEnds(parents)), firstSlot: 1 };
      const want = reference(a);
      expect(want).not.toEqual(reference({ ...a, firstSlot: 0 }));
      expectClose((await runSplit(ctx, a)).out, want, TOL);
    });

    it.each([
      [17, CH - 8, 4, 2, 64, 'f32'],
      [17, 500, 8, 2, 80, 'f16'],
      [12, 3, 4, 4, 128, 'f32'],
      [9, CH - 4, 2, 2, 512, 'f16'],
    ] as const)(
      'tree of %i nodes after %i cached (heads=%i, kvHeads=%i, headDim=%i, %s cache)',
      async (n, base, heads, kvHeads, headDim, format) => {
        const ctx = await gpu({ kernels });
        const parents = randomTree(n, rng(n * 7 + base));
        const a = inputs(n + base, heads, kvHeads, headDim, base, subtreeEnds(parents), format);
        expectClose((await runSplit(ctx, a)).out, reference(a), TOL);
      },
    );

    it.each([
      ['f32', 8, 2, 64],
      ['f16', 4, 1, 80],
    ] as const)(
      'batch invariance (%s cache): each row of a 17-row chain across a chunk boundary equals decode at its slot, bit for bit',
      async (format, heads, kvHeads, headDim) => {
        const ctx = await gpu({ kernels });
        const M = 17;
        const a = inputs(91, heads, kvHeads, headDim, CH - 7, chainEnds(M), format); // rows at slots 249 .. 265
        const prefill = (await runSplit(ctx, a)).out;
        const hd = heads * headDim;
        for (let r = 0; r < M; r++) {
          const one = await runSplit(ctx, {
            ...a,
            q: a.q.slice(r * hd, (r + 1) * hd),
            ends: chainEnds(1),
            base: a.base + r,
          });
          expect(Array.from(one.out), `row ${r}`).toEqual(Array.from(prefill.subarray(r * hd, (r + 1) * hd)));
        }
      },
    );

    it('batch invariance: each row of a 17-node tree across a chunk boundary equals the same row verified with fewer nodes', async () => {
      const ctx = await gpu({ kernels });
      const n = 17;
      const parents = randomTree(n, rng(5));
      const ends = subtreeEnds(parents);
      const a = inputs(123, 4, 2, 64, CH - 5, ends);
      const full = (await runSplit(ctx, a)).out;
      const hd = a.heads * a.headDim;
      // The first r + 1 nodes of a depth-first tree are a depth-first tree (ends clipped to r).
      for (const r of [0, 3, 4, 5, 9, 16]) {
        const part = await runSplit(ctx, {
          ...a,
          q: a.q.slice(0, (r + 1) * hd),
          ends: ends.slice(0, r + 1).map((e) => Math.min(e, r)),
        });
        expect(Array.from(part.out.subarray(r * hd)), `row ${r}`).toEqual(
          Array.from(full.subarray(r * hd, (r + 1) * hd)),
        );
      }
    });

    // Sliding window (window ≥ 64): the reference applies p - k < window to every key; the kernels
    // test prefix slots only, and return at once on chunks wholly before a row's window.
    it.each([
      // heads, kvHeads, headDim, base, window, format
      [4, 2, 64, 300, 64, 'f32'], // the window starts in chunk 0: chunks 0 and 1, merged
      [8, 2, 64, 600, 100, 'f16'], // chunk 0 wholly before it (skipped): chunks 1 and 2, merged
      [4, 4, 64, 700, 64, 'f32'], // within chunk 2: final after the partial pass
      [2, 1, 512, 600, 100, 'f16'], // head 512 (Gemma 4's full layers are global, but any may be)
    ] as const)(
      'window, decode: heads=%i kvHeads=%i headDim=%i at slot %i, window %i, %s cache',
      async (heads, kvHeads, headDim, base, window, format) => {
        const ctx = await gpu({ kernels });
        const a = { ...inputs(base + window, heads, kvHeads, headDim, base, chainEnds(1), format), window };
        const want = reference(a);
        expect(want).not.toEqual(reference({ ...a, window: 0 }));
        const { out, dispatches } = await runSplit(ctx, a);
        expectClose(out, want, TOL);
        expect(dispatches).toBe(SplitAttention.dispatches(base, 1, window));
      },
    );

    it.each([
      // heads, kvHeads, headDim, base, rows, window, format
      [4, 2, 64, 30, 40, 64, 'f32'], // every key in chunk 0, later rows past the window's edge
      [4, 1, 128, 330, 40, 100, 'f16'], // rows 0-24 start in chunk 0 (merged), rows 25-39 in chunk 1 (final)
    ] as const)(
      'window, causal prefill: heads=%i kvHeads=%i headDim=%i, %i cached + %i rows, window %i, %s cache',
      async (heads, kvHeads, headDim, base, M, window, format) => {
        const ctx = await gpu({ kernels });
        const a = {
          ...inputs(base + M + window, heads, kvHeads, headDim, base, chainEnds(M), format),
          window,
        };
        const want = reference(a);
        expect(want).not.toEqual(reference({ ...a, window: 0 }));
        const prefill = (await runSplit(ctx, a)).out;
        expectClose(prefill, want, TOL);
        // Batch invariance: a row equals decode at its slot, bit for bit, on either side of chunk 1.
        const hd = heads * headDim;
        for (const r of [0, 24, 25, M - 1]) {
          const one = await runSplit(ctx, {
            ...a,
            q: a.q.slice(r * hd, (r + 1) * hd),
            ends: chainEnds(1),
            base: a.base + r,
          });
          expect(Array.from(one.out), `row ${r}`).toEqual(Array.from(prefill.subarray(r * hd, (r + 1) * hd)));
        }
      },
    );

    it.each([
      // nodes, base, window, heads, kvHeads, headDim, format
      [17, 300, 100, 4, 2, 64, 'f32'],
      [17, 500, 64, 8, 2, 80, 'f16'], // chunk 0 before every row's window; rows at slots 500 .. 516
    ] as const)(
      'window, tree of %i nodes after %i cached, window %i (heads=%i, kvHeads=%i, headDim=%i, %s cache): rows at base + depth',
      async (n, base, window, heads, kvHeads, headDim, format) => {
        const ctx = await gpu({ kernels });
        const parents = randomTree(n, rng(n * 3 + base));
        const a = {
          ...inputs(n + base + window, heads, kvHeads, headDim, base, subtreeEnds(parents), format),
          window,
          positions: treePositions(parents, base),
        };
        const want = reference(a);
        expect(want).not.toEqual(reference({ ...a, window: 0 }));
        expectClose((await runSplit(ctx, a)).out, want, TOL);
      },
    );

    // A ring cache (slot s at row s mod ring, ring ≥ window + 64): the same chunks in the same order
    // as over a full cache, so the same bits; only the chunks from the first row's window start on
    // are launched. The full cache holds random keys in the ring's slots and the one before it
    // (overwritten in the ring, and out of every row's window), zeros elsewhere.
    it.each([
      // heads, kvHeads, headDim, format, window, ring, nodes (0: a chain), base, rows, grid width
      // Decode at 1030 (the ring wrapped 5 times): window 931 .. 1030 spans chunks 3, 4 and the wrap at 960.
      [4, 2, 64, 'f32', 100, 192, 0, 1030, 1, 2],
      // A 40-row prefill chunk at 1000 .. 1039 across the wrap at 1024, also chunk 4's start: rows
      // 0-23 final after the partial pass, rows 24-39 merged.
      [8, 2, 64, 'f16', 64, 128, 0, 1000, 40, 2],
      // A 17-node tree at 760 .. 776, across the wrap at 768 (4 · 192), also chunk 3's start.
      [4, 2, 64, 'f32', 100, 192, 17, 760, 17, 2],
      // Decode at 100000 with ring = window + 64: chunks 389 and 390 launched, not 391.
      [8, 2, 64, 'f32', 300, 364, 0, 100000, 1, 2],
    ] as const)(
      'ring: heads=%i kvHeads=%i headDim=%i %s cache, window %i, ring %i, tree of %i, at %i, %i rows',
      async (heads, kvHeads, headDim, format, window, ring, nodes, base, M, width) => {
        const ctx = await gpu({ kernels });
        const r = rng(base + ring);
        const parents = nodes ? randomTree(nodes, r) : undefined;
        const ends = parents ? subtreeEnds(parents) : chainEnds(M);
        const capacity = base + M;
        const row = kvHeads * headDim;
        const full = () => {
          const x = new Float32Array(capacity * row);
          x.set(rand((ring + 1) * row, r, 2), (capacity - ring - 1) * row);
          return x;
        };
        const a: AttentionInputs = {
          heads,
          kvHeads,
          headDim,
          capacity,
          format,
          base,
          ends,
          window,
          q: rand(M * heads * headDim, r, 2),
          k: full(),
          v: full(),
          ...(parents ? { positions: treePositions(parents, base) } : {}),
        };
        const got = await runSplit(ctx, a, ring);
        expectClose(got.out, reference(a), TOL);
        expect(attentionChunks(base, M, window)).toBe(width);
        const merge = width > 1 ? [[kvHeads, M, 1]] : [];
        expect(got.grids).toEqual([[width, kvHeads, M], ...merge]);
        expect(got.dispatches).toBe(SplitAttention.dispatches(base, M, window));
        // A full cache is worth uploading (and the window's effect worth checking) for the small cases only.
        if (base > 5000) return;
        expect(reference(a)).not.toEqual(reference({ ...a, window: 0 }));
        expect(Array.from(got.out)).toEqual(Array.from((await runSplit(ctx, a)).out));
      },
    );

    it('a windowed and a global instance share one buffer of partials in one pass', async () => {
      const ctx = await gpu({ kernels });
      const a = inputs(41, 4, 2, 64, 2 * CH + 40, chainEnds(3));
      const windowed = { ...a, window: 100 };
      const T = a.ends.length;
      await SplitAttention.prepare(ctx, a);
      const got = await runOnce(ctx, 'attention-split-shared', (run) => {
        const global = run.own(new SplitAttention(ctx, run.binds, { ...a, maxRows: T }));
        const local = run.own(
          new SplitAttention(ctx, run.binds, { ...windowed, maxRows: T }, global.partials),
        );
        const [q, k, v] = [run.upload(a.q), run.upload(a.k), run.upload(a.v)];
        const [vis, slots] = [run.upload(visWords(a.ends)), run.upload(slotsOf(a.base, T))];
        const [outG, outW] = [run.empty(a.q.byteLength), run.empty(a.q.byteLength)];
        return {
          encode: (pass) => {
            // A chain's positions are its slots.
            global.encode(pass, q, k, v, vis, slots, slots, outG, T, a.base);
            local.encode(pass, q, k, v, vis, slots, slots, outW, T, a.base);
          },
          read: async () => ({
            global: await readF32(ctx, outG, a.q.length),
            windowed: await readF32(ctx, outW, a.q.length),
          }),
        };
      });
      expectClose(got.global, reference(a), TOL);
      expectClose(got.windowed, reference(windowed), TOL);
    });

    it('steady decode: growing positions write no buffer, create no bind group and compile nothing', async () => {
      const ctx = await gpu({ kernels });
      const binds = new BindGroupCache(ctx.device);
      const a = inputs(9, 4, 2, 64, 0, chainEnds(1));
      const capacity = 2 * CH + 8;
      const k = rand(capacity * a.kvHeads * a.headDim, rng(3), 2);
      const v = rand(capacity * a.kvHeads * a.headDim, rng(4));
      await SplitAttention.prepare(ctx, a);
      const att = new SplitAttention(ctx, binds, { ...a, capacity, maxRows: 1 });
      const bq = uploadBuffer(ctx, a.q, 'q');
      const bk = uploadBuffer(ctx, k, 'k');
      const bv = uploadBuffer(ctx, v, 'v');
      const be = uploadBuffer(ctx, visWords(a.ends), 'vis');
      const bo = createBuffer(ctx, a.q.byteLength, 'out');
      const compiled = ctx.pipelines.compiled;
      const slotBufs = [CH - 2, CH - 1, CH, 2 * CH + 3].map(
        (pos) => [pos, uploadBuffer(ctx, slotsOf(pos, 1), 's')] as const,
      );
      for (const [pos, slots] of slotBufs) {
        const writes = ctx.counter.writes;
        const enc = ctx.device.createCommandEncoder();
        const pass = enc.beginComputePass();
        att.encode(pass, bq, bk, bv, be, slots, slots, bo, 1, pos);
        pass.end();
        ctx.device.queue.submit([enc.finish()]);
        expect(ctx.counter.writes, `writes at slot ${pos}`).toBe(writes);
        const got = await readF32(ctx, bo, a.q.length);
        expectClose(got, attentionRef({ ...a, capacity, k, v, base: pos }), TOL);
      }
      // One bind group for the partial pass per slots buffer, and one merge group per buffer past a chunk.
      expect(binds.created).toBe(4 + 2);
      expect(ctx.pipelines.compiled).toBe(compiled);
      expect(() =>
        att.encode(
          ctx.device.createCommandEncoder().beginComputePass(),
          bq,
          bk,
          bv,
          be,
          be,
          be,
          bo,
          1,
          capacity,
        ),
      ).toThrow(/exceeds capacity/);
      for (const b of [bq, bk, bv, be, bo, ...slotBufs.map(([, s]) => s)]) b.destroy();
      att.destroy();
    });

    it('rejects shapes it cannot run: headDim not a multiple of 4 (or past 256 of 256), too much workgroup memory, a negative firstSlot, a window under 64, small shared partials, a ring too small or without a window', async () => {
      const ctx = await gpu({ kernels });
      const binds = new BindGroupCache(ctx.device);
      const shape = { heads: 4, kvHeads: 2, headDim: 64, capacity: 16, maxRows: 1 };
      expect(() => new SplitAttention(ctx, binds, { ...shape, headDim: 66 })).toThrow(/multiple of 4/);
      // Past 4 · WG (256) a thread sums whole V columns: a multiple of 256 only.
      expect(() => new SplitAttention(ctx, binds, { ...shape, headDim: 320 })).toThrow(/or of 256, got 320/);
      expect(() => new SplitAttention(ctx, binds, { ...shape, firstSlot: -1 })).toThrow(
        /firstSlot must be an integer ≥ 0, got -1/,
      );
      expect(() => new SplitAttention(ctx, binds, { ...shape, window: MIN_ATTENTION_WINDOW - 1 })).toThrow(
        /window must be 0 \(none\) or an integer ≥ 64, got 63/,
      );
      const small = new SplitAttention(ctx, binds, shape);
      expect(() => new SplitAttention(ctx, binds, { ...shape, maxRows: 2 }, small.partials)).toThrow(
        /shared partials hold/,
      );
      small.destroy();
      const big = { ...shape, heads: 64, kvHeads: 1, headDim: 256 };
      if (serial)
        new SplitAttention(ctx, binds, big).destroy(); // the serial form holds no workgroup memory
      else expect(() => new SplitAttention(ctx, binds, big)).toThrow(/workgroup memory/);
      // A ring needs a window and window + 64 rows; a pass over it spans at most 64 slots.
      const windowed = { ...shape, capacity: 1000, maxRows: 64, window: 100 };
      expect(() => new SplitAttention(ctx, binds, { ...windowed, window: 0, ring: 192 })).toThrow(
        /a ring of 192 rows needs a window with ring ≥ window \+ 64 \(the slots of one pass\), got window 0/,
      );
      expect(() => new SplitAttention(ctx, binds, { ...windowed, ring: 163 })).toThrow(
        /ring of 163 rows.*got window 100/,
      );
      expect(() => new SplitAttention(ctx, binds, { ...windowed, ring: 50 })).toThrow(
        /ring must be 0 \(none\) or an integer ≥ 64/,
      );
      const att = new SplitAttention(ctx, binds, { ...windowed, ring: 164 });
      const b = createBuffer(ctx, 164 * 2 * 64 * 4, 'buf');
      const pass = ctx.device.createCommandEncoder().beginComputePass();
      expect(() => att.encode(pass, b, b, b, b, b, b, b, 1, 500, 564)).toThrow(
        /with a ring a pass spans at most 64 slots, got base 500 to lastSlot 564/,
      );
      // The cache holds ring rows, not capacity.
      const short = createBuffer(ctx, 163 * 2 * 64 * 4, 'short');
      expect(() => att.encode(pass, b, b, short, b, b, b, b, 1, 500)).toThrow(
        /vCache holds 83456 bytes, need 83968/,
      );
      pass.end();
      b.destroy();
      short.destroy();
      att.destroy();
    });
  },
);

describe('split attention over a ring: grid and partials', () => {
  it('launches the chunks a window can see, and a ring keeps its partials the window’s size', () => {
    // A decode step at 100000 with a window of 1024: chunks 386 .. 390, not all 391.
    expect(attentionChunks(100000, 1, 1024)).toBe(5);
    expect(attentionChunks(100000, 1)).toBe(391);
    // A GPU-grown tree after 100000, slots up to 100063: chunks 386 .. 390 still.
    expect(attentionChunks(100000, 4, 1024, 100063)).toBe(5);
    expect(SplitAttention.dispatches(700, 1, 64)).toBe(1); // window 637 .. 700, all in chunk 2
    expect(SplitAttention.dispatches(700, 1)).toBe(2);
    const shape = { heads: 8, kvHeads: 2, headDim: 128, capacity: 131072, maxRows: 64, window: 1024 };
    const perChunk = 64 * 8 * (128 + 2) * 4;
    expect(SplitAttention.partialBytes(shape)).toBe(512 * perChunk);
    // Window starts from base - 1023 to slots up to base + 63: 1087 slots touch at most 6 chunks.
    expect(SplitAttention.partialBytes({ ...shape, ring: 1088 })).toBe(6 * perChunk);
  });
});
