// Page driver of the steering cost benchmark: one GPU forward pass of the demo target (f16) timed
// without steering and with the heaviest plan (ablation on every block's input and output), at
// T = 1 (decode) and T = 64 (a prefill chunk). Results as JSON in #result for bench/steer-cli.mjs.
import { createGpuContext, describeAdapter } from '../src/gpu/device.js';
import type { SteerPlan } from '../src/kernels/steer/steer.js';
import { urlModelFiles } from '../src/model/files.js';
import { createGpuRunner } from '../src/model/gpu-runner.js';
import { openModel } from '../src/model/load.js';
import { GREEDY } from '../src/model/runner.js';

const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Median milliseconds of `runs` forward passes of `T` tokens for each runner, interleaved (plain,
 * steered, plain, ...) so that load from other processes hits both alike; two warm-up passes each.
 */
async function timePasses(
  passes: ((T: number) => Promise<unknown>)[],
  T: number,
  runs: number,
): Promise<number[]> {
  for (const run of passes) for (let i = 0; i < 2; i++) await run(T);
  const ms: number[][] = passes.map(() => []);
  for (let i = 0; i < runs; i++)
    for (const [j, run] of passes.entries()) {
      const t0 = performance.now();
      await run(T);
      ms[j]!.push(performance.now() - t0);
    }
  return ms.map(median);
}

async function main(): Promise<void> {
  const status = document.getElementById('status')!;
  const result = document.getElementById('result')!;
  try {
    const runs = Number(new URLSearchParams(location.search).get('runs') ?? '20');
    const ctx = await createGpuContext();
    const files = urlModelFiles('/models/kjv-target/');
    const runners = [];
    for (const steered of [false, true]) {
      const opened = await openModel(files);
      const { spec } = opened;
      const r = Float32Array.from({ length: spec.hidden }, (_, i) => (i === 0 ? 1 : 0));
      const plan: SteerPlan = { mode: 'ablate', scale: 1, inputs: true, vectors: Array(spec.layers).fill(r) };
      runners.push(
        await createGpuRunner(opened, {
          quant: 'f16',
          capacity: 256,
          gpu: ctx,
          ownsContext: false,
          ...(steered ? { steer: plan } : {}),
        }),
      );
    }
    const passes = runners.map(
      (runner) => (T: number) =>
        runner.forward({ tokens: Array.from({ length: T }, (_, i) => 10 + i) }, GREEDY, 'last'),
    );
    const cost = [];
    for (const T of [1, 64]) {
      const [off, on] = await timePasses(passes, T, runs);
      cost.push({ T, ms_plain: off!, ms_steered: on!, overhead_pct: ((on! - off!) / off!) * 100 });
    }
    for (const r of runners) r.dispose();
    result.textContent = JSON.stringify({ adapter: describeAdapter(ctx.adapter), runs, cost }, null, 2);
    status.textContent = 'done';
    result.dataset.done = '1';
  } catch (e) {
    status.textContent = `failed: ${e instanceof Error ? e.message : String(e)}`;
    result.dataset.error = '1';
    result.dataset.done = '1';
  }
}

void main();
