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

/**
 * As {@link withSources}, without the project's Vite config (no plugins, no dependency scan): for
 * the measurement CLIs, which load plain TypeScript modules and print their report.
 */
export async function withBareSources(fn) {
  const server = await createServer({
    configFile: false,
    root: process.cwd(),
    logLevel: 'error',
    appType: 'custom',
    server: { middlewareMode: true, hmr: false },
    optimizeDeps: { noDiscovery: true, include: [] },
  });
  try {
    return await fn((path) => server.ssrLoadModule(path));
  } finally {
    await server.close();
  }
}

/**
 * Prints a report: its markdown table on stdout, or with `json` the JSON on stdout (parseable)
 * and the table on stderr, so a run shows both.
 */
export function printReport(report, table, json) {
  if (json) {
    process.stderr.write(`${table}\n`);
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else process.stdout.write(`${table}\n`);
}
