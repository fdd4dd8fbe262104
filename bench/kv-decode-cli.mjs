// Decode at a long context per KV cache format (bench/kv-decode.ts), in Node through Dawn on the
// Vulkan driver named: prints a markdown table; with --json, one JSON object on stdout.
// Usage: node bench/kv-decode-cli.mjs --vulkan lavapipe|swiftshader|system [--kernels gpu|serial]
//   [--model qwen3-0.6b] [--context 4096] [--steps 4] [--formats f16,int8,int4] [--json]
import { parseArgs } from 'node:util';
import { printReport, withBareSources } from './ssr.mjs';

const { values } = parseArgs({
  options: {
    vulkan: { type: 'string', default: 'auto' },
    kernels: { type: 'string' },
    model: { type: 'string', default: 'qwen3-0.6b' },
    context: { type: 'string', default: '4096' },
    steps: { type: 'string', default: '4' },
    formats: { type: 'string', default: 'f16,int8,int4' },
    json: { type: 'boolean', default: false },
  },
});
const [context, steps] = [Number(values.context), Number(values.steps)];
if (!Number.isInteger(context) || context < 1 || !Number.isInteger(steps) || steps < 1) {
  process.stderr.write('kv-decode: --context and --steps must be positive integers\n');
  process.exit(1);
}
await withBareSources(async (load) => {
  const { useVulkanDriver } = await load('/src/host/vulkan.ts');
  const { createGpuContext } = await load('/src/gpu/device.ts');
  const { measureKvDecode, kvDecodeTable } = await load('/bench/kv-decode.ts');
  useVulkanDriver(values.vulkan);
  const ctx = await createGpuContext(values.kernels ? { kernels: values.kernels } : {});
  const report = await measureKvDecode(ctx, values.model, context, steps, values.formats.split(','), (line) =>
    process.stderr.write(`kv-decode: ${line}\n`),
  );
  printReport(report, kvDecodeTable(report), values.json);
});
// Dawn's instance can crash the process when collected at exit with devices alive: leave at once.
process.exit(0);
