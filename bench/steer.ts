// Page driver of the steering cost benchmark on the demo target (f16, GPU runner): per-token decode
// time without steering and with two plans, measured in the same run:
//   - ablate-all: "ablate" after every block and on every block's input (2 × layers dispatches,
//     the heaviest plan);
//   - add-one:    "add" after one middle block (1 dispatch).
// Each round prefills the same prompt, then decodes `tokens` tokens one forward pass at a time
// (forward + commit, as the engine does), stepping the three runners in turn token by token (in
// an order that rotates every step) so that load from other processes hits them alike. Also a 64-token prefill pass per runner. Medians
// over every timed step; results as JSON in #result for bench/steer-cli.mjs.

import { urlModelFiles } from '../src/formats/io/files.js';
import { uploadBuffer } from '../src/gpu/buffers.js';
import { createGpuContext, describeAdapter, type GpuContext } from '../src/gpu/device.js';
import { BindGroupCache } from '../src/kernels/bind.js';
import { Steer, type SteerPlan } from '../src/kernels/steer/steer.js';
import { createGpuRunner } from '../src/model/gpu/runner.js';
import { openModel } from '../src/model/load.js';
import { GREEDY, type ModelRunner } from '../src/model/runner.js';
import { reportPage } from './page-result.js';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const PROMPT = Array.from({ length: 16 }, (_, i) => 20 + i);
const PREFILL = 64;

/** One row of the result: a plan's median milliseconds and its ratio to the plain runner's. */
interface Row {
  readonly plan: string;
  readonly dispatches: number;
  readonly decode_ms: number;
  readonly decode_ratio: number;
  readonly prefill64_ms: number;
  readonly prefill64_ratio: number;
}

/** One decode step: the next token through a forward pass, committed. Returns the token picked. */
async function step(runner: ModelRunner, token: number): Promise<number> {
  const [next] = await runner.forward({ tokens: [token] }, GREEDY, 'last');
  runner.commit([0]);
  return next ?? 0;
}

/**
 * Median milliseconds of one submission of `count` steering dispatches on a single row [H] (what
 * one decode step adds per steered site), `runs` times, with 0 dispatches timed alike in turn so
 * that the fixed cost of a submission cancels: the difference is the dispatches' own cost,
 * measured apart from the forward pass whose run-to-run noise on a shared CPU hides it.
 */
async function timeDispatches(
  ctx: GpuContext,
  r: Float32Array,
  count: number,
  runs: number,
): Promise<number> {
  await Steer.prepare(ctx);
  const x = uploadBuffer(
    ctx,
    Float32Array.from(r, (v) => v * 3),
    'bench-steer-x',
  );
  const vec = uploadBuffer(ctx, r, 'bench-steer-r');
  const op = new Steer(ctx, new BindGroupCache(ctx.device), vec, {
    hidden: r.length,
    offset: 0,
    mode: 'ablate',
    scale: 1,
  });
  const submit = async (n: number) => {
    const enc = ctx.device.createCommandEncoder({ label: 'bench-steer' });
    const pass = enc.beginComputePass({ label: 'bench-steer' });
    for (let i = 0; i < n; i++) op.encode(pass, x, 1);
    pass.end();
    const t0 = performance.now();
    ctx.device.queue.submit([enc.finish()]);
    await ctx.device.queue.onSubmittedWorkDone();
    return performance.now() - t0;
  };
  const withOps: number[] = [];
  const without: number[] = [];
  for (let i = 0; i < runs + 2; i++) {
    const a = await submit(count);
    const b = await submit(0);
    if (i >= 2) {
      withOps.push(a);
      without.push(b);
    }
  }
  op.destroy();
  x.destroy();
  vec.destroy();
  return median(withOps) - median(without);
}

