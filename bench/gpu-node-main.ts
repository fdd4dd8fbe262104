// Entry of the device kit's bundle (bench/device-kit.sh builds it, bench/device-run.sh runs it on
// a lent GPU machine, which has no Chromium): bench/gpu-run.sh's sections 1-5 in Node, through
// Dawn on the machine's Vulkan driver.
//   node gpu-node-main.mjs [--smoke] [--vulkan auto|system|lavapipe|swiftshader]
//     [--parts kernels,model,families,moe,gemma4] [--cache DIR] [--json FILE]   (default: all but moe and gemma4)
// Refuses a software adapter unless --smoke. --json is rewritten after each part, so a run stopped
// at a time limit keeps what it measured; `node bench/gpu-cli.mjs --report FILE` prints it.
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { createGpuContext, describeAdapter } from '../src/gpu/index.js';
import { useVulkanDriver, VULKAN_DRIVERS } from '../src/host/vulkan.js';
import { type NodePart, runNodeSections } from './gpu-node.js';

const PARTS: readonly NodePart[] = ['kernels', 'model', 'families', 'moe', 'gemma4'];

const { values } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    vulkan: { type: 'string', default: 'auto' },
    parts: { type: 'string', default: 'kernels,model,families' },
    cache: { type: 'string', default: 'bench/.cache' },
    json: { type: 'string' },
  },
});
const vulkan = VULKAN_DRIVERS.find((d) => d === values.vulkan);
if (vulkan === undefined) {
  console.error(`--vulkan: "${values.vulkan}" is not one of ${VULKAN_DRIVERS.join(', ')}`);
  process.exit(2);
}
const parts = values.parts.split(',').map((p) => PARTS.find((q) => q === p));
if (parts.some((p) => p === undefined)) {
  console.error(`--parts: "${values.parts}" names a part that is not one of ${PARTS.join(', ')}`);
  process.exit(2);
}

useVulkanDriver(vulkan);
const ctx = await createGpuContext();
const adapter = describeAdapter(ctx.adapter);
console.log(
  `[device] adapter: ${adapter}; kernels: ${ctx.kernels}; features: ${JSON.stringify(ctx.features)}`,
);
if (!values.smoke && ctx.adapter.software) {
  console.error(
    `[device] ${adapter} is a software adapter, not a GPU: its figures say nothing about one (--smoke runs anyway)`,
  );
  process.exit(1);
}
const t0 = performance.now();
const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)} s`;
await runNodeSections(ctx, {
  smoke: values.smoke,
  parts: parts.filter((p) => p !== undefined),
  cache: values.cache,
  log: (line) => console.log(`[device] ${elapsed()} ${line}`),
  onPart: async (report) => {
    if (values.json) await writeFile(values.json, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`[device] ${elapsed()} part done; report in ${values.json ?? '(no --json)'}`);
  },
});
// Dawn's instance can crash the process when collected at exit with devices alive: leave at once.
process.exit(0);
