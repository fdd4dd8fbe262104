// Integer KV caches: the layout's references (rounding, rotation), then kv_quant's writes against
// them on random heads (outlier channels included), with and without the keys' rotation, in rings
// and past capacity; the rotated queries; and the compaction of a commit moving the scales with
// their rows.
import { describe, expect, it } from 'vitest';
import { gpu, runOnce } from '../../../test/helpers/gpu.js';
import { randomF32 } from '../../../test/helpers/random.js';
import { readF32, readU32 } from '../../gpu/buffers.js';
import { hadamardSigns } from '../../quant/hadamard.js';
import { decodeKvWords, KvCompact, type KvShape, kvRowOf, kvRows, kvWordsPerSlot } from './kv.js';
import {
  decodeKvIntRow,
  encodeKvIntRow,
  KV_INT_LEVELS,
  KV_ROTATION_SEED,
  type KvIntFormat,
  kvIntRoundTrip,
  quantizeHead,
  rotateHead,
} from './kv-quant.js';
import { KvQuantWrite } from './kv-quant-write.js';

/** Rows [n, kvHeads, headDim] of random values with a few outlier channels (as keys have). */
function keysWithOutliers(n: number, kvHeads: number, headDim: number, seed: number): Float32Array {
  const x = randomF32(n * kvHeads * headDim, seed);
  for (let r = 0; r < n * kvHeads; r++) {
    x[r * headDim + 3] = x[r * headDim + 3]! * 20;
    x[r * headDim + (headDim >> 1)] = x[r * headDim + (headDim >> 1)]! * 12 + 6;
  }
  return x;
}

describe('integer KV layout (TS references)', () => {
  it('rotates per head orthogonally, and back', () => {
    const D = 64;
    const signs = hadamardSigns(D, KV_ROTATION_SEED);
    const x = Float64Array.from(randomF32(D, 3));
    const y = x.slice();
    rotateHead(y, signs);
    const norm = (a: Float64Array) => Math.hypot(...a);
    expect(norm(y)).toBeCloseTo(norm(x), 10);
    rotateHead(y, signs, true);
    for (let i = 0; i < D; i++) expect(y[i]).toBeCloseTo(x[i]!, 12);
  });

  it.each(['int8', 'int4'] as const)(
    '%s: rounds within half a step of the head scale, and rotation lowers the error of keys with outliers',
    (format) => {
      const [kvHeads, D] = [2, 64];
      const x = keysWithOutliers(16, kvHeads, D, 5);
      const err = (rotate: boolean) => {
        let sq = 0;
        for (let r = 0; r < 16; r++) {
          const row = x.subarray(r * kvHeads * D, (r + 1) * kvHeads * D);
          const back = kvIntRoundTrip(format, kvHeads, D, row, rotate);
          row.forEach((v, i) => {
            sq += (v - back[i]!) ** 2;
          });
        }
        return Math.sqrt(sq / x.length);
      };
      // Unrotated: every value within half a step of its head's scale.
      const head = x.subarray(0, D);
      const { scale, q } = quantizeHead(head, format);
      expect(Math.max(...q.map(Math.abs))).toBe(KV_INT_LEVELS[format]);
      head.forEach((v, i) => {
        expect(Math.abs(v - q[i]! * scale)).toBeLessThanOrEqual(scale / 2 + 1e-6);
      });
      const [plain, rotated] = [err(false), err(true)];
      console.log(
        `[kv-int] ${format}: rms error plain ${plain.toExponential(3)}, rotated ${rotated.toExponential(3)}`,
      );
      expect(rotated).toBeLessThan(plain);
      // The words hold what decode reads back.
      const words = encodeKvIntRow(format, kvHeads, D, x.subarray(0, kvHeads * D), false);
      expect(Array.from(decodeKvIntRow(format, kvHeads, D, words).subarray(0, D))).toEqual(
        Array.from(head, (_, i) => Math.fround(q[i]! * scale)),
      );
      // A zero head: scale 0, every value 0.
      expect(kvIntRoundTrip(format, 1, D, new Float32Array(D), true).every((e) => e === 0)).toBe(true);
    },
  );
});

const CASES: {
  format: KvIntFormat;
  kvHeads: number;
  heads: number;
  headDim: number;
  rotate: boolean;
  ring?: number;
}[] = [
  { format: 'int8', kvHeads: 2, heads: 4, headDim: 64, rotate: false },
  { format: 'int8', kvHeads: 1, heads: 3, headDim: 128, rotate: true },
  { format: 'int4', kvHeads: 3, heads: 6, headDim: 32, rotate: true, ring: 70 },
  { format: 'int4', kvHeads: 2, heads: 2, headDim: 40, rotate: false },
];

