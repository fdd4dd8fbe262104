// weft in Firefox itself: Debian's firefox-esr (bash scripts/setup.sh installs it), launched
// headless by puppeteer-core over WebDriver BiDi with WebGPU enabled on lavapipe, runs the page
// test/helpers/pages/firefox-engine.ts from the Vite server: the engine worker with the bundled
// trained model at f16 and int4 in the GPU forms. Its greedy ids equal the CPU reference's, and
// draft-model speculation there equals plain decoding.
import { existsSync } from 'node:fs';
import puppeteer, { type Browser } from 'puppeteer-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { VULKAN_ICDS } from '../../src/host/vulkan.js';
import { startServer } from '../helpers/browser.js';

const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';
let browser: Browser;
let server: ViteDevServer;
let url: string;

beforeAll(async () => {
  if (!existsSync(FIREFOX))
    throw new Error(
      `${FIREFOX} is missing: bash scripts/setup.sh installs Debian's firefox-esr (or set FIREFOX=)`,
    );
  ({ url, server } = await startServer());
  browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
    extraPrefsFirefox: { 'dom.webgpu.enabled': true, 'gfx.webgpu.ignore-blocklist': true },
    env: { ...process.env, VK_ICD_FILENAMES: VULKAN_ICDS.lavapipe },
  });
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

it("Firefox's WebGPU runs the bundled model: the reference's greedy ids at f16 and int4, speculation lossless", {
  timeout: 900_000,
}, async () => {
  const page = await browser.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') console.log(`[firefox] ${m.text()}`);
  });
  await page.goto(new URL('test/helpers/pages/firefox-engine.html', url).href);
  await page.waitForFunction(
    () => document.querySelector('[data-testid="status"]')?.textContent !== 'running',
    { timeout: 840_000, polling: 500 },
  );
  const text = (id: string) =>
    page.$eval(`[data-testid="${id}"]`, (e) => (e as HTMLElement).textContent ?? '');
  expect(await text('status')).toBe('done');
  const features = (await text('adapter')).split(',');
  console.log(`[firefox] adapter features: ${features.join(', ')}`);
  expect(features).toContain('shader-f16');
  const runs = JSON.parse(await text('runs')) as Record<string, number[]>;
  const perPass = JSON.parse(
    await page.$eval('[data-testid="runs"]', (e) => (e as HTMLElement).dataset.perPass ?? '{}'),
  ) as Record<string, number>;
  console.log(`[firefox] tokens per pass: ${JSON.stringify(perPass)}`);
  for (const quant of ['f16', 'int4'] as const) {
    const cpu = await createEngine({ model: await pathModel('models/kjv-target'), quant, device: 'cpu' });
    const want: number[] = [];
    for await (const c of cpu.generate('And God said unto Moses,', { maxTokens: 24, temperature: 0 }))
      want.push(...c.ids);
    await cpu.unload();
    expect(runs[`${quant} none`], quant).toEqual(want);
    expect(runs[`${quant} draft`], `${quant} with the draft model`).toEqual(want);
    // The draft model drafted and some drafts were accepted (all rejected gives exactly 1).
    expect(perPass[`${quant} draft`]).toBeGreaterThan(1);
  }
});
