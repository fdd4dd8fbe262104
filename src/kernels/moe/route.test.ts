// MoeRoute against its reference (moeRouteRef) on random rows: h against RmsNorm's bits, the table
// against the counting sort of the kernel's choices, the choices and weights against the reference's
// wherever a row's choice is clear of a near tie (Gemma 4's router norm and expert scales among the
// variants); and a row's routing alone and among others.
import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import { RmsNorm } from '../norm/rmsnorm.js';
import { MoeRoute, type MoeRouteOptions, moeRouteRef } from './route.js';
import { routeTableLayout, routeTableRef, routeWeightWords } from './table.js';

function rand(n: number, seed: number, scale = 1, offset = 0): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale + offset;
  });
}

interface Inputs {
  readonly x: Float32Array; // [T, H]
  readonly norm: Float32Array; // [H]
  readonly router: Float32Array; // [E, H]
  readonly bias: Float32Array | undefined; // [E]
  readonly sharedRouter: Float32Array | undefined; // [H]
  readonly scales: Float32Array | undefined; // [H] router norm scale, then [E] expert scales
}

function inputs(o: MoeRouteOptions, T: number, seed: number): Inputs {
  const H = o.hidden;
  return {
    x: rand(T * H, seed, 3),
    norm: rand(H, seed + 1, 0.5, 1),
    // Logits of a few units: scores spread, so the choices are rarely near a tie.
    router: rand(o.experts * H, seed + 2, 3 / Math.sqrt(H)),
    bias: o.bias ? rand(o.experts, seed + 3, 0.2) : undefined,
    sharedRouter: o.shared ? rand(H, seed + 4, 1 / Math.sqrt(H)) : undefined,
    // The router norm's scale about √H (its 1/√H undone, as trained), so its logits are h's size.
    scales:
      o.routerNorm || o.expertScale
        ? Float32Array.of(
            ...(o.routerNorm ? rand(H, seed + 5, 0.5 * Math.sqrt(H), Math.sqrt(H)) : []),
            ...(o.expertScale ? rand(o.experts, seed + 6, 0.5, 1) : []),
          )
        : undefined,
  };
}

interface Got {
  readonly h: Float32Array;
  readonly hNorm: Float32Array; // RmsNorm's output on the same rows
  readonly table: Uint32Array;
  readonly weights: Float32Array;
}

/** Runs MoeRoute on T rows, and RmsNorm on the same rows in the same pass. */
async function runRoute(ctx: GpuContext, o: MoeRouteOptions, T: number, inp: Inputs): Promise<Got> {
  await Promise.all([MoeRoute.prepare(ctx, o), RmsNorm.prepare(ctx)]);
  return runOnce(ctx, 'moe-route', (run) => {
    const route = run.own(new MoeRoute(ctx, run.binds, o));
    const norm = run.own(new RmsNorm(ctx, run.binds, { n: o.hidden, eps: o.eps }));
    const tableWords = routeTableLayout(o).words;
    const weightWords = routeWeightWords(o, o.shared);
    const b = {
      x: run.upload(inp.x),
      norm: run.upload(inp.norm),
      router: run.upload(inp.router),
      bias: inp.bias && run.upload(inp.bias),
      sharedRouter: inp.sharedRouter && run.upload(inp.sharedRouter),
      scales: inp.scales && run.upload(inp.scales),
      h: run.empty(inp.x.byteLength),
      table: run.empty(tableWords * 4),
      weights: run.empty(weightWords * 4),
    };
    const hNorm = run.empty(inp.x.byteLength);
    return {
      encode: (pass) => {
        route.encode(pass, b, T);
        norm.encode(pass, b.x, b.norm, hNorm, T);
      },
      read: async () => ({
        h: await readF32(ctx, b.h, T * o.hidden),
        hNorm: await readF32(ctx, hNorm, T * o.hidden),
        table: await readU32(ctx, b.table, tableWords),
        weights: await readF32(ctx, b.weights, weightWords),
      }),
    };
  });
}

