import { defineConfig } from 'vitest/config';
import { DENO_MODEL_TESTS, LAVAPIPE_MODEL_TESTS } from './test/projects.js';

// The Deno project (`npm run test:deno`, scripts/test-deno.mjs; part of `npm test`): weft under
// Deno's WebGPU, wgpu with the naga shader compiler (Firefox's stack), on Mesa's lavapipe, in the
// GPU kernel forms (wgpu offers shader-f16 and timestamps there, no subgroups). Vitest itself runs
// inside Deno, so `navigator.gpu` is the runtime's; the project fails where it is not (gpuHost's
// `runtime`) or where the adapter is not lavapipe.
//
// What `npm test` runs here: every kernel family's test on random shapes in both kernel forms
// (serial and GPU; project deno-kernels) but the fused matmul variants', the subset of the model-level
// tests the lavapipe project runs under Dawn that fits CI's time (DENO_MODEL_TESTS in
// test/projects.ts: every family and format's forward, the decode loop, the caches, grammar,
// steering, recovery; the rest named there), and test/deno/ (the bundled trained model's text at
// f16, int4 and w8a8 equal to the reference's; self-draft, draft-model and draft-head speculation
// lossless). WEFT_DENO_ALL=1 runs all of LAVAPIPE_MODEL_TESTS and the fused matmul variants' test
// (118 pipelines compiled by naga): about 20 minutes more here.
const all = process.env.WEFT_DENO_ALL === '1';

/** The project's GPU, and the kernel forms its contexts take (undefined: both, as in Chromium). */
const host = (kernels?: 'gpu') => ({
  gpuHost: {
    vulkan: 'lavapipe',
    adapter: 'llvmpipe',
    features: ['f16'],
    runtime: 'deno',
    ...(kernels ? { kernels } : {}),
  },
});
const common = {
  environment: 'node',
  // Deno's worker_threads run vitest's workers; one file at a time (lavapipe uses every core).
  pool: 'threads',
  setupFiles: ['test/deno/setup.ts'],
  fileParallelism: false,
  testTimeout: 600_000,
  hookTimeout: 300_000,
} as const;

export default defineConfig({
  test: {
    // One file at a time across both projects: lavapipe already spreads each dispatch over every core.
    maxWorkers: 1,
    projects: [
      {
        // The kernels in both forms (serial and GPU), each against its TS reference.
        test: {
          ...common,
          name: 'deno-kernels',
          include: ['src/kernels/**/*.test.ts'],
          exclude: all ? [] : ['src/kernels/matmul/fused.test.ts'],
          provide: host(),
        },
      },
      {
        // The model-level tests in the GPU forms, as the lavapipe project runs them under Dawn.
        test: {
          ...common,
          name: 'deno',
          include: ['test/deno/**/*.deno.test.ts', ...(all ? LAVAPIPE_MODEL_TESTS : DENO_MODEL_TESTS)],
          provide: host('gpu'),
        },
      },
    ],
  },
});
