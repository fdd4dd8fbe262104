// Page driver of the speculative decoding benchmark: held-out prompts from the demo model's card
// split, results as JSON in #result for bench/spec-cli.mjs. `?quick=1` uses one prompt, 24 tokens,
// budgets 4 and 16 and no rejection-rule rows; `?budgets=4,8` overrides the budgets; `?device=cpu`
// runs the reference forward; `?host=1` adds each model drafter's host-loop rows beside its device rows.

import { createGpuContext, describeAdapter } from '../src/gpu/device.js';
import { reportPage } from './page-result.js';
import { MODELLED_SPEEDUP, runSpecBench } from './spec.js';

reportPage(async () => {
  const params = new URLSearchParams(location.search);
  const quick = params.get('quick') === '1';
  const device = params.get('device') === 'cpu' ? 'cpu' : 'gpu';
  const ctx = await createGpuContext();
  const heldout = (await (await fetch('/models/kjv-heldout.txt')).text())
    .split('\n')
    .filter((l) => l.length > 40);
  // Fixed prompts: the first words of evenly spaced held-out verses. Quick: one prompt, fewer
  // tokens and budgets, so the table fits in a few minutes on SwiftShader.
  const n = quick ? 1 : 6;
  const prompts = Array.from({ length: n }, (_, i) =>
    heldout[Math.floor(((i + 0.5) * heldout.length) / n)]!.split(' ').slice(0, 8).join(' '),
  );
  const out = await runSpecBench(ctx, {
    target: '/models/kjv-target/',
    draft: '/models/kjv-draft/',
    head: '/models/kjv-head/',
    prompts,
    maxTokens: quick ? 24 : 64,
    budgets: params.get('budgets')
      ? params
          .get('budgets')!
          .split(',')
          .map((b) => Number(b))
      : quick
        ? [4, 16]
        : [4, 8, 16, 32],
    modes: [
      { name: 'greedy', temperature: 0, acceptance: 'gumbel' as const },
      { name: 'T=1', temperature: 1, acceptance: 'gumbel' as const },
      ...(quick ? [] : [{ name: 'T=1 rejection', temperature: 1, acceptance: 'rejection' as const }]),
    ].filter((m) => !params.get('modes') || params.get('modes')!.split(',').includes(m.name)),
    verifyReps: quick ? 3 : 5,
    ...(params.get('drafters') ? { drafters: params.get('drafters')!.split(',') } : {}),
    loops: params.get('host') === '1' ? ['device', 'host'] : ['device'],
    device,
    log: (l) => console.log(`[bench] ${l}`),
  });
  return {
    adapter: describeAdapter(ctx.adapter),
    device,
    prompts,
    modelledSpeedup: MODELLED_SPEEDUP,
    ...out,
  };
});
