import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { saxpyRef, selftestInputs } from '../../../src/kernels/selftest/selftest.js';
import { launchChromium, logPageErrors, startServer } from '../../helpers/browser.js';

let browser: Browser;
let server: ViteDevServer;
let url: string;

beforeAll(async () => {
  ({ url, server } = await startServer());
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe('WebGPU in Chromium', () => {
  it('index.html runs the selftest kernel in a Web Worker through comlink and shows every value', async () => {
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(url);
    // The self-test runs when its panel is opened.
    await page.getByTestId('selftest-panel').locator('summary').click();
    const status = page.getByTestId('selftest-status');
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).toMatch(/^(done|failed)/);
    const adapter = await page.getByTestId('gpu-status').textContent();
    console.log(`[browser] ${adapter}`);
    expect(await status.textContent()).toBe('done: 256 values');
    expect(adapter).toMatch(/^WebGPU adapter: /);

    const shown = (await page.getByTestId('selftest-result').locator('li').allTextContents()).map(Number);
    const { alpha, a, b } = selftestInputs(256);
    const expected = Array.from(saxpyRef(alpha, a, b));
    expect(shown).toHaveLength(expected.length);
    // Every element: a float32 printed by String() parses back to the same number.
    expect(shown).toEqual(expected);
    await page.close();
  });
});
