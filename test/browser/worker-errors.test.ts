import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WeftErrorName } from '../../src/errors.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';

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

describe('errors thrown in a Web Worker', () => {
  it('reach the page as the same weft class, with name, message, fields and cause', async () => {
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(new URL('test/browser/pages/worker-errors.html', url).href);
    const status = page.getByTestId('status');
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).not.toBe('running');
    expect(await status.textContent()).toBe('done');
    expect(JSON.parse((await page.getByTestId('problems').textContent())!)).toEqual([]);

    const names: Record<WeftErrorName, true> = {
      WeftError: true,
      GpuUnavailableError: true,
      GpuStepError: true,
      DeviceLostError: true,
      InvalidInputError: true,
      AbortError: true,
      EngineClosedError: true,
      ModelFormatError: true,
      QuotaError: true,
      IntegrityError: true,
      DownloadError: true,
      SteerMismatchError: true,
      ContextLengthError: true,
      DeviceLimitError: true,
      GrammarError: true,
    };
    const want = Object.keys(names).flatMap((n) => [
      `${n} from load`,
      `${n} from render`,
      `${n} from generate`,
    ]);
    expect((await status.getAttribute('data-checked'))?.split(',').sort()).toEqual(want.sort());
    await page.close();
  });
});
