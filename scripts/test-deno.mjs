#!/usr/bin/env node
// `npm run test:deno`: the Deno project (vitest.deno.config.ts) under Deno's own WebGPU, wgpu with
// the naga shader compiler (Firefox's stack), on Mesa's lavapipe. Deno comes from npm (the `deno`
// devDependency ships its binary); vitest runs inside it, so `navigator.gpu` is the runtime's.
// Extra arguments go to vitest (a file filter, -t).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const lavapipe = '/usr/share/vulkan/icd.d/lvp_icd.json';
if (!existsSync(lavapipe)) {
  console.error(`test:deno: ${lavapipe} is missing: install Mesa 25's lavapipe (bash scripts/setup.sh)`);
  process.exit(1);
}
// The binary ships in the platform's package (@deno/linux-x64-glibc, ...); the `deno` package's own
// install API finds it (npm runs no install script of its: package.json's allowScripts) and links it
// into node_modules/deno once.
let deno;
try {
  deno = createRequire(import.meta.url)('deno/install_api.cjs').runInstall();
} catch (cause) {
  console.error(`test:deno: no Deno binary (install the \`deno\` devDependency: npm ci): ${cause}`);
  process.exit(1);
}
const args = [
  'run',
  '--allow-all',
  '--unstable-webgpu',
  `${root}node_modules/vitest/vitest.mjs`,
  'run',
  '--config',
  `${root}vitest.deno.config.ts`,
  ...process.argv.slice(2),
];
const run = spawnSync(deno, args, {
  cwd: root,
  stdio: 'inherit',
  // lavapipe alone, its LLVM without optimization passes and with 128-bit vectors (compiling is most
  // of what these tests cost; wgpu has no subgroups, so the width changes nothing they can see).
  env: {
    ...process.env,
    VK_ICD_FILENAMES: lavapipe,
    GALLIVM_PERF: 'nopt',
    LP_NATIVE_VECTOR_WIDTH: '128',
    DENO_NO_UPDATE_CHECK: '1',
  },
});
process.exit(run.status ?? 1);