reportPage(async () => {
  const query = new URLSearchParams(location.search);
  const rounds = Number(query.get('rounds') ?? '3');
  const tokens = Number(query.get('tokens') ?? '16');
  const ctx = await createGpuContext();
  const files = urlModelFiles('/models/kjv-target/');
  const { spec } = await openModel(files);
  // Any unit vector costs the same; a fixed one keeps runs comparable.
  const r = Float32Array.from({ length: spec.hidden }, (_, i) => Math.cos(i) / Math.sqrt(spec.hidden / 2));
  const mid = Math.floor(spec.layers / 2);
  const plans: { name: string; dispatches: number; plan: SteerPlan | undefined }[] = [
    { name: 'plain', dispatches: 0, plan: undefined },
    {
      name: 'ablate-all',
      dispatches: 2 * spec.layers,
      plan: { mode: 'ablate', scale: 1, inputs: true, vectors: Array(spec.layers).fill(r) },
    },
    {
      name: `add-one (layer ${mid})`,
      dispatches: 1,
      plan: {
        mode: 'add',
        scale: 4,
        inputs: false,
        vectors: Array.from({ length: spec.layers }, (_, l) => (l === mid ? r : undefined)),
      },
    },
  ];
  const runners: ModelRunner[] = [];
  for (const p of plans)
    runners.push(
      await createGpuRunner(await openModel(files), {
        quant: 'f16',
        capacity: PROMPT.length + tokens + PREFILL,
        gpu: ctx,
        ownsContext: false,
        ...(p.plan ? { steer: p.plan } : {}),
      }),
    );
  const decode: number[][] = runners.map(() => []);
  const prefill: number[][] = runners.map(() => []);
  for (let round = 0; round <= rounds; round++) {
    // Round 0 warms up (pipelines compiled, buffers touched) and is not counted.
    const last: number[] = [];
    for (const [j, runner] of runners.entries()) {
      runner.trim(0);
      last[j] = (await runner.forward({ tokens: PROMPT }, GREEDY, 'last'))[0] ?? 0;
      runner.commit(PROMPT.map((_, i) => i));
    }
    // The order rotates every step, so no plan always runs first (or right after another's).
    const order = (k: number, shift: number) => (k + shift) % runners.length;
    for (let t = 0; t < tokens; t++)
      for (let k = 0; k < runners.length; k++) {
        const j = order(k, t);
        const t0 = performance.now();
        last[j] = await step(runners[j]!, last[j]!);
        if (round > 0) decode[j]!.push(performance.now() - t0);
      }
    for (let k = 0; k < runners.length; k++) {
      const j = order(k, round);
      const runner = runners[j]!;
      runner.trim(0);
      const t0 = performance.now();
      await runner.forward({ tokens: Array.from({ length: PREFILL }, (_, i) => 10 + i) }, GREEDY, 'last');
      if (round > 0) prefill[j]!.push(performance.now() - t0);
    }
  }
  for (const runner of runners) runner.dispose();
  const d0 = median(decode[0]!);
  const p0 = median(prefill[0]!);
  const rows: Row[] = plans.map((p, j) => ({
    plan: p.name,
    dispatches: p.dispatches,
    decode_ms: median(decode[j]!),
    decode_ratio: median(decode[j]!) / d0,
    prefill64_ms: median(prefill[j]!),
    prefill64_ratio: median(prefill[j]!) / p0,
  }));
  // The steering dispatches alone, one decode step's worth for each plan, one plan at a time.
  const dispatchOnly = [];
  for (const p of plans.filter((q) => q.dispatches > 0)) {
    const ms = await timeDispatches(ctx, r, p.dispatches, 10 * rounds);
    dispatchOnly.push({ plan: p.name, dispatches: p.dispatches, ms, share_of_plain_decode: ms / d0 });
  }
  return {
    adapter: describeAdapter(ctx.adapter),
    rounds,
    tokens,
    decode_steps: decode[0]!.length,
    rows,
    dispatch_only: dispatchOnly,
  };
});
