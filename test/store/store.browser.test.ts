// The weights cache end to end in Chromium: a page served by Vite (a real origin, so IndexedDB works)
// downloads a fixture model from a local hub-shaped server on another port (CORS), and the tests
// check offline reloads, dropped connections, a reload mid-download, corrupted chunks and a full disk.
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { type HubServer, startHubServer } from '../helpers/hub-server.js';
import type { PageDownload } from '../helpers/pages/store-page.js';

const ID = 'weft-test/tiny-model';
const CHUNK = 64 * 1024;
// A fixture model of ~300 KB: the large file is an "LFS" file (sha256 announced), the others not.
const SIZES: Record<string, number> = {
  'config.json': 700,
  'tokenizer.json': 20_000,
  'model.safetensors': 300_000,
};
const FILES = Object.keys(SIZES);
const MODEL = 'model.safetensors';

let browser: Browser;
let vite: ViteDevServer;
let pageUrl: string;
let hub: HubServer;
let root: string;
const sha256: Record<string, string> = {};
let page: Page;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'weft-hub-'));
  await mkdir(join(root, ...ID.split('/')), { recursive: true });
  let seed = 12345;
  for (const [name, size] of Object.entries(SIZES)) {
    const bytes = new Uint8Array(size);
    for (let i = 0; i < size; i++) {
      seed = (seed * 1103515245 + 12345) >>> 0;
      bytes[i] = seed >>> 24;
    }
    await writeFile(join(root, ...ID.split('/'), name), bytes);
    sha256[name] = createHash('sha256').update(bytes).digest('hex');
  }
  hub = await startHubServer(root, { lfsThreshold: 100_000 });
  let url: string;
  ({ url, server: vite } = await startServer());
  pageUrl = new URL('test/helpers/pages/store.html', url).href;
  browser = await launchChromium();
  // One context for the whole file: IndexedDB persists across reloads within it.
  const context = await browser.newContext();
  page = await context.newPage();
  logPageErrors(page);
});

