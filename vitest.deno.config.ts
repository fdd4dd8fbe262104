import { defineConfig } from 'vitest/config';

// The Deno project (`npm run test:deno`, scripts/test-deno.mjs; part of `npm test`): weft under
// Deno's WebGPU, wgpu with the naga shader compiler (Firefox's stack), on Mesa's lavapipe, in the
// GPU kernel forms (wgpu offers shader-f16 and timestamps there, no subgroups). Vitest itself runs
// inside Deno, so `navigator.gpu` is the runtime's; the project fails where it is not (gpuHost's
// `runtime`) or where the adapter is not lavapipe.
//
// What `npm test` runs here, within CI's time: every kernel family's test on random shapes except
// the five below, and test/deno/ (the bundled trained model's text at f16, int4 and w8a8 equal to
// the reference's; self-draft, draft-model and draft-head speculation lossless).
// WEFT_DENO_ALL=1 adds the rest (about 25 more minutes here): the fused matmul variants (118
// pipelines), the real-shape matmuls, the mixture's route and experts, sampling, and the
// model-level tests the lavapipe project runs under Dawn (every family and format, the decode
// loop, tree verification, every drafter, grammar, steering).
const SLOW_KERNEL_TESTS = [
  'src/kernels/matmul/fused.test.ts',
  'src/kernels/matmul/matmul-shapes.test.ts',
  'src/kernels/moe/route.test.ts',
  'src/kernels/moe/experts.test.ts',
  'src/kernels/sample/sample.test.ts',
];
const MODEL_TESTS = [
  'test/model/gpu/forward.gpu.test.ts',
  'test/model/gpu/decode-loop.gpu.test.ts',
  'test/decode/speculate.gpu.test.ts',
  'test/grammar/grammar.gpu.test.ts',
  'test/steer/steer.gpu.test.ts',
  'test/model/gpu/kv-f16.gpu.test.ts',
  'test/families/qwen3-5.gpu.test.ts',
  'test/families/gemma3.gpu.test.ts',
  'test/families/gemma4.gpu.test.ts',
  'test/families/lfm2.gpu.test.ts',
  'test/families/qwen3-moe.gpu.test.ts',
];
const all = process.env.WEFT_DENO_ALL === '1';

export default defineConfig({
  test: {
    name: 'deno',
    include: ['src/kernels/**/*.test.ts', 'test/deno/**/*.deno.test.ts', ...(all ? MODEL_TESTS : [])],
    exclude: all ? [] : SLOW_KERNEL_TESTS,
    environment: 'node',
    // Deno's worker_threads run vitest's workers; one file at a time (lavapipe uses every core).
    pool: 'threads',
    setupFiles: ['test/deno/setup.ts'],
    fileParallelism: false,
    testTimeout: 600_000,
    hookTimeout: 300_000,
    provide: {
      gpuHost: {
        vulkan: 'lavapipe',
        kernels: 'gpu',
        adapter: 'llvmpipe',
        features: ['f16'],
        runtime: 'deno',
      },
    },
  },
});