/** Per row: whether its top k + 1 keys (score + bias) are apart by `margin`, so its choice is clear. */
function clearRows(o: MoeRouteOptions, logits: Float32Array, bias: Float32Array | undefined): boolean[] {
  const E = o.experts;
  const T = logits.length / E;
  return Array.from({ length: T }, (_, t) => {
    const row = Array.from(logits.subarray(t * E, (t + 1) * E));
    const max = Math.max(...row);
    const sum = row.reduce((a, l) => a + Math.exp(l - max), 0);
    const scores = row.map((l) =>
      o.scoring === 'softmax' ? Math.exp(l - max) / sum : 1 / (1 + Math.exp(-l)),
    );
    const keys = scores.map((s, e) => s + (bias?.[e] ?? 0)).sort((a, b) => b - a);
    for (let j = 0; j < Math.min(o.topK, E - 1); j++) if (keys[j]! - keys[j + 1]! < 1e-5) return false;
    return true;
  });
}

function relErr(a: number, b: number): number {
  return Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
}

const base: MoeRouteOptions = {
  experts: 8,
  topK: 2,
  hidden: 64,
  maxRows: 64,
  eps: 1e-6,
  scoring: 'softmax',
  renormalize: true,
  renormEps: 1e-20,
  routedScale: 1,
  bias: false,
  shared: false,
  routerNorm: false,
  expertScale: false,
};
/** Rows of a pass, and how the options differ from `base`. */
type Case = [T: number, o: Partial<MoeRouteOptions>];
const cases: Case[] = [
  [17, {}],
  [3, { experts: 5, topK: 1, hidden: 48, maxRows: 3, renormalize: false, routedScale: 2.5 }],
  [64, { experts: 33, topK: 3, shared: true }],
  [1, { topK: 3, hidden: 48, scoring: 'sigmoid', routedScale: 1.75, bias: true, shared: true }],
  [17, { experts: 33, maxRows: 17, scoring: 'sigmoid', renormalize: false, bias: true }],
  [64, { experts: 5, topK: 3, hidden: 48, scoring: 'sigmoid', routedScale: 0.5, shared: true }],
  [3, { experts: 33, topK: 1, hidden: 48, routedScale: 16, bias: true }],
  [1, { experts: 5, renormalize: false, bias: true, shared: true }],
  // Gemma 4's: the router's own scaled norm and per-expert scales (one scales buffer), apart too.
  [17, { experts: 5, topK: 2, hidden: 40, maxRows: 17, renormEps: 0, routerNorm: true, expertScale: true }],
  [1, { experts: 33, topK: 3, hidden: 37, routerNorm: true, expertScale: true }],
  [64, { experts: 9, topK: 3, hidden: 48, routerNorm: true }],
  [3, { experts: 9, topK: 3, scoring: 'sigmoid', shared: true, expertScale: true }],
];
const named = cases.map(([T, d]) => {
  const o = { ...base, ...d };
  const name = `T=${T} E=${o.experts} k=${o.topK} H=${o.hidden} ${o.scoring}${o.bias ? ' bias' : ''}${o.renormalize ? ' renorm' : ''} scale=${o.routedScale}${o.shared ? ' shared' : ''}${o.routerNorm ? ' router-norm' : ''}${o.expertScale ? ' expert-scale' : ''}`;
  return [name, o, T] as const;
});