afterAll(async () => {
  await browser?.close();
  await vite?.close();
  await hub?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

async function open(): Promise<void> {
  await page.goto(pageUrl);
  await expect.poll(() => page.getByTestId('store-ready').textContent(), { timeout: 60_000 }).toBe('ready');
}

function download(o: Partial<PageDownload> = {}) {
  const args: PageDownload = { hubUrl: hub.url, id: ID, files: FILES, chunkSize: CHUNK, ...o };
  return page.evaluate((a) => window.weftStore.download(a), args);
}

function hashFiles() {
  return page.evaluate(([u, id, f]) => window.weftStore.hashFiles(u, id, f), [hub.url, ID, FILES] as const);
}

function modelGets(): number {
  return hub.log.filter((r) => r.method === 'GET' && r.file === MODEL).length;
}

beforeEach(async () => {
  await page.unrouteAll();
  hub.faults.drops.clear();
  hub.faults.delayMs = 0;
  await open();
  await page.evaluate(() => window.weftStore.clear());
  hub.log.length = 0;
});

describe('weights cache in Chromium', () => {
  it('downloads with progress, then loads from IndexedDB after a reload with the network blocked', async () => {
    const total = Object.values(SIZES).reduce((a, b) => a + b, 0);
    const res = await download();
    if (!('value' in res)) throw new Error(`download failed: ${res.error.name}: ${res.error.message}`);
    const { events } = res.value;
    expect(res.value.bytes).toBe(total);
    expect(events.length).toBeGreaterThan(5);
    expect(events.at(-1)).toMatchObject({ bytesDone: total, bytesTotal: total, filesDone: 3, filesTotal: 3 });
    expect(events.some((e) => e.file === MODEL && e.bytesDone < total)).toBe(true);
    // ceil(300000 / 65536) = 5 range requests for the model file.
    expect(modelGets()).toBe(5);
    expect(await page.evaluate(() => window.weftStore.list())).toEqual([{ key: `${ID}@main`, bytes: total }]);

    // Reload with every request to the hub aborted by the browser.
    let blocked = 0;
    await page.route(`${hub.url}/**`, (route) => {
      blocked++;
      return route.abort();
    });
    await open();
    hub.log.length = 0;
    const again = await download();
    expect(again).toMatchObject({ value: { bytes: total } });
    const read = await hashFiles();
    // The engine is not wired yet: "the same tokens" is checked as byte equality with the source.
    expect(read).toEqual({ value: { sha256, repaired: 0 } });
    expect(hub.log).toEqual([]);
    expect(blocked).toBe(0);
  });

  it('a real model loads from IndexedDB after a reload with the network blocked and generates the same tokens', async () => {
    const REAL = 'weft-test/real-model';
    await writeFixtureDir(join(root, ...REAL.split('/')), 'llama', 'f32', 8);
    await page.unroute(`${hub.url}/**`);
    await open();
    const first = await page.evaluate(([u, id]) => window.weftStore.generate(u, id), [
      hub.url,
      REAL,
    ] as const);
    if (!('value' in first))
      throw new Error(`first load failed: ${first.error.name}: ${first.error.message}`);
    expect(first.value).toHaveLength(12);
    expect(hub.log.some((r) => r.file === 'model.safetensors' && r.method === 'GET')).toBe(true);
    let blocked = 0;
    await page.route(`${hub.url}/**`, (route) => {
      blocked++;
      return route.abort();
    });
    await open();
    hub.log.length = 0;
    const again = await page.evaluate(([u, id]) => window.weftStore.generate(u, id), [
      hub.url,
      REAL,
    ] as const);
    expect(again).toEqual({ value: first.value });
    expect(hub.log).toEqual([]);
    expect(blocked).toBe(0);
    await page.unroute(`${hub.url}/**`);
  });

  it('the server drops the connection mid-file 5 times: the download resumes and the bytes match', async () => {
    hub.faults.drops.set(MODEL, 5);
    hub.faults.dropAfterBytes = 10_000;
    const res = await download({ concurrency: 2, retries: 8 });
    expect(res).toMatchObject({ value: { bytes: 320_700 } });
    expect(hub.log.filter((r) => r.dropped)).toHaveLength(5);
    expect(modelGets()).toBe(5 + 5);
    expect(await hashFiles()).toEqual({ value: { sha256, repaired: 0 } });
  });

  it('a reload in the middle of a download resumes from the last complete chunk', async () => {
    hub.faults.delayMs = 150;
    const args: PageDownload = { hubUrl: hub.url, id: ID, files: FILES, chunkSize: CHUNK, concurrency: 1 };
    await page.evaluate((a) => window.weftStore.start(a), args);
    // Wait until at least 2 model chunks are stored, then reload (the download dies with the page).
    await expect
      .poll(() => page.evaluate(() => window.weftStore.keys()), { timeout: 30_000 })
      .toEqual(expect.arrayContaining([`chunk ${ID}@main ${MODEL} 1`]));
    await open();
    expect(await page.evaluate(() => window.weftStore.list())).toEqual([]);
    const stored = (await page.evaluate(() => window.weftStore.keys())).filter((k) =>
      k.includes(` ${MODEL} `),
    );
    expect(stored.length).toBeGreaterThanOrEqual(2);
    expect(stored.length).toBeLessThan(5);
    hub.faults.delayMs = 0;
    // Let a request the old page sent just before the reload reach the log before counting.
    await new Promise((r) => setTimeout(r, 300));
    const before = modelGets();
    expect(await download()).toMatchObject({ value: { bytes: 320_700 } });
    // Only the chunks missing at the reload were fetched again.
    expect(modelGets() - before).toBe(5 - stored.length);
    expect(await hashFiles()).toEqual({ value: { sha256, repaired: 0 } });
  });

  it('a chunk corrupted in IndexedDB is detected on read and re-fetched, never used', async () => {
    expect(await download()).toMatchObject({ value: { bytes: 320_700 } });
    await page.evaluate(([f]) => window.weftStore.corruptChunk('weft-test/tiny-model', f, 2), [
      MODEL,
    ] as const);
    hub.log.length = 0;
    expect(await hashFiles()).toEqual({ value: { sha256, repaired: 1 } });
    expect(hub.log.map((r) => `${r.method} ${r.file} ${r.range}`)).toEqual([
      `GET ${MODEL} bytes=${2 * CHUNK}-${3 * CHUNK - 1}`,
    ]);
    // The repaired chunk was written back: a second read needs no network.
    hub.log.length = 0;
    expect(await hashFiles()).toEqual({ value: { sha256, repaired: 0 } });
    expect(hub.log).toEqual([]);

    // Corrupt again with the hub unreachable: the read fails with IntegrityError instead.
    await page.evaluate(([f]) => window.weftStore.corruptChunk('weft-test/tiny-model', f, 3), [
      MODEL,
    ] as const);
    await page.route(`${hub.url}/**`, (route) => route.abort());
    const offline = await hashFiles();
    expect(offline).toMatchObject({ error: { name: 'IntegrityError' } });
  });

  it('a simulated quota shortfall gives QuotaError and leaves no partial model', async () => {
    const res = await download({ quota: { quota: 200_000, usage: 50_000 } });
    expect(res).toMatchObject({ error: { name: 'QuotaError' } });
    if ('error' in res) expect(res.error.message).toMatch(/320700 bytes needed, 150000 available/);
    expect(await page.evaluate(() => window.weftStore.list())).toEqual([]);
    expect(await page.evaluate(() => window.weftStore.keys())).toEqual([]);
    expect(hub.log.every((r) => r.method === 'HEAD')).toBe(true);
  });
});
