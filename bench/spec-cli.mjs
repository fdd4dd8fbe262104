// Speculative decoding benchmark on the bundled demo pair (greedy), in headless Chromium.
// Usage: npm run bench:spec -- [--json] [--quick] [--cpu]
// --cpu runs the plain-TS reference forward: same tokens per pass, but no GPU timing.
import { runBenchPage } from './run-page.mjs';

const args = new Set(process.argv.slice(2));
const query = [args.has('--quick') ? 'quick=1' : '', args.has('--cpu') ? 'device=cpu' : '']
  .filter(Boolean)
  .join('&');
const out = await runBenchPage(`bench/spec.html${query ? `?${query}` : ''}`);
if (args.has('--json')) {
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
} else {
  console.log(`adapter: ${out.adapter}; forward on ${out.device}`);
  console.log('drafter       budget  tokens/pass  speed-up  lossless');
  for (const r of out.rows)
    console.log(
      `${r.drafter.padEnd(13)} ${String(r.budget).padStart(6)}  ${r.tokensPerPass.toFixed(2).padStart(11)}  ${r.speedup.toFixed(2).padStart(7)}x  ${r.lossless}`,
    );
  console.log('verify cost (one target pass over T tokens, / T=1):');
  for (const v of out.verifyCost)
    console.log(`  T=${String(v.T).padStart(2)}  ${v.ms.toFixed(1)} ms  ${v.ratio.toFixed(2)}`);
}
