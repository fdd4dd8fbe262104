// Loads weft's TypeScript sources in Node without a build: a Vite dev server in SSR mode transpiles
// them on import (as run-page.mjs does for the Chromium flags). For bench and tools scripts only.
import { createServer } from 'vite';

/** Calls `fn(load)` where `load(path)` imports a repository module (e.g. '/src/model/load.ts'). */
export async function withSources(fn) {
  const server = await createServer({
    configFile: 'vite.config.ts',
    logLevel: 'warn',
    server: { middlewareMode: true, hmr: false },
    appType: 'custom',
  });
  try {
    return await fn((path) => server.ssrLoadModule(path));
  } finally {
    await server.close();
  }
}
