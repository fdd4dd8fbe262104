import { playwright } from '@vitest/browser-playwright';
import { defineConfig } from 'vitest/config';
import { chromiumLaunchOptions } from './test/helpers/chromium.js';

// Projects:
// - unit: pure TypeScript (references, parsers, packing), in Node.
// - gpu: kernel tests (src/kernels/<family>/*.test.ts, beside each kernel) and the GPU tests of
//   test/gpu/ run inside headless Chromium (WebGPU on SwiftShader here, or a real GPU), through
//   Vitest's browser mode, against their TS references.
// - node-gpu: the Node host (Dawn from the npm package `webgpu`): adapter, device, pipelines,
//   errors, device loss and small dispatches.
// - browser: end-to-end pages (index.html, Web Workers) driven by playwright-core.
// GPU projects run one file at a time: SwiftShader already uses every core for each dispatch.
export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'], environment: 'node' } },
      {
        test: {
          name: 'gpu',
          include: ['test/gpu/**/*.test.ts', 'src/kernels/**/*.test.ts'],
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
          include: ['test/node/**/*.test.ts'],
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
