// Shared launcher of the page benchmarks: serves the repository with Vite, opens a bench page in
// headless Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real), waits for its
// #result[data-done] and returns the JSON in it. Page console lines go to stderr. WEFT_CHROMIUM_ARGS
// (space-separated) adds Chromium flags.
import { chromium } from 'playwright-core';
import { createServer } from 'vite';

/**
 * Runs `page` (a path under the repository, with its query) and returns the parsed result.
 * `options.isolated` serves the page cross-origin isolated (COOP/COEP), which WebAssembly threads
 * (wllama's multi-threaded build) need.
 */
/** The packages the bench pages, the engine and its workers import (see the comment at its use). */
const PAGE_DEPS = [
  '@huggingface/jinja',
  '@huggingface/tokenizers',
  '@huggingface/transformers',
  '@mlc-ai/web-xgrammar',
  '@wllama/wllama',
  'comlink',
  'idb-keyval',
];

export async function runBenchPage(page, options = {}) {
  const headers = options.isolated
    ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' }
    : {};
  const server = await createServer({
    configFile: 'vite.config.ts',
    logLevel: 'warn',
    server: { host: '127.0.0.1', port: 0, strictPort: false, hmr: false, headers },
    // Bundle every dependency a bench page or its workers may import before serving: one found
    // only when the page imports it (a peer, the grammar engine in the worker) would make Vite
    // re-bundle its dependencies mid-run and answer the page's pending imports with 504 "Outdated
    // Optimize Dep".
    optimizeDeps: { entries: [page.split('?')[0]], include: PAGE_DEPS },
    // One dependency cache per page: Vite trusts a cache whose lockfile and config hash match without
    // scanning again, so a cache another page left (bench/gpu-run.sh runs several) would lack this
    // page's dependencies and bring back the 504s mid-run.
    cacheDir: `node_modules/.vite/bench-${page.split('?')[0].replace(/\W+/g, '-')}`,
  });
  await server.listen();
  let browser;
  try {
    const url = server.resolvedUrls?.local[0];
    if (!url) throw new Error('vite did not report a URL');
    // The launch flags live in a TS helper shared with the tests; Vite loads it for us.
    const { chromiumLaunchOptions } = await server.ssrLoadModule('/test/helpers/chromium.ts');
    // WEFT_CHROMIUM_ARGS adds flags (bench/gpu-run.sh: ANGLE on Vulkan for a display-less GPU).
    const launch = chromiumLaunchOptions();
    const extra = (process.env.WEFT_CHROMIUM_ARGS ?? '').split(' ').filter(Boolean);
    browser = await chromium.launch({ ...launch, args: [...launch.args, ...extra] });
    const tab = await browser.newPage();
    tab.on('console', (m) => process.stderr.write(`${m.text()}\n`));
    tab.on('pageerror', (e) => process.stderr.write(`[page] uncaught: ${e.message}\n`));
    await tab.goto(`${url}${page}`);
    await tab.waitForSelector('#result[data-done]', { state: 'attached', timeout: 60 * 60_000 });
    if (await tab.$('#result[data-error]')) throw new Error(await tab.textContent('#status'));
    return JSON.parse((await tab.textContent('#result')) ?? '{}');
  } finally {
    await browser?.close();
    await server.close();
  }
}