describe('MoeRoute vs moeRouteRef', () => {
  it.each(named)('%s', async (_, o, T) => {
    const ctx = await gpu();
    const k = o.topK;
    const inp = inputs(o, T, 1000 * o.experts + 10 * k + T);
    const ref = moeRouteRef(o, inp.x, inp.norm, inp.router, inp.bias, inp.sharedRouter, inp.scales);
    const got = await runRoute(ctx, o, T, inp);

    expect(Array.from(got.h)).toEqual(Array.from(got.hNorm));
    for (let i = 0; i < got.h.length; i++) expect(relErr(got.h[i]!, ref.h[i]!)).toBeLessThan(2e-6);

    const L = routeTableLayout(o);
    const experts = Int32Array.from({ length: T * k }, (_, c) => {
      const pos = got.table[L.positions + c]!;
      const row = got.table[L.members + pos]!;
      expect(row).toBe(Math.floor(c / k));
      // The expert whose group holds sorted position pos.
      for (let g = 0; g < got.table[0]!; g++) {
        const [e, first, count] = got.table.subarray(4 + 4 * g, 7 + 4 * g);
        if (pos >= first! && pos < first! + count!) return e!;
      }
      return -1;
    });
    // The table is the counting sort of the kernel's own choices...
    expect(Array.from(got.table)).toEqual(Array.from(routeTableRef(o, experts)));
    // ...and the choices and weights are the reference's wherever the choice is clear.
    const clear = clearRows(o, ref.logits, inp.bias);
    expect(clear.filter(Boolean).length).toBeGreaterThanOrEqual(Math.ceil(T / 2));
    if (clear.every(Boolean)) expect(Array.from(got.table)).toEqual(Array.from(ref.table));
    // A weight carries its logits' rounding (f32 dot products against the reference's f64): the
    // bound grows with the row's largest logit.
    const tol = (t: number) =>
      1e-6 * Math.max(1, ...Array.from(ref.logits.subarray(t * o.experts, (t + 1) * o.experts), Math.abs));
    for (let t = 0; t < T; t++) {
      if (!clear[t]) continue;
      for (let j = 0; j < k; j++) {
        const c = t * k + j;
        expect(experts[c], `row ${t} choice ${j}`).toBe(ref.routing.experts[c]);
        expect(relErr(got.weights[c]!, ref.routing.weights[c]!), `row ${t} choice ${j}`).toBeLessThan(tol(t));
      }
    }
    if (ref.shared)
      for (let t = 0; t < T; t++)
        expect(relErr(got.weights[o.maxRows * k + t]!, ref.shared[t]!), `row ${t} shared`).toBeLessThan(1e-6);
  });

  it('a row routes the same, bit for bit, alone and among 17', async () => {
    const ctx = await gpu();
    const o: MoeRouteOptions = { ...base, experts: 33, topK: 3, shared: true, maxRows: 17 };
    const many = inputs(o, 17, 7);
    const t = 5;
    const one = { ...many, x: many.x.slice(t * o.hidden, (t + 1) * o.hidden) };
    const [a, b] = [await runRoute(ctx, o, 1, one), await runRoute(ctx, o, 17, many)];
    const k = o.topK;
    expect(Array.from(a.h)).toEqual(Array.from(b.h.subarray(t * o.hidden, (t + 1) * o.hidden)));
    expect(Array.from(a.weights.subarray(0, k))).toEqual(Array.from(b.weights.subarray(t * k, (t + 1) * k)));
    expect(a.weights[o.maxRows * k]).toBe(b.weights[o.maxRows * k + t]);
  });

  it.each([
    ['softmax', false, [0, 1, 2]],
    ['sigmoid', true, [1, 3, 6]],
  ] as const)('ties go to the lower expert (%s, bias %s)', async (scoring, bias, want) => {
    const ctx = await gpu();
    const o: MoeRouteOptions = { ...base, topK: 3, scoring, bias, routedScale: 2 };
    const T = 3;
    // A zero router: every logit is 0 and every score equal; the bias alone (with ties) ranks.
    const inp = {
      ...inputs(o, T, 9),
      router: new Float32Array(o.experts * o.hidden),
      bias: bias ? Float32Array.of(0, 0.25, 0.125, 0.25, 0, 0.125, 0.25, 0) : undefined,
    };
    const got = await runRoute(ctx, o, T, inp);
    const ref = moeRouteRef(o, inp.x, inp.norm, inp.router, inp.bias, inp.sharedRouter);
    expect(Array.from(ref.routing.experts)).toEqual([...want, ...want, ...want]);
    expect(Array.from(got.table)).toEqual(Array.from(ref.table));
    expect(Array.from(got.weights.subarray(0, T * 3))).toEqual(Array.from(ref.routing.weights));
  });

  it('checks its inputs', async () => {
    const ctx = await gpu();
    const o = base;
    expect(() => new MoeRoute(ctx, new BindGroupCache(ctx.device), { ...o, topK: 9 })).toThrow(
      /topK 9 exceeds the 8/,
    );
    expect(() => new MoeRoute(ctx, new BindGroupCache(ctx.device), { ...o, maxRows: 65 })).toThrow(
      /maxRows must be ≤ 64, got 65/,
    );
  });
});
