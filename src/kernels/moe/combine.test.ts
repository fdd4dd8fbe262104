// MoeCombine against its reference (moeCombineRef) on random routings, added into x or stored, and
// a row's result alone and among 17 rows, bit for bit.
import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { MoeCombine, type MoeCombineOptions, moeCombineRef } from './combine.js';
import { routeTableLayout, routeTableRef, routeWeightWords } from './table.js';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function rand(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: n }, () => (r() - 0.5) * 2 * scale);
}

/** A pass's inputs: T rows' choices (k distinct experts each), table, weights, experts' outputs. */
interface Inputs {
  readonly experts: Int32Array; // [T, k]
  readonly table: Uint32Array;
  readonly weights: Float32Array; // routeWeightWords
  readonly down: Float32Array; // [T · k, H] in sorted order
  readonly shared: Float32Array | undefined; // [T, H]
  readonly x: Float32Array; // [T, H]
}

function inputs(o: MoeCombineOptions, T: number, seed: number): Inputs {
  const r = rng(seed);
  const k = o.topK;
  const experts = new Int32Array(T * k);
  for (let t = 0; t < T; t++) {
    const pool = Array.from({ length: o.experts }, (_, e) => e);
    for (let j = 0; j < k; j++) experts[t * k + j] = pool.splice(Math.floor(r() * pool.length), 1)[0]!;
  }
  const weights = new Float32Array(routeWeightWords(o, o.shared));
  for (let c = 0; c < T * k; c++) weights[c] = r();
  if (o.shared) for (let t = 0; t < T; t++) weights[o.maxRows * k + t] = r();
  return {
    experts,
    table: routeTableRef(o, experts),
    weights,
    down: rand(T * k * o.hidden, seed + 1, 2),
    shared: o.shared ? rand(T * o.hidden, seed + 2, 2) : undefined,
    x: rand(T * o.hidden, seed + 3, 3),
  };
}

async function runCombine(
  ctx: GpuContext,
  o: MoeCombineOptions,
  T: number,
  inp: Inputs,
): Promise<Float32Array> {
  await MoeCombine.prepare(ctx, o.shared, o.store);
  return runOnce(ctx, 'moe-combine', (run) => {
    const combine = run.own(new MoeCombine(ctx, run.binds, o));
    const b = {
      x: run.upload(inp.x),
      table: run.upload(inp.table),
      weights: run.upload(inp.weights),
      down: run.upload(inp.down),
      shared: inp.shared && run.upload(inp.shared),
    };
    return {
      encode: (pass) => combine.encode(pass, b, T),
      read: () => readF32(ctx, b.x, T * o.hidden),
    };
  });
}

/** Row t of `inp` as a pass of its own: its choices, its table, its outputs at its positions. */
function rowAlone(o: MoeCombineOptions, inp: Inputs, t: number): Inputs {
  const k = o.topK;
  const H = o.hidden;
  const P = routeTableLayout(o).positions;
  const experts = inp.experts.slice(t * k, (t + 1) * k);
  const table = routeTableRef(o, experts);
  const down = new Float32Array(k * H);
  for (let j = 0; j < k; j++) {
    const from = inp.table[P + t * k + j]!;
    down.set(inp.down.subarray(from * H, (from + 1) * H), table[P + j]! * H);
  }
  const weights = new Float32Array(inp.weights.length);
  weights.set(inp.weights.subarray(t * k, (t + 1) * k));
  weights[o.maxRows * k] = inp.weights[o.maxRows * k + t]!;
  return {
    experts,
    table,
    weights,
    down,
    shared: inp.shared?.slice(t * H, (t + 1) * H),
    x: inp.x.slice(t * H, (t + 1) * H),
  };
}

/** Per output, the magnitude its error is measured against: |x| plus each term's. */
function magnitudes(o: MoeCombineOptions, inp: Inputs): Float32Array {
  const H = o.hidden;
  const k = o.topK;
  const P = routeTableLayout(o).positions;
  return inp.x.map((v, at) => {
    const t = Math.floor(at / H);
    let m = o.store ? 0 : Math.abs(v);
    for (let j = 0; j < k; j++)
      m += Math.abs(inp.weights[t * k + j]! * inp.down[inp.table[P + t * k + j]! * H + (at % H)]!);
    if (inp.shared) m += Math.abs(inp.weights[o.maxRows * k + t]! * inp.shared[at]!);
    return m;
  });
}

type Case = [T: number, o: MoeCombineOptions];
const cases: Case[] = [
  [1, { experts: 5, topK: 1, hidden: 48, maxRows: 1, shared: false, store: false }],
  [3, { experts: 8, topK: 2, hidden: 64, maxRows: 64, shared: true, store: false }],
  [17, { experts: 33, topK: 3, hidden: 48, maxRows: 17, shared: true, store: false }],
  [64, { experts: 8, topK: 3, hidden: 64, maxRows: 64, shared: false, store: false }],
  [64, { experts: 5, topK: 2, hidden: 48, maxRows: 64, shared: true, store: false }],
  // Gemma 4's: the mixture's output stored (x's old values not read), an odd width.
  [17, { experts: 5, topK: 2, hidden: 40, maxRows: 64, shared: false, store: true }],
  [1, { experts: 9, topK: 3, hidden: 37, maxRows: 5, shared: true, store: true }],
];

describe('MoeCombine vs moeCombineRef', () => {
  it.each(cases)('T=%i %o', async (T, o) => {
    const ctx = await gpu();
    const inp = inputs(o, T, 100 * o.experts + 10 * o.topK + T);
    const got = await runCombine(ctx, o, T, inp);
    const want = moeCombineRef(o, inp.x, inp.table, inp.weights, inp.down, inp.shared);
    const mag = magnitudes(o, inp);
    for (let at = 0; at < got.length; at++)
      expect(Math.abs(got[at]! - want[at]!), `output ${at}`).toBeLessThanOrEqual(1e-6 * mag[at]!);
  });

  it.each([false, true])(
    'a row combines the same, bit for bit, alone and among 17 (shared %s)',
    async (shared) => {
      const ctx = await gpu();
      const o: MoeCombineOptions = { experts: 8, topK: 3, hidden: 48, maxRows: 17, shared, store: false };
      const many = inputs(o, 17, 5);
      const all = await runCombine(ctx, o, 17, many);
      for (const t of [0, 8, 16]) {
        const one = await runCombine(ctx, o, 1, rowAlone(o, many, t));
        expect(Array.from(one), `row ${t}`).toEqual(
          Array.from(all.subarray(t * o.hidden, (t + 1) * o.hidden)),
        );
      }
    },
  );
});
