import { defineConfig } from 'vite';

export default defineConfig({
  // ES-module workers split weft's grammar engine into a chunk loaded only by a constrained request.
  worker: { format: 'es' },
  // The dev server would find the worker's imports only when the page starts it, and reload once.
  optimizeDeps: { include: ['weft/worker'] },
});
