// The built demo as an offline web app, in Chromium: `vite build` (what `npm run build:demo` runs)
// into test-results/, served by `vite preview` (the static server of `npm run demo:built`) on
// 127.0.0.1. First visit: the service worker keeps the shell, the bundled model (models/kjv-target
// and its draft) downloads into the IndexedDB weights cache, and a greedy completion is kept as a
// conversation. Then the server stops and every request is aborted: the page reloads from the
// service worker, restores the conversation, loads the model from IndexedDB and gives the same
// greedy text. A second build served at the same address replaces the shell after one "Reload",
// leaving only its own cache, and its changed model replaces the kept one. Last, a fresh origin with a tiny storage quota (CDP
// Storage.overrideQuotaForOrigin): the model still loads, from the network, and the page says it
// could not be kept offline. Screenshots go to test-results/demo-offline/.
import { mkdir, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { build, type Plugin, type PreviewServer, preview } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STORAGE_VERSION } from '../../src/store/store.js';
import { launchChromium, logPageErrors } from '../helpers/browser.js';

const SITE = 'test-results/demo-offline/site';
const SITE2 = 'test-results/demo-offline/site-2';
const SHOTS = 'test-results/demo-offline';
const PROMPT = 'In the beginning';

/** Builds the demo into `outDir`; `plugins` may change the page (a "new release"). */
async function buildSite(outDir: string, plugins: Plugin[] = []): Promise<void> {
  await build({ configFile: 'vite.config.ts', logLevel: 'warn', plugins, build: { outDir } });
}

/** Every request the static server saw, as `METHOD path`. */
const served: string[] = [];

/** Serves `outDir` with `vite preview` on 127.0.0.1 (`port` 0: any free port). */
async function serve(outDir: string, port = 0): Promise<PreviewServer> {
  const log: Plugin = {
    name: 'log-requests',
    configurePreviewServer(server) {
      server.middlewares.use((req, _res, next) => {
        served.push(`${req.method} ${req.url}`);
        next();
      });
    },
  };
  return preview({
    configFile: 'vite.config.ts',
    logLevel: 'warn',
    plugins: [log],
    build: { outDir },
    preview: { host: '127.0.0.1', port, strictPort: port !== 0 },
  });
}

/** Stops `server` at once, open keep-alive connections included. */
async function stop(server: PreviewServer): Promise<void> {
  const http = server.httpServer;
  if ('closeAllConnections' in http) http.closeAllConnections();
  await server.close();
}

let browser: Browser;
let server: PreviewServer | undefined;
let url: string;
let context: BrowserContext;
let page: Page;
let online: string;

beforeAll(async () => {
  await mkdir(SHOTS, { recursive: true });
  await buildSite(SITE);
  server = await serve(SITE);
  const local = server.resolvedUrls?.local[0];
  if (!local) throw new Error('vite preview did not report a URL');
  url = local;
  browser = await launchChromium();
  context = await browser.newContext({
    viewport: { width: 1280, height: 1000 },
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  page = await context.newPage();
  logPageErrors(page);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (server) await stop(server);
});

const shot = (p: Page, name: string) => p.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });

async function setValue(p: Page, testid: string, value: string): Promise<void> {
  await p.getByTestId(testid).evaluate((e, v) => {
    if (!(e instanceof HTMLInputElement || e instanceof HTMLSelectElement)) throw new Error('not an input');
    e.value = v;
    e.dispatchEvent(new Event('input', { bubbles: true }));
    e.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
}

/** Loads the bundled model; returns the "Loaded" line (or the problem shown when it failed). */
async function load(p: Page): Promise<string> {
  await expect
    .poll(() => p.getByTestId('model-note').textContent(), { timeout: 30_000 })
    .toMatch(/King James/);
  await p.getByTestId('load-button').click();
  await expect
    .poll(() => p.getByTestId('loaded').textContent(), { timeout: 120_000 })
    .toMatch(/^(Loaded|Loading failed)/);
  const line = (await p.getByTestId('loaded').textContent()) ?? '';
  return line === 'Loading failed.' ? `${line} ${await p.getByTestId('problem').textContent()}` : line;
}

/** A greedy completion of {@link PROMPT}, `tokens` long. */
async function complete(p: Page, tokens: number): Promise<string> {
  await setValue(p, 'max-tokens', String(tokens));
  await setValue(p, 'temperature', '0');
  await setValue(p, 'drafter', 'none');
  await p.getByTestId('prompt-input').fill(PROMPT);
  await p.getByTestId('send-button').click();
  await expect
    .poll(() => p.getByTestId('stats').getAttribute('data-state'), { timeout: 120_000 })
    .toBe('done');
  return (await p.getByTestId('output').textContent()) ?? '';
}

const shellState = (p: Page) => p.getByTestId('offline-status').getAttribute('data-state');
const shellCaches = (p: Page) => p.evaluate(async () => (await caches.keys()).sort());
const cached = (p: Page, name: string) => p.getByTestId('cache-list').locator(`li[data-model="${name}"]`);

describe('the built demo, offline', () => {
  it('first visit: keeps the shell, downloads the bundled model into IndexedDB, and generates', async () => {
    await page.goto(new URL('index.html', url).href);
    await expect.poll(() => shellState(page), { timeout: 30_000 }).toBe('ready');
    expect(await shellCaches(page)).toEqual([expect.stringMatching(/^weft-shell-[0-9a-f]{16}$/)]);
    expect(await load(page)).toBe('Loaded: KJV demo model (text completion).');
    expect(served).toContain('GET /models/kjv-target/model.safetensors');
    await expect.poll(() => cached(page, 'KJV demo model (bundled)').count()).toBe(1);
    expect(await cached(page, 'KJV draft model (bundled)').count()).toBe(1);
    expect(await page.getByTestId('offline-note').isHidden()).toBe(true);
    online = await complete(page, 10);
    expect(online.length).toBeGreaterThan(0);
    await expect.poll(() => page.getByTestId('conversation-list').locator('li[data-id]').count()).toBe(1);
    await shot(page, '1-first-visit');
  }, 300_000);

  it('with the server stopped and every request blocked, reloads from the service worker and generates the same text from IndexedDB', async () => {
    if (!server) throw new Error('no server');
    await stop(server);
    server = undefined;
    const requests = served.length;
    const blocked: string[] = [];
    await context.route('**/*', (route) => {
      blocked.push(`${route.request().method()} ${route.request().url()}`);
      return route.abort('internetdisconnected');
    });
    await page.reload();
    expect(await page.evaluate(() => navigator.serviceWorker.controller !== null)).toBe(true);
    await expect.poll(() => shellState(page), { timeout: 30_000 }).toBe('ready');
    // The conversation of the first visit is back.
    await expect.poll(() => page.getByTestId('output').textContent()).toBe(online);
    expect(await page.locator('.turn.prompt .given').textContent()).toBe(PROMPT);
    expect(await load(page)).toBe('Loaded: KJV demo model (text completion).');
    expect(await complete(page, 10)).toBe(online);
    await expect.poll(() => cached(page, 'KJV demo model (bundled)').count()).toBe(1);
    await shot(page, '2-offline');
    console.log(`[offline] requests blocked by the test: ${JSON.stringify(blocked)}`);
    expect(served.length).toBe(requests);
    // The shell and the weights never went to the network: only the update check of sw.js, and
    // HEADs of the bundled models' files (is it served? has it changed?) may have tried.
    const expected = /^HEAD http:\/\/[^/]+\/models\/kjv-(target|draft)\/|\/sw\.js$/;
    expect(blocked.filter((r) => !expected.test(r))).toEqual([]);
  }, 300_000);

  it('still offline: regenerates, copies, renames and deletes conversations; a long one scrolls', async () => {
    const list = page.getByTestId('conversation-list');
    await page.getByTestId('regenerate').click();
    await expect.poll(() => page.getByTestId('stats').getAttribute('data-state')).toBe('generating');
    await expect
      .poll(() => page.getByTestId('stats').getAttribute('data-state'), { timeout: 120_000 })
      .toBe('done');
    expect(await page.getByTestId('output').textContent()).toBe(online);
    expect(await page.locator('.turn.prompt').count()).toBe(2);
    await page.locator('.turn.prompt').last().getByRole('button', { name: 'Copy this reply' }).click();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(PROMPT + online);

    await list.getByRole('button', { name: `Rename ${PROMPT}` }).click();
    await list.getByRole('textbox', { name: 'New title' }).fill('Genesis');
    await list.getByRole('textbox', { name: 'New title' }).press('Enter');
    await expect.poll(() => list.locator('li[data-id] .title').allTextContents()).toEqual(['Genesis']);

    // A long conversation, written straight into the demo's database, opens scrolled to its end.
    const long = 'And it came to pass. '.repeat(400);
    await page.evaluate(async (text) => {
      const db = await new Promise<IDBDatabase>((resolve, reject) => {
        const open = indexedDB.open('weft-demo-v1');
        open.onsuccess = () => resolve(open.result);
        open.onerror = () => reject(open.error);
      });
      const tx = db.transaction('conversations', 'readwrite');
      const turns = [{ kind: 'prompt', given: 'Long', text, state: 'done' }];
      tx.objectStore('conversations').put(
        { id: 'long', title: 'Long', chat: false, turns, updatedAt: 1 },
        'long',
      );
      await new Promise((resolve) => {
        tx.oncomplete = resolve;
      });
      db.close();
    }, long);
    await page.reload();
    await expect
      .poll(() => list.locator('li[data-id] .title').allTextContents())
      .toEqual(['Genesis', 'Long']);
    expect(await page.locator('.turn.prompt').count()).toBe(2);
    await list.getByRole('button', { name: 'Long', exact: true }).click();
    await expect.poll(() => page.getByTestId('output').textContent()).toBe(long);
    const view = await page.getByTestId('transcript').evaluate((e) => ({
      scrollable: e.scrollHeight > e.clientHeight * 2,
      atEnd: e.scrollHeight - e.scrollTop - e.clientHeight < 2,
    }));
    expect(view).toEqual({ scrollable: true, atEnd: true });
    await shot(page, '3-long-conversation');

    await list.getByRole('button', { name: 'Delete Long' }).click();
    await list.getByRole('button', { name: 'Delete Genesis' }).click();
    await expect.poll(() => list.textContent()).toBe('None yet: what you send is kept here.');
    expect(await page.getByTestId('transcript').textContent()).toBe('');
    await context.unroute('**/*');
  }, 300_000);

  it('a new build at the same address takes over after "Reload", with only its own cache left and its changed model downloaded again', async () => {
    const before = await shellCaches(page);
    await buildSite(SITE2, [
      {
        name: 'release-2',
        transformIndexHtml: (html) =>
          html.replace('</head>', '<meta name="weft-release" content="2" /></head>'),
      },
    ]);
    // Release 2 brings a new target model (a new mtime: another ETag); the draft is unchanged.
    const weights = join(SITE2, 'models/kjv-target/model.safetensors');
    await utimes(weights, new Date(), new Date());
    server = await serve(SITE2, Number(new URL(url).port));
    // The page in use keeps its build; the new one installs beside it and waits for "Reload".
    // (Had the browser installed it before the page's script ran, the page would switch at once.)
    const release = () => page.locator('meta[name="weft-release"]').count();
    await page.reload();
    await expect
      .poll(async () => ((await release()) === 1 ? 'switched' : shellState(page)), { timeout: 30_000 })
      .toMatch(/^(update|switched)$/);
    if ((await release()) === 0) {
      expect(await page.getByTestId('update-button').isVisible()).toBe(true);
      await shot(page, '4-update-waiting');
      await page.getByTestId('update-button').click();
    }
    await expect.poll(release, { timeout: 30_000 }).toBe(1);
    await expect.poll(() => shellState(page), { timeout: 30_000 }).toBe('ready');
    await shot(page, '4-updated');
    const after = await shellCaches(page);
    expect(after).toHaveLength(1);
    expect(after).not.toEqual(before);
    const requests = served.length;
    expect(await load(page)).toBe('Loaded: KJV demo model (text completion).');
    const fetched = served.slice(requests);
    expect(fetched).toContain('GET /models/kjv-target/model.safetensors');
    expect(fetched).not.toContain('GET /models/kjv-draft/model.safetensors');
  }, 300_000);

  it('with storage full, the bundled model loads from the network and the page says it is not kept', async () => {
    const full = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    const p = await full.newPage();
    logPageErrors(p);
    const origin = new URL(url).origin;
    // Room for the shell (about 0.5 MB), not for the weights (12 MB). Chromium's override makes
    // writes past it fail with QuotaExceededError while navigator.storage.estimate() still reports
    // the disk's room (so the page's storage line does too): the harder case, where the download
    // starts, fails midway, and its chunks must be dropped.
    const cdp = await full.newCDPSession(p);
    await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 3_000_000 });
    await p.goto(new URL('index.html', url).href);
    await expect.poll(() => shellState(p), { timeout: 30_000 }).toBe('ready');
    expect(await load(p)).toBe('Loaded: KJV demo model (text completion).');
    const note = p.getByTestId('offline-note');
    expect(await note.isVisible()).toBe(true);
    expect(await note.textContent()).toMatch(/^KJV demo model could not be kept for offline use/);
    expect(await p.getByTestId('cache-list').textContent()).toBe('Nothing downloaded yet.');
    // Nothing of the failed download is left behind.
    const left = await p.evaluate(
      (name) =>
        new Promise<number>((resolve, reject) => {
          const open = indexedDB.open(name);
          open.onerror = () => reject(open.error);
          open.onsuccess = () => {
            const count = open.result.transaction('entries').objectStore('entries').count();
            count.onsuccess = () => resolve(count.result);
            count.onerror = () => reject(count.error);
          };
        }),
      `weft-v${STORAGE_VERSION}`,
    );
    expect(left).toBe(0);
    expect((await complete(p, 4)).length).toBeGreaterThan(0);
    await shot(p, '5-storage-full');
    await full.close();
  }, 300_000);
});
