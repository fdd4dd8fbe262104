import { playwright } from '@vitest/browser-playwright';
import { defineConfig } from 'vitest/config';
import { chromiumLaunchOptions } from './test/helpers/chromium.js';

// Projects:
// - unit: pure TypeScript (references, parsers, packing), in Node.
// - gpu: kernel tests (src/kernels/<family>/*.test.ts, beside each kernel) and the GPU tests of
//   test/gpu/ run inside headless Chromium (WebGPU on SwiftShader here, or a real GPU), through
//   Vitest's browser mode, against their TS references.
// - node-gpu: the Node host (Dawn from the npm package `webgpu`): adapter, device, pipelines,
//   errors, device loss and small dispatches; and the kernel tests in NODE_KERNEL_TESTS.
// - browser: end-to-end pages (index.html, Web Workers) driven by playwright-core.
// GPU projects run one file at a time: SwiftShader already uses every core for each dispatch.
// Kernel tests whose cost is compiling many pipeline variants (one thread): the node-gpu project
// runs them on Dawn in Node, in parallel with the gpu project's files in Chromium, whose kernels
// are the same WGSL through the same Dawn. The kernel families' other tests stay in Chromium.
const NODE_KERNEL_TESTS = ['src/kernels/matmul/fused.test.ts'];

export default defineConfig({
  test: {
    // Vitest's default is one worker fewer than the cores: on a 2-core CI machine the unit files ran
    // one at a time, one core idle, before any GPU file started. Two workers run them in pairs.
    maxWorkers: 2,
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'], environment: 'node' } },
      {
        test: {
          name: 'gpu',
          include: ['test/gpu/**/*.test.ts', 'src/kernels/**/*.test.ts'],
          // Run by node-gpu instead (below), beside this project's files rather than after them.
          exclude: NODE_KERNEL_TESTS,
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
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
          name: 'node-gpu',
          include: ['test/node/**/*.test.ts', ...NODE_KERNEL_TESTS],
          environment: 'node',
          fileParallelism: false,
          testTimeout: 120_000,
        },
      },
      {
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          environment: 'node',
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});
