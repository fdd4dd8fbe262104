import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../bind.js';
import { AddInPlace } from '../elementwise/elementwise.js';
import { KvWrite, kvRingOf, kvRows, packHalves, unpackHalves } from '../kv/kv.js';
import { RmsNorm } from '../norm/rmsnorm.js';
import { QkvRope, type QkvRopeOptions, qkvRopeRef, qkvRowWidth } from './qkv-rope.js';
import { Rope } from './rope.js';

function rand(n: number, seed: number, scale = 2): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * scale;
  });
}

interface Case {
  o: QkvRopeOptions;
  qkv: Float32Array;
  positions: Uint32Array;
  slots: Uint32Array;
  bias?: Float32Array;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  /** Initial cache contents as f32 values (rounded to halves for an f16 cache). */
  kCache: Float32Array;
  vCache: Float32Array;
}

/** T rows standing at slots base + i and positions base + depth (a random tree's depths). */
function makeCase(o: QkvRopeOptions, T: number, base: number, seed: number): Case {
  const { heads, kvHeads, headDim: D } = o;
  const rows = kvRows(o); // capacity, or the ring's rows
  const W = qkvRowWidth(o);
  const depth = [0];
  for (let i = 1; i < T; i++) depth.push(1 + depth[Math.floor((((seed * 7 + i * 13) % 97) / 97) * i)]!);
  const toCache = (x: Float32Array) => (o.format === 'f16' ? unpackHalves(packHalves(x), x.length) : x);
  return {
    o,
    qkv: rand(T * W, seed, 6),
    positions: Uint32Array.from(depth, (d) => base + d),
    slots: Uint32Array.from({ length: T }, (_, i) => base + i),
    ...(o.bias ? { bias: rand((heads + (o.valueFromKey ? 1 : 2) * kvHeads) * D, seed + 1) } : {}),
    ...(o.qkNormEps !== undefined ? { qNorm: rand(D, seed + 2), kNorm: rand(D, seed + 3) } : {}),
    kCache: toCache(rand(rows * kvHeads * D, seed + 4)),
    vCache: toCache(rand(rows * kvHeads * D, seed + 5)),
  };
}

function cacheWords(c: Case, x: Float32Array): Uint32Array {
  return c.o.format === 'f16' ? packHalves(x) : new Uint32Array(x.slice().buffer);
}

interface Result {
  q: Float32Array;
  k: Uint32Array;
  v: Uint32Array;
}

/** The fused kernel: one dispatch. */
async function runFused(ctx: GpuContext, c: Case): Promise<Result> {
  const T = c.positions.length;
  await QkvRope.prepare(ctx, c.o);
  return runOnce(ctx, 'qkv-rope', (run) => {
    const fused = run.own(new QkvRope(ctx, run.binds, c.o));
    const qkv = run.upload(c.qkv);
    const [pos, slots] = [run.upload(c.positions), run.upload(c.slots)];
    const qOut = run.empty(T * c.o.heads * c.o.headDim * 4);
    const cache = { k: run.upload(cacheWords(c, c.kCache)), v: run.upload(cacheWords(c, c.vCache)) };
    const weights = {
      ...(c.bias ? { bias: run.upload(c.bias) } : {}),
      ...(c.qNorm && c.kNorm ? { qNorm: run.upload(c.qNorm), kNorm: run.upload(c.kNorm) } : {}),
    };
    return {
      encode: (pass) => fused.encode(pass, qkv, pos, slots, qOut, cache, T, weights),
      read: async () => ({
        q: await readF32(ctx, qOut, T * c.o.heads * c.o.headDim),
        k: await readU32(ctx, cache.k, cache.k.size / 4),
        v: await readU32(ctx, cache.v, cache.v.size / 4),
      }),
    };
  });
}

/**
 * The path it replaces: bias adds, QK-norm, RoPE, the V norm (RmsNorm with a weight of ones) and the
 * KV write as separate kernels; with valueFromKey v is a copy of k's columns.
 */
