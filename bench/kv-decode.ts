// Decode at a long context with each KV cache format, in one run on one device (issue 58): a
// random-weight model of a published shape (weights allocated, never read: allocateOnly; their
// values do not change the work), its cache taken as filled to `context` positions
// (ResidentPasses.adopt), then `steps` greedy decode steps timed per format after one warm-up step.
// What a GPU pays per token is the weights plus the cached K/V attention reads; on a CPU adapter
// the times are a CPU's, so only the ratios between formats in one run say anything.
import type { GpuContext } from '../src/gpu/device.js';
import type { KvFormat } from '../src/kernels/kv/kv.js';
import { specFromConfig } from '../src/model/families/index.js';
import { createGpuRunner } from '../src/model/gpu/runner.js';
import { GREEDY } from '../src/model/runner.js';
import { weightShapes } from '../src/model/tensors.js';
import { SCALE_MODELS, type ScaleShape } from '../test/fixtures/scale.js';

/** One format's decode at the context. */
export interface KvDecodeRow {
  readonly kvFormat: KvFormat;
  readonly msPerToken: number;
  /** Its time over the f16 cache's (below 1: faster). */
  readonly vsF16: number;
  readonly attentionBytes: number;
  readonly weightBytes: number;
  readonly kvBytes: number;
}

export interface KvDecodeReport {
  readonly model: ScaleShape;
  readonly quant: 'int4';
  readonly context: number;
  readonly steps: number;
  readonly adapter: string;
  readonly kernels: string;
  readonly rows: KvDecodeRow[];
}

/** Times `steps` decode steps of `model` at int4 weights after `context` cached positions, per KV format. */
export async function measureKvDecode(
  ctx: GpuContext,
  model: ScaleShape,
  context: number,
  steps: number,
  formats: readonly KvFormat[],
  log: (line: string) => void = () => {},
): Promise<KvDecodeReport> {
  const spec = specFromConfig(SCALE_MODELS[model].config);
  const tensors = new Map([...weightShapes(spec)].map(([name, shape]) => [name, { shape: [...shape] }]));
  const opened = {
    spec,
    weights: { tensors, readF32: () => Promise.reject(new Error('no weights')) },
    packed: undefined,
  };
  const timed: Omit<KvDecodeRow, 'vsF16'>[] = [];
  for (const kvFormat of formats) {
    const runner = await createGpuRunner(opened, {
      quant: 'int4',
      capacity: context + steps + 2,
      gpu: ctx,
      kvFormat,
      allocateOnly: true,
    });
    try {
      runner.resident.adopt(context);
      // One warm-up step (pipelines compiled, buffers touched), then the timed ones.
      const warm = runner.decode(0, GREEDY, 1);
      await warm.next();
      warm.close();
      const session = runner.decode(0, GREEDY, steps);
      const t0 = performance.now();
      for (let i = 0; i < steps; i++) await session.next();
      const ms = (performance.now() - t0) / steps;
      session.close();
      timed.push({
        kvFormat,
        msPerToken: ms,
        attentionBytes: runner.attentionBytes(context),
        weightBytes: runner.weightBytesPerPass,
        kvBytes: runner.kvBytes,
      });
      log(`${model} ${kvFormat} at ${context} keys: ${ms.toFixed(0)} ms per token`);
    } finally {
      runner.dispose();
    }
  }
  const f16 = timed.find((r) => r.kvFormat === 'f16')?.msPerToken;
  return {
    model,
    quant: 'int4',
    context,
    steps,
    adapter: ctx.adapter.description || ctx.adapter.device,
    kernels: ctx.kernels,
    rows: timed.map((r) => ({ ...r, vsF16: f16 ? r.msPerToken / f16 : Number.NaN })),
  };
}

/** The report as markdown. */
export function kvDecodeTable(r: KvDecodeReport): string {
  const mb = (b: number) => `${(b / 1e6).toFixed(1)} MB`;
  return [
    `${r.model} at int4 weights, decode at ${r.context} cached keys, ${r.steps} steps per format after one warm-up, ${r.adapter} (${r.kernels} forms), one run.`,
    '',
    '| KV cache | ms / token | vs f16 | attention bytes / token | weight bytes / token | KV cache |',
    '|---|---|---|---|---|---|',
    ...r.rows.map(
      (x) =>
        `| ${x.kvFormat} | ${x.msPerToken.toFixed(0)} | ${x.vsF16.toFixed(2)}x | ${mb(x.attentionBytes)} | ${mb(x.weightBytes)} | ${mb(x.kvBytes)} |`,
    ),
  ].join('\n');
}
