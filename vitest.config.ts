import { playwright } from '@vitest/browser-playwright';
import { defineConfig } from 'vitest/config';
import { chromiumLaunchOptions } from './test/helpers/chromium.js';
import { LAVAPIPE_MODEL_TESTS } from './test/projects.js';

// Tests are found by module: test/ mirrors src/ (test/model/gpu/ tests src/model/gpu/), kernel tests
// sit beside their kernels (src/kernels/<family>/*.test.ts), and each family's end-to-end tests sit
// together in test/families/<family>.*. A test file's suffix says where it runs:
// `*.test.ts` unit, `*.gpu.test.ts` gpu, `*.node.test.ts` node-gpu, `*.browser.test.ts` browser
// (`*.bench.test.ts` and test/scale/ have configs of their own: vitest.bench.config.ts and
// vitest.scale.config.ts, outside `npm test`).
// Projects:
// - unit: pure TypeScript (references, parsers, packing), in Node.
// - gpu: kernel tests (src/kernels/<family>/*.test.ts, beside each kernel) and the `*.gpu.test.ts`
//   files run inside headless Chromium (WebGPU on SwiftShader here, or a real GPU), through
//   Vitest's browser mode, against their TS references. On SwiftShader the contexts take the
//   serial kernel forms (the kernel tests run both forms themselves).
// - lavapipe: the model-level GPU tests in LAVAPIPE_MODEL_TESTS and the kernel tests of
//   LAVAPIPE_SUBGROUP_KERNEL_TESTS on Dawn in Node over Mesa's lavapipe, in the forms a real GPU
//   takes (kernels: 'gpu'): shader-f16 (the `enable f16` matmul), subgroups of 8, 128 MiB bindings.
//   Every context must be lavapipe with shader-f16, or the tests fail (test/helpers/gpu.ts).
// - lavapipe-kernels: the kernel tests of LAVAPIPE_KERNEL_TESTS (kernels with no subgroup
//   operation) on the same driver and forms, with llvmpipe's vectors 128 bits wide
//   (LP_NATIVE_VECTOR_WIDTH): its compiler takes a third of the time there (a cold int4 matmul
//   test: 17 s against 45 s at 256 bits), and these kernels cannot see the subgroup size (4 at
//   128 bits) that the width sets. Beside the lavapipe project, not after it.
// - node-gpu: the Node host (Dawn from the npm package `webgpu`, on SwiftShader): adapter, device,
//   pipelines, errors, device loss and small dispatches; and the kernel tests in NODE_KERNEL_TESTS.
// - browser: end-to-end pages (index.html, Web Workers) driven by playwright-core.
// GPU projects run one file at a time: SwiftShader already uses every core for each dispatch.
// Kernel tests whose cost is compiling many pipeline variants (one thread): the node-gpu project
// runs them on Dawn in Node, in parallel with the gpu project's files in Chromium, whose kernels
// are the same WGSL through the same Dawn. The kernel families' other tests stay in Chromium.
const NODE_KERNEL_TESTS = ['src/kernels/matmul/fused.test.ts'];
// Kernel tests at real model shapes (128 MiB bindings, 8192-wide rows): on lavapipe only.
const LAVAPIPE_ONLY_TESTS = ['src/kernels/matmul/matmul-shapes.test.ts'];
// Kernel tests that run on lavapipe too: the families whose GPU forms, f16 variant or reductions
// differ from what SwiftShader runs (the rest are one form, the same WGSL on both drivers). W8A8's
// kernels reduce in subgroups, and its tests hold the sums to one order at subgroup sizes 4
// (SwiftShader) and 8 (lavapipe at its default width): they run in the lavapipe project.
const LAVAPIPE_SUBGROUP_KERNEL_TESTS = ['src/kernels/w8a8/w8a8.test.ts'];
const LAVAPIPE_KERNEL_TESTS = [
  ...LAVAPIPE_ONLY_TESTS,
  'src/kernels/matmul/matmul.test.ts',
  'src/kernels/matmul/gemm.test.ts',
  'src/kernels/moe/experts.test.ts',
  'src/kernels/attention/attention-split.test.ts',
  'src/kernels/kv/kv-quant.test.ts',
  'src/kernels/sample/sample.test.ts',
  'src/kernels/moe/route.test.ts',
  'src/kernels/moe/combine.test.ts',
];
// The suffixes of the tests that run elsewhere than the unit project.
const SUFFIXED = ['gpu', 'node', 'browser', 'bench', 'scale', 'deno'].map((s) => `test/**/*.${s}.test.ts`);
// What both lavapipe projects ask of their contexts.
const LAVAPIPE_HOST = {
  vulkan: 'lavapipe',
  kernels: 'gpu',
  adapter: 'llvmpipe',
  features: ['f16', 'subgroups'],
} as const;

export default defineConfig({
  test: {
    // Vitest's default is one worker fewer than the cores: on a 2-core CI machine the unit files ran
    // one at a time, one core idle, before any GPU file started. Two workers run them in pairs.
    maxWorkers: 2,
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/**/*.test.ts'],
          exclude: [...SUFFIXED, 'test/scale/**'],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'gpu',
          // bench/attention.test.ts: the unsplit attention kernel bench:kernels times as a baseline.
          include: ['test/**/*.gpu.test.ts', 'src/kernels/**/*.test.ts', 'bench/**/*.test.ts'],
          // Run by node-gpu instead (below), beside this project's files rather than after them;
          // and the real-shape tests, by lavapipe alone.
          exclude: [...NODE_KERNEL_TESTS, ...LAVAPIPE_ONLY_TESTS],
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
          provide: { gpuHost: {} },
          browser: {
            enabled: true,
            headless: true,
            provider: playwright({ launchOptions: chromiumLaunchOptions() }),
            instances: [{ browser: 'chromium' }],
            screenshotFailures: false,
          },
        },
      },
      {
        test: {
          name: 'lavapipe',
          include: [...LAVAPIPE_MODEL_TESTS, ...LAVAPIPE_SUBGROUP_KERNEL_TESTS],
          environment: 'node',
          // lavapipe's LLVM without its optimization passes: compiling a pipeline is most of what
          // these tests cost there (a cold speculate.test.ts: 410 s, 304 s with nopt).
          env: { GALLIVM_PERF: 'nopt' },
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
          provide: { gpuHost: LAVAPIPE_HOST },
        },
      },
      {
        test: {
          name: 'lavapipe-kernels',
          include: LAVAPIPE_KERNEL_TESTS,
          environment: 'node',
          env: { GALLIVM_PERF: 'nopt', LP_NATIVE_VECTOR_WIDTH: '128' },
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
          provide: { gpuHost: LAVAPIPE_HOST },
        },
      },
      {
        test: {
          name: 'node-gpu',
          include: ['test/**/*.node.test.ts', ...NODE_KERNEL_TESTS],
          environment: 'node',
          fileParallelism: false,
          testTimeout: 120_000,
          provide: { gpuHost: { vulkan: 'swiftshader', adapter: 'swiftshader' } },
        },
      },
      {
        test: {
          name: 'browser',
          include: ['test/**/*.browser.test.ts'],
          environment: 'node',
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});