describe.each(CASES)(
  'kv_quant: $format, kvHeads $kvHeads, headDim $headDim, rotate $rotate, ring $ring',
  (c) => {
    it('writes what the reference encodes, rotates the queries, and compaction moves whole rows', async () => {
      const ctx = await gpu();
      const shape: KvShape = {
        capacity: 96,
        kvHeads: c.kvHeads,
        headDim: c.headDim,
        format: c.format,
        rotate: c.rotate,
        ...(c.ring ? { ring: c.ring } : {}),
      };
      await KvQuantWrite.prepare(ctx, shape);
      const M = 11; // rows written; the last lands past capacity and is skipped
      const slots = Uint32Array.from({ length: M }, (_, i) => (i === M - 1 ? 200 : 3 + 7 * i));
      const row = c.kvHeads * c.headDim;
      const k = keysWithOutliers(M, c.kvHeads, c.headDim, 11);
      const v = randomF32(M * row, 12);
      const q = randomF32(M * c.heads * c.headDim, 13);
      const per = kvWordsPerSlot(shape);
      const rows = kvRows(shape);
      const commit = Uint32Array.from([10, 17, 31]); // slots of rows 1, 2, 4 → slots 10, 11, 12
      const out = await runOnce(ctx, 'kv-quant', (run) => {
        const write = run.own(new KvQuantWrite(ctx, run.binds, shape, c.heads));
        const compact = run.own(new KvCompact(ctx, run.binds, shape));
        const cache = { k: run.empty(rows * per * 4), v: run.empty(rows * per * 4) };
        const [bk, bv, bq, bs, bc] = [
          run.upload(k),
          run.upload(v),
          run.upload(q),
          run.upload(slots),
          run.upload(commit),
        ];
        return {
          encode: (pass) => {
            write.encode(pass, bk, bv, bs, cache, M, c.rotate ? bq : undefined);
            compact.encode(pass, [cache], bc, commit.length, 10);
          },
          read: async () => ({
            k: await readU32(ctx, cache.k, rows * per),
            v: await readU32(ctx, cache.v, rows * per),
            q: await readF32(ctx, bq, q.length),
          }),
        };
      });
      // Each written slot's words against the reference's; the committed ones moved after.
      const moved = new Map([...commit].map((s, a) => [10 + a, s]));
      let qFlips = 0;
      let values = 0;
      for (let i = 0; i < M - 1; i++) {
        const s = slots[i]!;
        if (moved.has(s) && moved.get(s) !== s) continue; // overwritten by the compaction
        const at = kvRowOf(shape, s) * per;
        const check = (got: Uint32Array, x: Float32Array, rotate: boolean) => {
          const want = encodeKvIntRow(
            c.format,
            c.kvHeads,
            c.headDim,
            x.subarray(i * row, (i + 1) * row),
            rotate,
          );
          if (!rotate) {
            expect(Array.from(got.subarray(at, at + per))).toEqual(Array.from(want));
            return;
          }
          // Rotated in f32 butterflies (the reference's in f64): scales within 1e-6, each value at
          // most one step off, and few of them.
          const a = decodeKvIntRow(c.format, c.kvHeads, c.headDim, got.subarray(at, at + per));
          const b = decodeKvIntRow(c.format, c.kvHeads, c.headDim, want);
          const hw = per / c.kvHeads;
          for (let h = 0; h < c.kvHeads; h++) {
            const [sa, sb] = [
              new Float32Array(got.buffer, (at + h * hw) * 4, 1)[0]!,
              new Float32Array(want.buffer, h * hw * 4, 1)[0]!,
            ];
            expect(Math.abs(sa - sb)).toBeLessThanOrEqual(1e-6 * sb);
            for (let e = 0; e < c.headDim; e++) {
              const d = Math.abs(a[h * c.headDim + e]! - b[h * c.headDim + e]!);
              expect(d).toBeLessThanOrEqual(sb * 1.001);
              if (d > sb * 1e-3) qFlips++;
              values++;
            }
          }
        };
        check(out.k, k, c.rotate);
        check(out.v, v, false);
      }
      if (c.rotate) expect(qFlips / values).toBeLessThan(0.02);
      // The committed rows: slot 10 + a holds what the row first written at commit[a] holds.
      for (let a = 0; a < commit.length; a++) {
        const i = [...slots].indexOf(commit[a]!);
        const want = encodeKvIntRow(
          c.format,
          c.kvHeads,
          c.headDim,
          v.subarray(i * row, (i + 1) * row),
          false,
        );
        const at = kvRowOf(shape, 10 + a) * per;
        expect(Array.from(out.v.subarray(at, at + per))).toEqual(Array.from(want));
      }
      // The queries: rotated in place (else untouched).
      const signs = hadamardSigns(c.headDim, KV_ROTATION_SEED);
      for (let h = 0; h < M * c.heads; h++) {
        const want = Float64Array.from(q.subarray(h * c.headDim, (h + 1) * c.headDim));
        if (c.rotate) rotateHead(want, signs);
        for (let e = 0; e < c.headDim; e++)
          expect(Math.abs(out.q[h * c.headDim + e]! - want[e]!)).toBeLessThan(
            1e-5 * (1 + Math.abs(want[e]!)),
          );
      }
      // decodeKvWords turns a rotated cache's keys back: close to the keys written.
      const s0 = kvRowOf(shape, slots[0]!) * per;
      const back = decodeKvWords(shape, out.k.subarray(s0, s0 + per), true);
      const ref = kvIntRoundTrip(c.format, c.kvHeads, c.headDim, k.subarray(0, row), c.rotate);
      const scaleMax = Math.max(...Array.from(ref, Math.abs)) / KV_INT_LEVELS[c.format];
      back.forEach((x, e) => {
        expect(Math.abs(x - ref[e]!)).toBeLessThanOrEqual(2 * scaleMax);
      });
    });
  },
);
