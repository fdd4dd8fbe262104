import { defineConfig } from 'vite';

// The demo page (index.html) and its Web Workers, served by `npm run demo`.
export default defineConfig({
  root: '.',
  // No SPA fallback: a missing file must be a 404 (model loaders probe optional files), not index.html.
  appType: 'mpa',
  worker: { format: 'es' },
  server: { host: '127.0.0.1', port: 5173 },
  build: { outDir: 'dist/demo', target: 'es2022' },
});
