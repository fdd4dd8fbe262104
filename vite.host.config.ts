import { defineConfig } from 'vite';

// Builds the CLI's browser host (src/cli/host: a page plus the engine worker) into dist/host, so
// `weft` can run the engine in headless Chromium without a dev server.
export default defineConfig({
  root: 'src/cli/host',
  base: './',
  logLevel: 'warn',
  worker: { format: 'es' },
  // Not minified: error class names must survive (errors cross the worker boundary by name).
  build: {
    outDir: '../../../dist/host',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    minify: false,
  },
});
