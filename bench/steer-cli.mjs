// Steering cost benchmark on the demo target, in headless Chromium (WEFT_GPU=real for a real GPU).
// Usage: node bench/steer-cli.mjs [--json] [--runs N]
import { runBenchPage } from './run-page.mjs';

const argv = process.argv.slice(2);
const runs = argv.includes('--runs') ? Number(argv[argv.indexOf('--runs') + 1]) : 20;
const out = await runBenchPage(`bench/steer.html?runs=${runs}`);
if (argv.includes('--json')) process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
else {
  console.log(`adapter: ${out.adapter} (median of ${out.runs} passes)`);
  console.log('   T   plain ms  steered ms  overhead');
  for (const c of out.cost)
    console.log(
      `${String(c.T).padStart(4)} ${c.ms_plain.toFixed(2).padStart(10)} ${c.ms_steered.toFixed(2).padStart(11)}  ${c.overhead_pct.toFixed(1).padStart(6)}%`,
    );
}