async function runUnfused(ctx: GpuContext, c: Case): Promise<Result> {
  const { heads, kvHeads, headDim: D } = c.o;
  const T = c.positions.length;
  const qW = heads * D;
  const kvW = kvHeads * D;
  const W = qkvRowWidth(c.o);
  const vFrom = c.o.valueFromKey ? qW : qW + kvW; // v's first column
  const part = (x: Float32Array, rowLen: number, from: number, n: number) => {
    const out = new Float32Array((x.length / rowLen) * n);
    for (let m = 0; m < x.length / rowLen; m++)
      out.set(x.subarray(m * rowLen + from, m * rowLen + from + n), m * n);
    return out;
  };
  // The runner's biases are tiled over the rows (AddInPlace adds elementwise).
  const tiled = (b: Float32Array, from: number, n: number) => {
    const one = b.subarray(from, from + n);
    const out = new Float32Array(T * n);
    for (let m = 0; m < T; m++) out.set(one, m * n);
    return out;
  };
  await Promise.all([
    Rope.prepare(ctx, c.o.layout),
    RmsNorm.prepare(ctx),
    AddInPlace.prepare(ctx),
    KvWrite.prepare(ctx, c.o.format),
  ]);
  return runOnce(ctx, 'qkv-unfused', (run) => {
    const q = run.upload(part(c.qkv, W, 0, qW));
    const k = run.upload(part(c.qkv, W, qW, kvW));
    const v = run.upload(part(c.qkv, W, vFrom, kvW));
    const [pos, slots] = [run.upload(c.positions), run.upload(c.slots)];
    const cache = { k: run.upload(cacheWords(c, c.kCache)), v: run.upload(cacheWords(c, c.vCache)) };
    const rope = run.own(new Rope(ctx, run.binds, c.o));
    const write = run.own(new KvWrite(ctx, run.binds, c.o));
    const adds = [0, 1, 2].map(() => run.own(new AddInPlace(ctx, run.binds)));
    const norms = [0, 1].map(() => run.own(new RmsNorm(ctx, run.binds, { n: D, eps: c.o.qkNormEps ?? 0 })));
    const vNorm = run.own(new RmsNorm(ctx, run.binds, { n: D, eps: c.o.valueNorm ?? 0 }));
    const ones = run.upload(new Float32Array(D).fill(1));
    const vn = run.empty(T * kvW * 4);
    const bias = c.bias
      ? [tiled(c.bias, 0, qW), tiled(c.bias, qW, kvW), tiled(c.bias, vFrom, kvW)].map((b) => run.upload(b))
      : undefined;
    const qn = run.empty(T * qW * 4);
    const kn = run.empty(T * kvW * 4);
    const norm = c.qNorm && c.kNorm ? [run.upload(c.qNorm), run.upload(c.kNorm)] : undefined;
    const [qIn, kIn] = norm ? [qn, kn] : [q, k];
    return {
      encode: (pass) => {
        if (bias) {
          adds[0]!.encode(pass, bias[0]!, q, T * qW);
          adds[1]!.encode(pass, bias[1]!, k, T * kvW);
          adds[2]!.encode(pass, bias[2]!, v, T * kvW);
        }
        if (norm) {
          norms[0]!.encode(pass, q, norm[0]!, qn, T * heads);
          norms[1]!.encode(pass, k, norm[1]!, kn, T * kvHeads);
        }
        if (c.o.valueNorm !== undefined) vNorm.encode(pass, v, ones, vn, T * kvHeads);
        rope.encode(pass, qIn, kIn, pos, T);
        write.encode(pass, kIn, c.o.valueNorm !== undefined ? vn : v, slots, cache, T);
      },
      read: async () => ({
        q: await readF32(ctx, qIn, T * qW),
        k: await readU32(ctx, cache.k, cache.k.size / 4),
        v: await readU32(ctx, cache.v, cache.v.size / 4),
      }),
    };
  });
}

const llama3 = { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 };

