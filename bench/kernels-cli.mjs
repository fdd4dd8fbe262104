// Kernel benchmark launcher: serves the repository with Vite, opens bench/kernels.html in headless
// Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real) and prints the result.
// Usage: node bench/kernels-cli.mjs [--json] [--quick] [--attention (attention and q|k|v rows only, no matmul rows)]
//   [--batch (only the batch curve: Matmul at M = 1..64 on the demo target's shapes, / M = 1)]
//   [--matmul (only the matmul rows)] [--formats f16,int4 (the matmul rows' weight formats)]
import { runBenchPage } from './run-page.mjs';

const argv = process.argv.slice(2);
const args = new Set(argv);
const formats = argv.includes('--formats') ? argv[argv.indexOf('--formats') + 1] : undefined;
const query = [
  args.has('--quick') && 'quick=1',
  args.has('--attention') && 'only=attention',
  args.has('--batch') && 'only=batch',
  args.has('--matmul') && 'only=matmul',
  formats && `formats=${encodeURIComponent(formats)}`,
].filter(Boolean);
const out = await runBenchPage(`bench/kernels.html${query.length ? `?${query.join('&')}` : ''}`);
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
  if (out.rows.length)
    console.log(`copy bandwidth: ${out.rows[0]?.copyGbps.toFixed(2)} GB/s (${out.rows[0]?.timing} timing)`);
  if (out.batch?.length) {
    console.log('\nbatch curve  format  shape               M    min ms  median ms  min / M=1');
    for (const b of out.batch)
      console.log(
        `             ${b.format.padEnd(6)}  ${b.shape.padEnd(18)}  ${String(b.M).padStart(2)}  ${b.minMs.toFixed(3).padStart(8)}  ${b.medianMs.toFixed(3).padStart(9)}  ${b.vsGemv.toFixed(2).padStart(9)}`,
      );
  }
  console.log(
    '\nattention (decode, T = 1)  context  heads/kv  headDim  cache  unsplit ms  split ms  dispatches  speed-up',
  );
  for (const a of out.attention ?? [])
    console.log(
      `                           ${String(a.context).padStart(7)}  ${`${a.heads}/${a.kvHeads}`.padStart(8)}  ${String(a.headDim).padStart(7)}  ${a.format.padEnd(5)}  ${a.unsplitMs.toFixed(3).padStart(10)}  ${a.splitMs.toFixed(3).padStart(8)}  ${String(a.splitDispatches).padStart(10)}  ${a.speedup.toFixed(2).padStart(7)}x`,
    );
  console.log(
    '\nq|k|v → RoPE → KV write  family   T  heads/kv  headDim  unfused ms (dispatches)  fused ms  speed-up',
  );
  for (const r of out.qkv ?? [])
    console.log(
      `                         ${r.family}  ${String(r.T).padStart(3)}  ${`${r.heads}/${r.kvHeads}`.padStart(8)}  ${String(r.headDim).padStart(7)}  ${r.unfusedMs.toFixed(3).padStart(10)} (${r.unfusedDispatches})${' '.repeat(10)}  ${r.fusedMs.toFixed(3).padStart(8)}  ${r.speedup.toFixed(2).padStart(7)}x`,
    );
}
