// Quality of the integer KV caches (issue 58): each trained model scores windows of its held-out
// text at 256, 1,024 and 2,048 tokens of context with every cache format, keys rotated or not, on
// the plain-TS reference (whose int8 / int4 caches round exactly as the GPU's: kv-int.gpu.test.ts),
// on f32 weights so that only the cache differs. Against the f16 cache (the GPU default): mean
// KL(p_f16 || p_format) per token and top-1 agreement, over the whole window and over its last 256
// positions, where a long context's keys weigh most. The models were trained on shorter texts
// (kjv-target 512 positions, the tiny Qwen3.5 256): past that their attention is out of its
// training range, but the comparison of caches holds (both sides read the same positions).
import { readFile } from 'node:fs/promises';
import { pathModel } from '../src/formats/io/node-file.js';
import type { KvFormat } from '../src/kernels/kv/kv.js';
import { openModel } from '../src/model/load.js';
import { ReferenceRunner } from '../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../src/model/weights.js';

/** One cache format (and key rotation) at one context. */
export interface KvQualityRow {
  readonly model: string;
  readonly context: number;
  readonly kv: KvFormat;
  readonly rotate: boolean;
  /** Mean KL(p_f16 || p) per token, and top-1 agreement with the f16 cache, over the window. */
  readonly kld: number;
  readonly top1: number;
  /** The same over the window's last 256 positions. */
  readonly kld_tail: number;
  readonly top1_tail: number;
}

export interface KvQualityReport {
  readonly text: string;
  readonly rows: KvQualityRow[];
  readonly seconds: number;
  date?: string;
}

/** The cache formats scored against f16, each with and without key rotation (int formats). */
const CONFIGS: { kv: KvFormat; rotate: boolean }[] = [
  { kv: 'f32', rotate: false },
  { kv: 'int8', rotate: false },
  { kv: 'int8', rotate: true },
  { kv: 'int4', rotate: false },
  { kv: 'int4', rotate: true },
];

const TAIL = 256;

function logSoftmax(x: Float32Array, out: Float64Array): number {
  let max = Number.NEGATIVE_INFINITY;
  let top = 0;
  for (let i = 0; i < x.length; i++)
    if (x[i]! > max) {
      max = x[i]!;
      top = i;
    }
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.exp(x[i]! - max);
  const lse = max + Math.log(sum);
  for (let i = 0; i < x.length; i++) out[i] = x[i]! - lse;
  return top;
}

/** Scores every model's first window of `text` at each context with every cache format. */
export async function measureKvQuality(o: {
  models: readonly string[];
  text: string;
  contexts: readonly number[];
  onRow?: (row: KvQualityRow) => void;
}): Promise<KvQualityReport> {
  const started = performance.now();
  const text = (await readFile(o.text, 'utf8')).replace(/\n$/, '');
  const rows: KvQualityRow[] = [];
  for (const dir of o.models) {
    const files = await pathModel(dir);
    const opened = await openModel(files);
    const { spec } = opened;
    const weights = mapWeights(await readAllF32(opened.weights));
    await files.close?.();
    const ids = opened.tokenizer.encode(text, { addSpecialTokens: false });
    const V = spec.vocabSize;
    const [lp, lq] = [new Float64Array(V), new Float64Array(V)];
    for (const context of o.contexts) {
      if (ids.length < context)
        throw new Error(`${o.text}: ${ids.length} tokens, fewer than a window of ${context}`);
      const input = [spec.bosId ?? ids[0]!, ...ids.slice(0, context - 1)];
      const score = (kvFormat: KvFormat, kvRotate: boolean) =>
        new ReferenceRunner(spec, weights, { capacity: context, kvFormat, kvRotate }).logitsFor(input);
      const base = score('f16', false);
      for (const c of CONFIGS) {
        const q = score(c.kv, c.rotate);
        let [kld, agree, kldTail, agreeTail] = [0, 0, 0, 0];
        for (let r = 0; r < context; r++) {
          const pTop = logSoftmax(base.subarray(r * V, (r + 1) * V), lp);
          const qTop = logSoftmax(q.subarray(r * V, (r + 1) * V), lq);
          let kl = 0;
          for (let v = 0; v < V; v++) kl += Math.exp(lp[v]!) * (lp[v]! - lq[v]!);
          const same = pTop === qTop ? 1 : 0;
          kld += kl;
          agree += same;
          if (r >= context - TAIL) {
            kldTail += kl;
            agreeTail += same;
          }
        }
        const tail = Math.min(TAIL, context);
        const row = {
          model: dir,
          context,
          kv: c.kv,
          rotate: c.rotate,
          kld: kld / context,
          top1: agree / context,
          kld_tail: kldTail / tail,
          top1_tail: agreeTail / tail,
        };
        rows.push(row);
        o.onRow?.(row);
      }
    }
  }
  return { text: o.text, rows, seconds: (performance.now() - started) / 1000 };
}

/** The report as a markdown table. */
export function kvQualityTable(r: KvQualityReport): string {
  const e = (x: number) => x.toExponential(2);
  const p = (x: number) => `${(100 * x).toFixed(1)}%`;
  return [
    `KV cache formats against the f16 cache on ${r.text} (first window of each length), CPU reference, f32 weights, ${r.seconds.toFixed(0)} s.`,
    '',
    '| model | context | cache | keys rotated | KLD vs f16 | top-1 vs f16 | KLD, last 256 | top-1, last 256 |',
    '|---|---|---|---|---|---|---|---|',
    ...r.rows.map(
      (x) =>
        `| ${x.model} | ${x.context} | ${x.kv} | ${x.kv.startsWith('int') ? (x.rotate ? 'yes' : 'no') : '-'} | ${e(x.kld)} | ${p(x.top1)} | ${e(x.kld_tail)} | ${p(x.top1_tail)} |`,
    ),
  ].join('\n');
}
