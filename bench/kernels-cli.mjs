// Kernel benchmark launcher: serves the repository with Vite, opens bench/kernels.html in headless
// Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real) and prints the result.
// Usage: node bench/kernels-cli.mjs [--json] [--quick]
import { runBenchPage } from './run-page.mjs';

const args = new Set(process.argv.slice(2));
const out = await runBenchPage(`bench/kernels.html${args.has('--quick') ? '?quick=1' : ''}`);
if (args.has('--json')) {
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
} else {
  console.log(`adapter: ${out.adapter}`);
  console.log('kernel  format  bits/w  M   N×K           ms        GB/s    % of copy');
  for (const r of out.rows) {
    const shape = `${r.N}x${r.K}`.padEnd(12);
    const head = `${r.kernel.padEnd(7)} ${r.format.padEnd(7)} ${r.bits.toFixed(3).padStart(6)}  ${r.M}`;
    if (r.skipped) console.log(`${head}   ${shape}  skipped: ${r.skipped}`);
    else
      console.log(
        `${head}   ${shape}  ${r.medianMs.toFixed(3).padStart(9)} ${r.gbps.toFixed(2).padStart(8)}  ${(100 * r.ratio).toFixed(0).padStart(5)}%`,
      );
  }
  console.log(`copy bandwidth: ${out.rows[0]?.copyGbps.toFixed(2)} GB/s (${out.rows[0]?.timing} timing)`);
}