describe('fused q|k|v → bias → QK-norm → RoPE → KV write (qkv_rope)', () => {
  const cases: [string, QkvRopeOptions, number, number][] = [
    // Rings of a sliding-window layer (slot s at row s mod ring), on variants below: no new pipeline.
    [
      'ring of 128 rows, QK-norm, GQA 4, f16 cache, 40 rows at 1000 .. 1039 straddling a wrap',
      {
        heads: 8,
        kvHeads: 2,
        headDim: 96,
        theta: 10000,
        layout: 'half',
        capacity: 1100,
        bias: false,
        qkNormEps: 1e-6,
        format: 'f16',
        ring: 128,
      },
      40,
      1000,
    ],
    [
      'ring of 192 rows, Llama (llama3 scaling), f32 cache, decode at slot 100000',
      {
        heads: 8,
        kvHeads: 2,
        headDim: 64,
        theta: 500000,
        layout: 'half',
        scaling: llama3,
        capacity: 100001,
        bias: false,
        ring: 192,
      },
      1,
      100000,
    ],
    [
      'Llama (half layout, llama3 scaling), f32 cache, decode',
      {
        heads: 8,
        kvHeads: 2,
        headDim: 64,
        theta: 500000,
        layout: 'half',
        scaling: llama3,
        capacity: 5200,
        bias: false,
      },
      1,
      5000,
    ],
    [
      'Qwen2 (bias), f16 cache, 17-row tree',
      { heads: 4, kvHeads: 4, headDim: 128, theta: 1e6, layout: 'half', capacity: 300, bias: true },
      17,
      250,
    ],
    [
      'Qwen3 (QK-norm), f32 cache, prefill',
      {
        heads: 8,
        kvHeads: 2,
        headDim: 128,
        theta: 1e6,
        layout: 'half',
        capacity: 64,
        bias: false,
        qkNormEps: 1e-6,
      },
      40,
      3,
    ],
    [
      'QK-norm + bias, interleaved, f16 cache, headDim 80',
      {
        heads: 4,
        kvHeads: 1,
        headDim: 80,
        theta: 10000,
        layout: 'interleaved',
        capacity: 40,
        bias: true,
        qkNormEps: 1e-5,
        format: 'f16',
      },
      9,
      20,
    ],
    [
      'interleaved, bias without QK-norm, f16 cache, headDim 80, 5 rows',
      {
        heads: 6,
        kvHeads: 3,
        headDim: 80,
        theta: 10000,
        layout: 'interleaved',
        capacity: 12,
        bias: true,
        format: 'f16',
      },
      5,
      7,
    ],
    [
      'headDim 96, GQA 4, f16 cache, decode',
      {
        heads: 8,
        kvHeads: 2,
        headDim: 96,
        theta: 10000,
        layout: 'half',
        capacity: 600,
        bias: false,
        qkNormEps: 1e-6,
        format: 'f16',
      },
      1,
      513,
    ],
    [
      'Qwen3.5 (rotary 64 of headDim 256, output gate, QK-norm), f32 cache, 5 rows',
      {
        heads: 4,
        kvHeads: 1,
        headDim: 256,
        rotaryDim: 64,
        theta: 1e7,
        layout: 'half',
        capacity: 20,
        bias: false,
        qkNormEps: 1e-6,
        outputGate: true,
      },
      5,
      11,
    ],
    [
      'rotary 64 of headDim 256, output gate, no QK-norm, f16 cache, decode',
      {
        heads: 2,
        kvHeads: 2,
        headDim: 256,
        rotaryDim: 64,
        theta: 1e7,
        layout: 'half',
        capacity: 900,
        bias: false,
        outputGate: true,
        format: 'f16',
      },
      1,
      800,
    ],
    [
      'rotary 8 of headDim 24, QK-norm + bias, f16 cache, 9-row tree',
      {
        heads: 3,
        kvHeads: 1,
        headDim: 24,
        rotaryDim: 8,
        theta: 10000,
        layout: 'half',
        capacity: 40,
        bias: true,
        qkNormEps: 1e-5,
        format: 'f16',
      },
      9,
      20,
    ],
    [
      'rotary 8 of headDim 24, bias, output gate, no QK-norm, f32 cache, 7 rows',
      {
        heads: 6,
        kvHeads: 2,
        headDim: 24,
        rotaryDim: 8,
        theta: 10000,
        layout: 'half',
        capacity: 16,
        bias: true,
        outputGate: true,
      },
      7,
      4,
    ],
    [
      'YaRN, its attention factor and the query temperature (Ministral 3), interleaved, f16 cache, rows past the floor',
      {
        heads: 3,
        kvHeads: 1,
        headDim: 40,
        theta: 1000,
        layout: 'interleaved',
        scaling: {
          type: 'yarn',
          factor: 16,
          originalMaxPositions: 32,
          betaFast: 32,
          betaSlow: 1,
          truncate: true,
          attentionFactor: 1.0696,
        },
        attentionFactor: 1.0696,
        queryTemperature: { beta: 0.1, floorScale: 32 },
        capacity: 48,
        bias: false,
        format: 'f16',
      },
      6,
      29,
    ],
    [
      'output gate with full rotary, llama3 scaling, QK-norm, f32 cache',
      {
        heads: 4,
        kvHeads: 2,
        headDim: 64,
        theta: 500000,
        layout: 'half',
        scaling: llama3,
        capacity: 10,
        bias: false,
        qkNormEps: 1e-6,
        outputGate: true,
      },
      3,
      2,
    ],
    // Gemma 4: head 512 on its full layers (v from k, proportional RoPE on a quarter of the pairs),
    // 256 on its sliding ones (rings), a weightless V norm on both.
    [
      'Gemma 4 full layer: headDim 512, v from k, V norm, QK-norm, proportional RoPE, f16 cache, 5-row tree',
      {
        heads: 2,
        kvHeads: 1,
        headDim: 512,
        theta: 1e6,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 64, factor: 1 },
        capacity: 40,
        bias: false,
        qkNormEps: 1e-6,
        valueNorm: 1e-6,
        valueFromKey: true,
        format: 'f16',
      },
      5,
      30,
    ],
    [
      'Gemma 4 full layer: headDim 512, v from k, V norm, QK-norm, GQA 3, f32 cache, 3 rows',
      {
        heads: 3,
        kvHeads: 1,
        headDim: 512,
        theta: 1e6,
        layout: 'half',
        capacity: 9,
        bias: false,
        qkNormEps: 1e-6,
        valueNorm: 1e-6,
        valueFromKey: true,
      },
      3,
      5,
    ],
    [
      'Gemma 4 sliding layer: headDim 256, V norm, QK-norm, ring of 80 rows, f16 cache, 7 rows across the wrap',
      {
        heads: 4,
        kvHeads: 2,
        headDim: 256,
        theta: 10000,
        layout: 'half',
        capacity: 200,
        bias: false,
        qkNormEps: 1e-6,
        valueNorm: 1e-6,
        format: 'f16',
        ring: 80,
      },
      7,
      157,
    ],
    [
      'headDim 512 without norms, 3 heads over 1, f16 cache, decode',
      {
        heads: 3,
        kvHeads: 1,
        headDim: 512,
        theta: 1e4,
        layout: 'half',
        capacity: 70,
        bias: false,
        format: 'f16',
      },
      1,
      64,
    ],
    [
      'headDim 512, QK-norm, ring of 64 rows, f32 cache, 2 rows',
      {
        heads: 1,
        kvHeads: 1,
        headDim: 512,
        theta: 1e4,
        layout: 'half',
        capacity: 300,
        bias: false,
        qkNormEps: 1e-5,
        ring: 64,
      },
      2,
      250,
    ],
    [
      'V norm without QK-norm, bias, GQA 3, f32 cache, 6 rows',
      {
        heads: 6,
        kvHeads: 2,
        headDim: 40,
        theta: 10000,
        layout: 'half',
        capacity: 20,
        bias: true,
        valueNorm: 1e-5,
      },
      6,
      9,
    ],
    [
      'v from k without norms, bias, interleaved, f16 cache, ring of 64 rows, 3 rows',
      {
        heads: 5,
        kvHeads: 1,
        headDim: 28,
        theta: 10000,
        layout: 'interleaved',
        capacity: 100,
        bias: true,
        valueFromKey: true,
        format: 'f16',
        ring: 64,
      },
      3,
      70,
    ],
    [
      'v from k, V norm, no QK-norm, GQA 2, f32 cache, 11 rows',
      {
        heads: 4,
        kvHeads: 2,
        headDim: 36,
        theta: 10000,
        layout: 'half',
        capacity: 30,
        bias: false,
        valueNorm: 1e-6,
        valueFromKey: true,
      },
      11,
      4,
    ],
    [
      'proportional RoPE (4 of 16 pairs rotated, factor 2), QK-norm, f16 cache, headDim 32, 4 rows',
      {
        heads: 2,
        kvHeads: 1,
        headDim: 32,
        theta: 10000,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 4, factor: 2 },
        capacity: 30,
        bias: false,
        qkNormEps: 1e-6,
        format: 'f16',
      },
      4,
      17,
    ],
    [
      'proportional RoPE (4 of 16 pairs rotated), f32 cache, headDim 32, 3 rows',
      {
        heads: 3,
        kvHeads: 3,
        headDim: 32,
        theta: 10000,
        layout: 'half',
        scaling: { type: 'proportional', rotatedPairs: 4, factor: 1 },
        capacity: 8,
        bias: false,
      },
      3,
      2,
    ],
  ];

  it.each(cases)(
    '%s: bit-identical to the unfused kernels, close to the reference',
    async (_, o, T, base) => {
      const ctx = await gpu();
      const c = makeCase(o, T, base, T * 31 + base);
      const fused = await runFused(ctx, c);
      const unfused = await runUnfused(ctx, c);
      expect(Array.from(fused.q)).toEqual(Array.from(unfused.q));
      expect(Array.from(fused.k)).toEqual(Array.from(unfused.k));
      expect(Array.from(fused.v)).toEqual(Array.from(unfused.v));
      // The reference: composed of the unfused references.
      const kRef = c.kCache.slice();
      const vRef = c.vCache.slice();
      const qRef = qkvRopeRef(o, { ...c, kCache: kRef, vCache: vRef });
      const n = kvRows(o) * o.kvHeads * o.headDim;
      const asF32 = (w: Uint32Array) =>
        o.format === 'f16' ? unpackHalves(w, n) : new Float32Array(w.buffer);
      const toCache = (x: Float32Array) => (o.format === 'f16' ? unpackHalves(packHalves(x), n) : x);
      for (const [got, want, tol] of [
        [fused.q, qRef, 1e-5],
        [asF32(fused.k), toCache(kRef), o.format === 'f16' ? 2e-3 : 1e-5],
        [asF32(fused.v), toCache(vRef), o.valueNorm === undefined ? 0 : o.format === 'f16' ? 2e-3 : 1e-5],
      ] as const) {
        let worst = 0;
        for (let i = 0; i < want.length; i++)
          worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (1 + Math.abs(want[i]!)));
        expect(worst).toBeLessThanOrEqual(tol);
      }
      if (!o.ring) return;
      // A ring holds what a full cache written the same way holds: its last `ring` slots. The
      // full cache gets the ring's rows at slots base - ring .. base - 1, then the reference's writes.
      const { ring, ...flat } = o;
      const row = o.kvHeads * o.headDim;
      const full = (x: Float32Array) => {
        const out = new Float32Array(o.capacity * row);
        for (let sl = base - ring; sl < base; sl++)
          out.set(x.subarray((sl % ring) * row, ((sl % ring) + 1) * row), sl * row);
        return out;
      };
      const [kFull, vFull] = [full(c.kCache), full(c.vCache)];
      qkvRopeRef(flat, { ...c, kCache: kFull, vCache: vFull });
      const last = base + T - 1;
      expect(kvRingOf(o, vFull, last)).toEqual(vRef);
      expect(kvRingOf(o, kFull, last)).toEqual(kRef);
    },
  );

  it('encoding writes no buffer and rejects missing weights', async () => {
    const ctx = await gpu();
    const o: QkvRopeOptions = {
      heads: 2,
      kvHeads: 1,
      headDim: 64,
      theta: 1e4,
      layout: 'half',
      capacity: 8,
      bias: true,
    };
    await QkvRope.prepare(ctx, o);
    const fused = new QkvRope(ctx, new BindGroupCache(ctx.device), o);
    const c = makeCase(o, 1, 0, 1);
    const buf = (x: ArrayBufferView) =>
      ctx.device.createBuffer({ size: Math.max(16, x.byteLength), usage: GPUBufferUsage.STORAGE });
    const [qkv, pos, slots, qOut, bias] = [
      buf(c.qkv),
      buf(c.positions),
      buf(c.slots),
      buf(c.qkv),
      buf(c.bias!),
    ];
    const cache = { k: buf(c.kCache), v: buf(c.vCache) };
    const writes = ctx.counter.writes;
    const pass = ctx.device.createCommandEncoder().beginComputePass();
    fused.encode(pass, qkv, pos, slots, qOut, cache, 1, { bias });
    expect(ctx.counter.writes).toBe(writes);
    expect(() => fused.encode(pass, qkv, pos, slots, qOut, cache, 1)).toThrow(/exactly when/);
    pass.end();
    for (const b of [qkv, pos, slots, qOut, bias, cache.k, cache.v]) b.destroy();
    fused.destroy();
  });

  it('partial rotary: rotaryDim checked, the interleaved layout refused', async () => {
    const ctx = await gpu();
    const binds = new BindGroupCache(ctx.device);
    const base: QkvRopeOptions = {
      heads: 2,
      kvHeads: 1,
      headDim: 24,
      theta: 1e4,
      layout: 'half',
      capacity: 4,
      bias: false,
    };
    for (const [o, msg] of [
      [{ ...base, rotaryDim: 8, layout: 'interleaved' }, /needs layout 'half'/],
      [{ ...base, rotaryDim: 6 }, /multiple of 4/],
      [{ ...base, rotaryDim: 7 }, /even/],
      [{ ...base, rotaryDim: 28 }, /2 \.\. headDim 24/],
      [{ ...base, valueFromKey: true, outputGate: true }, /do not combine/],
      [{ ...base, valueNorm: -1 }, /valueNorm must be/],
    ] as const)
      expect(() => new QkvRope(ctx, binds, o), String(o.rotaryDim)).toThrow(msg);
    const c = makeCase({ ...base, rotaryDim: 8 }, 1, 0, 1);
    expect(() => qkvRopeRef({ ...base, rotaryDim: 8, layout: 'interleaved' }, c)).toThrow(
      /needs layout 'half'/,
    );
  });
});
