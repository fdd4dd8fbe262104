// Speculative decoding benchmark on the bundled demo pair (greedy and T = 1), in headless Chromium.
// Usage: npm run bench:spec -- [--json] [--quick] [--cpu] [--drafters ngram,draft-model,self-int4,self-int2,head,head-cpu]
//   [--budgets 4,8,16,32] [--host] [--modes greedy,T=1,T=1 rejection]
// --quick: one prompt, 24 tokens, budgets 4 and 16, greedy and T = 1 (Gumbel) only.
// --cpu runs the plain-TS reference forward: same tokens per pass, but no GPU timing.
// --modes a,b: only these sampling modes (names as in the table).
// --host adds each model drafter's rows with the step driven from the host (one draft pass and
// readback per depth) beside the device rows (one submission per step), in the same run.
import { runBenchPage } from './run-page.mjs';

const argv = process.argv.slice(2);
const args = new Set(argv);
// --drafters a,b: only these rows (ngram, draft-model, self-int4, self-int2, head, head-cpu); plain rows always run
// (--drafters none: the plain rows and the verify-cost curve only).
const drafters = argv[argv.indexOf('--drafters') + 1];
// --budgets a,b: tree budgets (4 to 32 nodes), e.g. all four with --quick's single prompt.
const budgets = argv[argv.indexOf('--budgets') + 1];
if (args.has('--budgets') && !/^\d+(,\d+)*$/.test(budgets ?? '')) {
  console.error(`bench:spec: --budgets "${budgets ?? ''}" must be comma-separated integers, e.g. 4,8,16,32`);
  process.exit(2);
}
const query = [
  args.has('--quick') ? 'quick=1' : '',
  args.has('--cpu') ? 'device=cpu' : '',
  args.has('--drafters') && drafters ? `drafters=${encodeURIComponent(drafters)}` : '',
  args.has('--budgets') ? `budgets=${budgets}` : '',
  args.has('--host') ? 'host=1' : '',
  args.has('--modes') ? `modes=${encodeURIComponent(argv[argv.indexOf('--modes') + 1] ?? '')}` : '',
]
  .filter(Boolean)
  .join('&');
const out = await runBenchPage(`bench/spec.html${query ? `?${query}` : ''}`);
if (args.has('--json')) {
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
} else {
  console.log(`adapter: ${out.adapter}; forward on ${out.device}; prompts: ${out.prompts.length}`);
  // Per decode step (one target pass with its drafting): CPU round trips (buffers mapped for
  // reading) and bytes read back; dispatches per generated token. '-' on the CPU reference.
  const gpu = (x, d, w) => (x === undefined ? '-' : x.toFixed(d)).padStart(w);
  // The modelled speed-up: what a GPU bound by weight bandwidth would give (its formula is
  // bench/spec.ts's, reported by the page), beside the measured wall-clock ratio ('vs plain').
  console.log(`${out.modelledSpeedup}; '-' on the CPU reference`);
  // A draft depth's cost in target passes, where the host times drafting (host-loop rows): ms per
  // draft pass over the plain rows' ms per decode pass of the target, same mode, same run.
  for (const r of out.rows.filter((x) => x.msPerDraftPass !== undefined)) {
    const plain = out.rows.find((x) => x.mode === r.mode && x.drafter === 'none');
    console.log(
      `draft cost ${r.mode} ${r.drafter} budget ${r.budget}: ${r.msPerDraftPass.toFixed(1)} ms/draft pass, ` +
        `${(plain?.msPerTargetPass ?? Number.NaN).toFixed(1)} ms/target pass, ratio ${(r.msPerDraftPass / (plain?.msPerTargetPass ?? Number.NaN)).toFixed(3)}`,
    );
  }
  console.log(
    'mode           drafter      loop    budget  tokens/pass  passes   ms       vs plain  lossless  trips/step  B read/step  dispatches/tok  draft passes/step  MB/step  modelled',
  );
  for (const r of out.rows)
    console.log(
      `${r.mode.padEnd(14)} ${r.drafter.padEnd(11)}  ${r.loop.padEnd(6)} ${String(r.budget).padStart(6)}  ${r.tokensPerPass.toFixed(2).padStart(11)}  ${String(r.targetPasses).padStart(6)}  ${r.ms.toFixed(0).padStart(7)}  ${r.speedup.toFixed(2).padStart(7)}x  ${String(r.lossless ?? '-').padEnd(8)}  ${gpu(r.readbacksPerStep, 2, 10)}  ${gpu(r.readbackBytesPerStep, 0, 11)}  ${gpu(r.dispatchesPerToken, 1, 14)}  ${r.draftPassesPerStep.toFixed(2).padStart(17)}  ${gpu(r.weightBytesPerStep === undefined ? undefined : r.weightBytesPerStep / 1e6, 2, 7)}  ${gpu(r.modelledSpeedup, 2, 7)}${r.modelledSpeedup === undefined ? ' ' : 'x'}`,
    );
  console.log('verify cost (median time of one target pass over T tokens, / T=1):');
  if (out.verifyCost.length === 0) console.log('  (not measured: --cpu runs the reference forward)');
  for (const v of out.verifyCost)
    console.log(`  T=${String(v.T).padStart(2)}  ${v.ms.toFixed(1).padStart(8)} ms  ${v.ratio.toFixed(2)}`);
}
