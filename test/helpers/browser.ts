// Browser-test harness: serves the repository with Vite on a free loopback port and drives Debian's
// Chromium through playwright-core with WebGPU on SwiftShader (or the real GPU when WEFT_GPU=real).
import { type Browser, chromium, type Page } from 'playwright-core';
import { createServer, type ViteDevServer } from 'vite';
import { chromiumLaunchOptions } from './chromium.js';

/** Launches headless Chromium with WebGPU enabled. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch(chromiumLaunchOptions());
}

/** Starts Vite on the repository (index.html, demo/, workers/) on a free loopback port. */
export async function startServer(): Promise<{ url: string; server: ViteDevServer }> {
  const server = await createServer({
    configFile: 'vite.config.ts',
    logLevel: 'warn',
    server: { host: '127.0.0.1', port: 0, strictPort: false, hmr: false },
  });
  await server.listen();
  const url = server.resolvedUrls?.local[0];
  if (!url) throw new Error('vite did not report a URL');
  return { url, server };
}

/** Forwards the page's console errors and uncaught exceptions to the test log. */
export function logPageErrors(page: Page): void {
  page.on('console', (m) => {
    if (m.type() === 'error') console.log(`[page] ${m.text()}`);
  });
  page.on('pageerror', (e) => console.log(`[page] uncaught: ${e.message}`));
}
