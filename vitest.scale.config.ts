import { defineConfig } from 'vitest/config';

// `npm run test:scale`: real-size random-weight checkpoints (Qwen3-0.6B's shape, 1.2 GB) loaded in
// Chromium and checked against the CPU reference. Minutes on a CPU adapter, so outside `npm test`.
export default defineConfig({
  test: {
    name: 'scale',
    include: ['test/scale/**/*.test.ts'],
    environment: 'node',
    fileParallelism: false,
    testTimeout: 3_600_000,
    hookTimeout: 600_000,
    // test/scale/families.test.ts frees the reference's weights (gigabytes) before the GPU loads.
    execArgv: ['--expose-gc'],
  },
});
