import { defineConfig } from 'vitest/config';

// `npm run test:bench`: `bash bench/gpu-run.sh --smoke` end to end (every section of the real-GPU
// benchmark at tiny sizes on SwiftShader). About 4 minutes here, so outside `npm test`, whose CI
// run must stay under 30 minutes.
export default defineConfig({
  test: {
    name: 'bench',
    include: ['test/**/*.bench.test.ts'],
    environment: 'node',
    fileParallelism: false,
    testTimeout: 900_000,
    hookTimeout: 300_000,
  },
});
