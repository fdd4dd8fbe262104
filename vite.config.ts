import { defineConfig } from 'vite';

// The demo page (index.html) and its Web Workers, served by `npm run demo`.
export default defineConfig({
  root: '.',
  worker: { format: 'es' },
  server: { host: '127.0.0.1', port: 5173 },
  build: { outDir: 'dist/demo', target: 'es2022' },
});
