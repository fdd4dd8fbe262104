#!/usr/bin/env node
// `npm run test:deno`: the Deno project (vitest.deno.config.ts) under Deno's own WebGPU, wgpu with
// the naga shader compiler (Firefox's stack), on Mesa's lavapipe. Deno comes from npm (the `deno`
// devDependency ships its binary); vitest runs inside it, so `navigator.gpu` is the runtime's.
// Extra arguments go to vitest (a file filter, -t).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const deno = `${root}node_modules/deno/deno`;
const lavapipe = '/usr/share/vulkan/icd.d/lvp_icd.json';
for (const [file, why] of [
  [deno, 'the `deno` devDependency (npm ci)'],
  [lavapipe, "Mesa 25's lavapipe (bash scripts/setup.sh)"],
])
  if (!existsSync(file)) {
    console.error(`test:deno: ${file} is missing: install ${why}`);
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
