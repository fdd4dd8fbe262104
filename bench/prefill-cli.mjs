// Prefill benchmark (bench/prefill.ts) in Node through Dawn on the Vulkan driver named: the
// adapter's f32 FMA peak (peak_flops), then per weight format the matmul's decode form against the
// prefill GEMM at prompt-sized batches (rows: format, form, M, N, K, ms, flops, of_peak), and the
// chunk size prompts are prefilled in (chunk).
// Usage: npm run bench:prefill -- --vulkan lavapipe|swiftshader [--json] [--kernels gpu|serial]
//   [--formats f16,int8,int4,int2,q4_0,q6_k] [--ms 64,256,512] [--shapes 2048x2048,8192x2048] [--reps 2]
//   [--forms decode,gemm (which forms to time)]
// The defaults are the shapes; on a 2-core CPU driver the full list takes long (an M = 512,
// 8192x2048 decode-form row is ~17 GFLOP): name a subset with --formats, --ms and --shapes.
import { parseArgs } from 'node:util';
import { withSources } from './ssr.mjs';

const { values } = parseArgs({
  options: {
    vulkan: { type: 'string', default: 'lavapipe' },
    kernels: { type: 'string', default: 'gpu' },
    json: { type: 'boolean', default: false },
    formats: { type: 'string', default: 'f16,int8,int4,int2,q4_0,q6_k' },
    ms: { type: 'string', default: '64,256,512' },
    shapes: { type: 'string', default: '2048x2048,8192x2048' },
    reps: { type: 'string', default: '2' },
    forms: { type: 'string', default: 'decode,gemm' },
  },
});
if (!['lavapipe', 'swiftshader'].includes(values.vulkan)) {
  console.error(`--vulkan: "${values.vulkan}" is not one of lavapipe, swiftshader`);
  process.exit(2);
}
if (!['gpu', 'serial'].includes(values.kernels)) {
  console.error(`--kernels: "${values.kernels}" is not one of gpu, serial`);
  process.exit(2);
}
const list = (s) => s.split(',').filter(Boolean);
const numbers = (name, s) => {
  const n = list(s).map(Number);
  if (n.some((v) => !Number.isInteger(v) || v < 1)) {
    console.error(`--${name}: "${s}" is not a list of positive integers`);
    process.exit(2);
  }
  return n;
};
const shapes = list(values.shapes).map((s) => {
  const [n, k] = s.split('x').map(Number);
  if (!Number.isInteger(n) || !Number.isInteger(k) || n < 1 || k < 16 || k % 16) {
    console.error(`--shapes: "${s}" is not NxK (K a multiple of 16)`);
    process.exit(2);
  }
  return [n, k];
});
const ms = numbers('ms', values.ms);
const reps = numbers('reps', values.reps)[0];
const report = await withSources(async (load) => {
  const { useVulkanDriver } = await load('/src/host/vulkan.ts');
  useVulkanDriver(values.vulkan);
  const { createGpuContext } = await load('/src/gpu/index.ts');
  const { runPrefillBench } = await load('/bench/prefill.ts');
  const ctx = await createGpuContext({ kernels: values.kernels });
  const log = values.json ? (line) => console.error(line) : (line) => console.log(line);
  log(`adapter: ${ctx.adapter.description} (Node, Dawn, --vulkan ${values.vulkan}); kernels: ${ctx.kernels}`);
  return runPrefillBench(ctx, {
    formats: list(values.formats),
    ms,
    shapes,
    reps,
    forms: list(values.forms),
    log,
  });
});
if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else {
  const g = (f) => (f / 1e9).toFixed(2);
  console.log(`\npeak_flops ${g(report.peak_flops)} GFLOP/s; prompts prefill in chunks of ${report.chunk}`);
  console.log(
    '| format | M | N×K | decode ms | decode GFLOP/s | GEMM ms | GEMM GFLOP/s | GEMM / peak | speed-up |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const d of report.rows.filter((r) => r.form === 'decode')) {
    const t = report.rows.find(
      (r) => r.form === 'gemm' && r.format === d.format && r.M === d.M && r.N === d.N && r.K === d.K,
    );
    console.log(
      `| ${d.format} | ${d.M} | ${d.N}×${d.K} | ${d.ms.toFixed(1)} | ${g(d.flops)} | ${t ? t.ms.toFixed(1) : '-'} | ${t ? g(t.flops) : '-'} | ${t ? t.of_peak.toFixed(3) : '-'} | ${t ? (d.ms / t.ms).toFixed(2) : '-'}x |`,
    );
  }
}
// Dawn's instance can crash the process when collected at exit with devices alive: leave at once.
process.exit(0);
