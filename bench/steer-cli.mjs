// Steering cost benchmark on the demo target, in headless Chromium (WEFT_GPU=real for a real GPU):
// per-token decode time (and a 64-token prefill pass) without steering, with "ablate" on every
// block's input and output, and with "add" after one block, measured in the same run, with ratios;
// then the steering dispatches alone, as a share of the plain decode step (see bench/steer.ts).
// Usage: node bench/steer-cli.mjs [--json] [--quick] [--rounds N] [--tokens N]
import { runBenchPage } from './run-page.mjs';

const argv = process.argv.slice(2);
const arg = (name, fallback) => (argv.includes(name) ? Number(argv[argv.indexOf(name) + 1]) : fallback);
const quick = argv.includes('--quick');
const rounds = arg('--rounds', quick ? 1 : 3);
const tokens = arg('--tokens', quick ? 8 : 16);
const out = await runBenchPage(`bench/steer.html?rounds=${rounds}&tokens=${tokens}`);
if (argv.includes('--json')) process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
else {
  console.log(`adapter: ${out.adapter}`);
  console.log(
    `medians of ${out.decode_steps} decode steps and ${out.rounds} prefill passes per plan, interleaved`,
  );
  console.log('| plan | steer dispatches | decode ms/token | ratio | prefill 64 ms | ratio |');
  console.log('|---|---|---|---|---|---|');
  for (const r of out.rows)
    console.log(
      `| ${r.plan} | ${r.dispatches} | ${r.decode_ms.toFixed(1)} | ${r.decode_ratio.toFixed(3)} | ${r.prefill64_ms.toFixed(1)} | ${r.prefill64_ratio.toFixed(3)} |`,
    );
  console.log(
    '\nthe steering dispatches alone (one decode step of each plan, 1 row), minus an empty submission:',
  );
  console.log('| plan | dispatches | ms | share of the plain decode step |');
  console.log('|---|---|---|---|');
  for (const d of out.dispatch_only)
    console.log(
      `| ${d.plan} | ${d.dispatches} | ${d.ms.toFixed(2)} | ${(100 * d.share_of_plain_decode).toFixed(2)}% |`,
    );
}
