import { describe, expect, it } from 'vitest';
import { createBuffer, readF32, uploadBuffer, writeBuffer } from '../src/gpu/buffers.js';
import type { GpuContext } from '../src/gpu/device.js';
import {
  type AttentionInputs,
  attentionRef,
  chainEnds,
  subtreeEnds,
} from '../src/kernels/attention/reference.js';
import { BindGroupCache } from '../src/kernels/bind.js';
import { packHalves, unpackHalves } from '../src/kernels/kv/kv.js';
import { gpu, runOnce } from '../test/helpers/gpu.js';
import { Attention } from './attention.js';

/**
 * Uploads {@link AttentionInputs} (k, v as f32 values, packed to halves for an f16 cache), runs
 * {@link Attention} once and reads [T, heads, headDim] back.
 */
async function runAttention(ctx: GpuContext, a: AttentionInputs): Promise<Float32Array> {
  const T = a.ends.length;
  await Attention.prepare(ctx, a.format);
  return runOnce(ctx, 'attention', (run) => {
    const att = run.own(new Attention(ctx, run.binds, a));
    const q = run.upload(a.q);
    const k = run.upload(a.format === 'f16' ? packHalves(a.k) : a.k);
    const v = run.upload(a.format === 'f16' ? packHalves(a.v) : a.v);
    const [ends, out] = [run.upload(a.ends), run.empty(a.q.byteLength)];
    return {
      encode: (pass) => att.encode(pass, q, k, v, ends, out, T, a.base),
      read: () => readF32(ctx, out, T * a.heads * a.headDim),
    };
  });
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

function inputs(
  seed: number,
  heads: number,
  kvHeads: number,
  headDim: number,
  base: number,
  ends: Uint32Array,
): AttentionInputs {
  const r = rng(seed);
  const capacity = base + ends.length + 3;
  return {
    heads,
    kvHeads,
    headDim,
    capacity,
    base,
    ends,
    q: rand(ends.length * heads * headDim, r, 2),
    k: rand(capacity * kvHeads * headDim, r, 2),
    v: rand(capacity * kvHeads * headDim, r),
  };
}

const TOL = 5e-5;

describe('attention kernel (decode, causal prefill, tree) vs the TS reference', () => {
  it.each([
    [4, 2, 64, 37],
    [6, 3, 40, 100],
    [2, 1, 200, 5],
    [8, 8, 80, 130],
  ])('decode: heads=%i kvHeads=%i headDim=%i at position %i', async (heads, kvHeads, headDim, pos) => {
    const ctx = await gpu();
    const a = inputs(heads * 1000 + pos, heads, kvHeads, headDim, pos, chainEnds(1));
    expectClose(await runAttention(ctx, a), attentionRef(a), TOL);
  });

  it.each([
    [4, 1, 48, 70, 5],
    [2, 2, 32, 0, 9],
    [6, 2, 72, 130, 3],
  ])(
    'causal prefill: heads=%i kvHeads=%i headDim=%i, chunk at %i of %i rows',
    async (heads, kvHeads, headDim, start, M) => {
      const ctx = await gpu();
      const a = inputs(start * 31 + M, heads, kvHeads, headDim, start, chainEnds(M));
      expectClose(await runAttention(ctx, a), attentionRef(a), TOL);
    },
  );

  it.each([
    [12, 20, 4, 2, 48],
    [9, 70, 2, 1, 36],
    [16, 0, 3, 3, 24],
  ])(
    'tree of %i nodes after a prefix of %i (heads=%i, kvHeads=%i, headDim=%i) equals each root-to-leaf path run as causal attention',
    async (n, base, heads, kvHeads, headDim) => {
      const ctx = await gpu();
      const r = rng(n * 7 + base);
      const parents = randomTree(n, r);
      const ends = subtreeEnds(parents);
      const a = inputs(n + base, heads, kvHeads, headDim, base, ends);
      const tree = await runAttention(ctx, a);
      expectClose(tree, attentionRef(a), TOL);
      const hd = heads * headDim;
      const row = kvHeads * headDim;
      let leaves = 0;
      for (let leaf = 0; leaf < n; leaf++) {
        if (parents.includes(leaf)) continue;
        leaves++;
        const path: number[] = [];
        for (let x = leaf; x >= 0; x = parents[x]!) path.unshift(x);
        // The same prefix, then the path's own K/V at consecutive slots, as plain causal decoding would see it.
        const k = a.k.slice();
        const v = a.v.slice();
        const q = new Float32Array(path.length * hd);
        path.forEach((node, i) => {
          k.set(a.k.subarray((base + node) * row, (base + node + 1) * row), (base + i) * row);
          v.set(a.v.subarray((base + node) * row, (base + node + 1) * row), (base + i) * row);
          q.set(a.q.subarray(node * hd, (node + 1) * hd), i * hd);
        });
        const chain = await runAttention(ctx, { ...a, q, k, v, ends: chainEnds(path.length) });
        path.forEach((node, i) => {
          expectClose(chain.subarray(i * hd, (i + 1) * hd), tree.subarray(node * hd, (node + 1) * hd), 1e-5);
        });
      }
      expect(leaves).toBeGreaterThan(1);
    },
  );

  it('subtreeEnds gives each node the last row of its subtree and rejects non-depth-first layouts', () => {
    //      0
    //    1   4
    //   2 3   5
    expect(Array.from(subtreeEnds([-1, 0, 1, 1, 0, 4]))).toEqual([5, 3, 2, 3, 5, 5]);
    expect(Array.from(chainEnds(3))).toEqual([2, 2, 2]);
    expect(() => subtreeEnds([-1, 0, 0, 1])).toThrow(/not its descendant/);
    expect(() => subtreeEnds([-1, 2, 0])).toThrow(/must be -1/);
  });

  it('steady state: repeated decode steps reuse the pipeline and bind group and create nothing', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const a = inputs(5, 4, 2, 32, 10, chainEnds(1)); // capacity 14
    await Attention.prepare(ctx);
    const att = new Attention(ctx, binds, a);
    const bq = uploadBuffer(ctx, a.q, 'q');
    const bk = uploadBuffer(ctx, a.k, 'k');
    const bv = uploadBuffer(ctx, a.v, 'v');
    const be = uploadBuffer(ctx, a.ends, 'ends');
    const bo = createBuffer(ctx, a.q.byteLength, 'out');
    const compiled = ctx.pipelines.compiled;
    for (let pos = 3; pos < 7; pos++) {
      // A new query each step, at a growing position.
      const q = a.q.map((x) => x * (1 + pos / 10));
      writeBuffer(ctx, bq, q);
      const enc = ctx.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      att.encode(pass, bq, bk, bv, be, bo, 1, pos);
      pass.end();
      ctx.device.queue.submit([enc.finish()]);
      const got = await readF32(ctx, bo, q.length);
      expectClose(got, attentionRef({ ...a, q, base: pos }), TOL);
    }
    expect(binds.created).toBe(1);
    expect(ctx.pipelines.compiled).toBe(compiled);
    expect(() =>
      att.encode(ctx.device.createCommandEncoder().beginComputePass(), bq, bk, bv, be, bo, 1, a.capacity),
    ).toThrow(/exceeds capacity/);
    for (const b of [bq, bk, bv, be, bo]) b.destroy();
    att.destroy();
  });

  it('batch invariance: each causal-prefill row equals decode at its position, bit for bit', async () => {
    const ctx = await gpu();
    const M = 6;
    const a = inputs(77, 4, 2, 48, 61, chainEnds(M));
    const prefill = await runAttention(ctx, a);
    // A constant all-ones ends buffer is the same causal rule.
    const ones = await runAttention(ctx, { ...a, ends: new Uint32Array(M).fill(0xffffffff) });
    expect(Array.from(ones)).toEqual(Array.from(prefill));
    const hd = a.heads * a.headDim;
    for (let r = 0; r < M; r++) {
      const one = await runAttention(ctx, {
        ...a,
        q: a.q.slice(r * hd, (r + 1) * hd),
        ends: chainEnds(1),
        base: a.base + r,
      });
      expect(Array.from(one)).toEqual(Array.from(prefill.subarray(r * hd, (r + 1) * hd)));
    }
  });

  it.each([
    ['decode', 4, 2, 64, 90, chainEnds(1)],
    ['causal prefill', 6, 3, 40, 33, chainEnds(5)],
    ['tree', 2, 1, 32, 20, subtreeEnds([-1, 0, 1, 1, 0, 4, 4, 6])],
  ] satisfies [string, number, number, number, number, Uint32Array][])(
    'f16 cache: %s equals the reference on the same halves',
    async (_, heads, kvHeads, headDim, base, ends) => {
      const ctx = await gpu();
      const a = inputs(base + heads, heads, kvHeads, headDim, base, ends);
      const toHalf = (x: Float32Array) => unpackHalves(packHalves(x), x.length);
      const got = await runAttention(ctx, { ...a, format: 'f16' });
      expectClose(got, attentionRef({ ...a, k: toHalf(a.k), v: toHalf(a.v) }), TOL);
    },
  );
});
