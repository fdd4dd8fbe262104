import { mkdir, rm } from 'node:fs/promises';
import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { greedy } from '../helpers/reference.js';

// Served by Vite from the repository root; test-results/ is not committed.
const DIR = 'test-results/worker-engine-model';
let browser: Browser;
let server: ViteDevServer;
let url: string;

beforeAll(async () => {
  await mkdir('test-results', { recursive: true });
  await writeFixtureDir(DIR, 'qwen3', 'f32', 21);
  ({ url, server } = await startServer());
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await rm(DIR, { recursive: true, force: true });
});

describe('engine in a Web Worker', () => {
  it('streams a real model into the DOM, aborts a request mid-stream, and serves the next one', async () => {
    const files = await pathModel(DIR);
    const opened = await openModel(files);
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const want = greedy(ref, [5, 17, 99, 3, 250, 11, 42], 24);
    await files.close?.();

    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(new URL(`test/helpers/pages/worker-engine.html?model=/${DIR}/`, url).href);
    const status = page.getByTestId('status');
    await expect.poll(() => status.textContent(), { timeout: 240_000 }).not.toBe('running');
    expect(await status.textContent()).toBe('done');

    const first = page.getByTestId('first');
    const ids = (await first.getAttribute('data-ids'))!.split(',').map(Number);
    expect(ids).toEqual(want);
    expect(Number(await first.getAttribute('data-chunks'))).toBeGreaterThanOrEqual(20);

    const second = page.getByTestId('second');
    expect(await second.getAttribute('data-error')).toBe('AbortError');
    expect(await second.getAttribute('data-chunks')).toBe('5');

    expect(await page.getByTestId('third').getAttribute('data-ids')).toBe(ids.join(','));

    const context = page.getByTestId('context');
    expect(await context.getAttribute('data-length')).toBe('128');
    expect(await context.getAttribute('data-generated')).toBe(String(128 - 7));
    expect(await context.getAttribute('data-finish')).toBe('length');
    expect(await context.getAttribute('data-error')).toBe('ContextLengthError 200 128');
    const constrained = page.getByTestId('constrained');
    expect(await constrained.textContent()).toMatch(/^[a-z]{2,5}-[0-9]$/);
    expect(await constrained.getAttribute('data-error')).toBe('GrammarError grammar');
    const openai = page.getByTestId('openai');
    expect(await openai.getAttribute('data-completion')).toBe(await first.textContent());
    expect(await openai.textContent()).toBe(await openai.getAttribute('data-direct'));
    expect(await openai.getAttribute('data-error')).toMatch(/^BadRequestError 400 temperature must be >= 0/);
    await page.close();
  });
});
