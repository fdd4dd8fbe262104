// Renders the demo's icon (demo/public/icon.svg) to the PNG sizes its web app manifest lists, in
// headless Chromium. Run after editing the SVG: `node scripts/demo-icons.mjs`; commit the PNGs.
import { readFile } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const svg = await readFile('demo/public/icon.svg', 'utf8');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium' });
try {
  for (const size of [192, 512]) {
    const page = await browser.newPage({ viewport: { width: size, height: size } });
    await page.setContent(
      `<style>html,body{margin:0;background:transparent}svg{display:block;width:${size}px;height:${size}px}</style>${svg}`,
    );
    await page.screenshot({ path: `demo/public/icon-${size}.png`, omitBackground: true });
    await page.close();
  }
} finally {
  await browser.close();
}
