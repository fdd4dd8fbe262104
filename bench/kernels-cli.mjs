// Kernel benchmark launcher: serves the repository with Vite, opens bench/kernels.html in headless
// Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real) and prints the result.
// Usage: node bench/kernels-cli.mjs [--json] [--quick]
import { chromium } from 'playwright-core';
import { createServer } from 'vite';

const args = new Set(process.argv.slice(2));
const server = await createServer({
  configFile: 'vite.config.ts',
  logLevel: 'warn',
  server: { host: '127.0.0.1', port: 0, strictPort: false, hmr: false },
});
await server.listen();
let browser;
try {
  const url = server.resolvedUrls?.local[0];
  if (!url) throw new Error('vite did not report a URL');
  // The launch flags live in a TS helper shared with the tests; Vite loads it for us.
  const { chromiumLaunchOptions } = await server.ssrLoadModule('/test/helpers/chromium.ts');
  browser = await chromium.launch(chromiumLaunchOptions());
  const page = await browser.newPage();
  page.on('console', (m) => process.stderr.write(`${m.text()}\n`));
  page.on('pageerror', (e) => process.stderr.write(`[page] uncaught: ${e.message}\n`));
  await page.goto(`${url}bench/kernels.html${args.has('--quick') ? '?quick=1' : ''}`);
  await page.waitForSelector('#result[data-done]', { state: 'attached', timeout: 30 * 60_000 });
  if (await page.$('#result[data-error]')) throw new Error(await page.textContent('#status'));
  const out = JSON.parse((await page.textContent('#result')) ?? '{}');
  if (args.has('--json')) {
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } else {
    console.log(`adapter: ${out.adapter}`);
    console.log('kernel  format  M   N×K           ms        GB/s    % of copy');
    for (const r of out.rows) {
      const shape = `${r.N}x${r.K}`.padEnd(12);
      if (r.skipped)
        console.log(`${r.kernel.padEnd(7)} ${r.format.padEnd(7)} ${r.M}   ${shape}  skipped: ${r.skipped}`);
      else
        console.log(
          `${r.kernel.padEnd(7)} ${r.format.padEnd(7)} ${r.M}   ${shape}  ${r.medianMs.toFixed(3).padStart(9)} ${r.gbps.toFixed(2).padStart(8)}  ${(100 * r.ratio).toFixed(0).padStart(5)}%`,
        );
    }
    console.log(`copy bandwidth: ${out.rows[0]?.copyGbps.toFixed(2)} GB/s (${out.rows[0]?.timing} timing)`);
  }
} finally {
  await browser?.close();
  await server.close();
}
