// One engine for every tab (createSharedEngine) in Chromium: two pages of one origin on weft's
// shared engine worker load the model once, both stream the reference's text, closing one cancels
// only its request, and closing both frees the weights. A third page watches the worker's state.
import { mkdir, rm } from 'node:fs/promises';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import type { SharedEnginePage } from '../helpers/pages/shared-engine.js';
import { greedy } from '../helpers/reference.js';

const DIR = 'test-results/shared-engine-model';
const PROMPT = [5, 17, 99, 3, 250, 11, 42];
let browser: Browser;
let context: BrowserContext;
let server: ViteDevServer;
let url: string;

beforeAll(async () => {
  await mkdir('test-results', { recursive: true });
  await writeFixtureDir(DIR, 'qwen3', 'f32', 23);
  ({ url, server } = await startServer());
  browser = await launchChromium();
  // One context: its pages are tabs of one origin, which share one SharedWorker.
  context = await browser.newContext();
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await rm(DIR, { recursive: true, force: true });
});

/** A new tab on the test page. */
async function tab(): Promise<Page> {
  const page = await context.newPage();
  logPageErrors(page);
  await page.goto(new URL('test/helpers/pages/shared-engine.html', url).href);
  await page.waitForFunction(() => 'weft' in globalThis);
  return page;
}

/** Calls `window.weft` in `page`. */
function call<K extends keyof SharedEnginePage>(
  page: Page,
  name: K,
  ...args: Parameters<SharedEnginePage[K]>
): Promise<Awaited<ReturnType<SharedEnginePage[K]>>> {
  return page.evaluate(
    ([n, a]) => {
      const weft = (globalThis as unknown as { weft: Record<string, (...x: unknown[]) => unknown> }).weft;
      return weft[n]!(...a);
    },
    [name, args] as const,
  ) as Promise<Awaited<ReturnType<SharedEnginePage[K]>>>;
}

describe('one engine for every tab (SharedWorker)', () => {
  it('loads once for two tabs, streams to both, cancels only a closed tab’s request and frees the weights with the last', async () => {
    const files = await pathModel(DIR);
    const opened = await openModel(files);
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const want = greedy(ref, PROMPT, 12);
    await files.close?.();

    const watcher = await tab();
    const [a, b] = [await tab(), await tab()];
    const model = `/${DIR}/`;
    expect(await call(a, 'load', model)).toEqual({ shared: true });
    expect(await call(b, 'load', model)).toEqual({ shared: true });
    // The second tab joined the loaded model: the load's progress was replayed to it.
    const progress = await call(a, 'progress');
    expect(progress).toBeGreaterThan(2);
    await expect.poll(() => call(b, 'progress')).toBe(progress);
    expect(await call(watcher, 'state')).toMatchObject({ gpu: true, tabs: 2, loads: 1, unloads: 0 });
    // A tab that asks for other options while two tabs hold the model gets a worker of its own.
    const other = await tab();
    expect(await call(other, 'load', model, 64)).toEqual({
      shared: false,
      reason: `the shared engine holds ${new URL(model, url).href} for 2 other tab(s)`,
    });
    expect(await call(other, 'generate', PROMPT, 12)).toEqual(want);
    await other.close();
    expect(await call(watcher, 'state')).toMatchObject({ tabs: 2, loads: 1 });

    // Both tabs stream at once, each the reference's text.
    const [idsA, idsB] = await Promise.all([
      call(a, 'generate', PROMPT, 12),
      call(b, 'generate', PROMPT, 12),
    ]);
    expect(idsA).toEqual(want);
    expect(idsB).toEqual(want);

    // Tab a streams a long request; tab b's waits behind it; closing a cancels a's alone.
    await call(a, 'start', PROMPT, 100);
    await expect
      .poll(async () => (await call(a, 'background')).chunks, { timeout: 60_000 })
      .toBeGreaterThan(1);
    const queued = call(b, 'generate', PROMPT, 12);
    await expect.poll(async () => (await call(watcher, 'state')).queued, { timeout: 30_000 }).toBe(1);
    await a.close();
    expect(await queued).toEqual(want);
    expect(await call(watcher, 'state')).toMatchObject({ tabs: 1, loads: 1, unloads: 0, cancelled: 1 });

    // The last tab goes: the weights are freed.
    await b.close();
    await expect
      .poll(async () => call(watcher, 'state'), { timeout: 30_000 })
      .toMatchObject({ modelId: undefined, tabs: 0, loads: 1, unloads: 1, running: false, queued: 0 });
    await watcher.close();
  });
});
