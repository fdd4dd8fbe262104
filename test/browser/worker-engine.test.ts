import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { ToyRunner, toyCodec } from '../helpers/toy-model.js';

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

/** The same requests on an in-thread engine: the worker must give identical text. */
async function inThread(prompt: string, n: number): Promise<string> {
  const engine = new Engine({ id: 'toy', runner: new ToyRunner(), codec: toyCodec });
  let s = '';
  for await (const c of engine.generate(prompt, { maxTokens: n })) s += c.text;
  return s;
}

describe('engine in a Web Worker', () => {
  it('streams into the DOM, aborts a request mid-stream, and serves the next one', async () => {
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(new URL('test/browser/pages/worker-engine.html', url).href);
    const status = page.getByTestId('status');
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).not.toBe('running');
    expect(await status.textContent()).toBe('done');

    const first = page.getByTestId('first');
    expect(await first.getAttribute('data-chunks')).toBe('24');
    expect(await first.textContent()).toBe(await inThread('abc', 24));

    const second = page.getByTestId('second');
    expect(await second.getAttribute('data-error')).toBe('AbortError');
    expect(await second.getAttribute('data-chunks')).toBe('5');

    const third = page.getByTestId('third');
    expect(await third.textContent()).toBe(await inThread('abc', 24));
    expect(await third.getAttribute('data-tokens')).toBe('24');
    await page.close();
  });
});
