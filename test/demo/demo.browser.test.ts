// The demo page (index.html) end to end in Chromium: load the bundled model (through the weights
// cache), stream a completion, stop mid-stream, change settings, the draft-tree view, a hub model through the weights cache
// (progress, cancel, chat mode) and deleting it from the cache manager, one GGUF file of a hub
// repository through the cache; and the message shown
// without WebGPU. Tiny random fixture models stand in for real ones (SwiftShader is slow): the
// "bundled" one, unless models/kjv-target/ exists, is served from test-results/ with its chat
// template removed (a base model); the "hub" one comes from the local hub server. Screenshots of each state go to test-results/demo/.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ggufFixture } from '../fixtures/write.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { type HubServer, startHubServer } from '../helpers/hub-server.js';

declare global {
  interface Window {
    /** Set by the test: mutations of the transcript since the last send. */
    demoUpdates: number;
  }
}

const BUNDLED = 'test-results/demo-model';
const SHOTS = 'test-results/demo';
const HUB_ID = 'weft-test/tiny-chat';
/** One file of a GGUF repository on the hub (the repository has two; only this one is fetched). */
const HUB_GGUF = 'weft-test/tiny-gguf/tiny-q8_0.gguf';

let browser: Browser;
let vite: ViteDevServer;
let hub: HubServer;
let hubRoot: string;
let url: string;
let page: Page;

beforeAll(async () => {
  await writeFixtureDir(BUNDLED, 'llama', 'f32');
  // A base model: no chat template, so the page runs it in completion mode.
  const config = JSON.parse(await readFile(join(BUNDLED, 'tokenizer_config.json'), 'utf8'));
  delete config.chat_template;
  await writeFile(join(BUNDLED, 'tokenizer_config.json'), JSON.stringify(config));
  hubRoot = await mkdtemp(join(tmpdir(), 'weft-demo-hub-'));
  await writeFixtureDir(join(hubRoot, ...HUB_ID.split('/')), 'qwen3', 'f32', 7);
  const ggufRepo = join(hubRoot, 'weft-test', 'tiny-gguf');
  await mkdir(ggufRepo);
  const template = '{% for m in messages %}{{ m.content }}{% endfor %}';
  await writeFile(
    join(ggufRepo, 'tiny-q8_0.gguf'),
    ggufFixture('qwen2', 'Q8_0', 8, { chatTemplate: template }).bytes,
  );
  await writeFile(join(ggufRepo, 'tiny-f32.gguf'), ggufFixture('qwen2', 'F32', 8).bytes);
  hub = await startHubServer(hubRoot, { lfsThreshold: 10_000 });
  await mkdir(SHOTS, { recursive: true });
  ({ url, server: vite } = await startServer());
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  logPageErrors(page);
  // The real bundled model (models/kjv-target/, small) when it is there; else the fixture stands in.
  const real = existsSync('models/kjv-target/config.json') && process.env.WEFT_DEMO_FIXTURE !== '1';
  const bundled = real ? '' : `bundled=/${BUNDLED}/&draft=/${BUNDLED}-none/&`;
  console.log(`[demo] bundled model: ${real ? 'models/kjv-target' : BUNDLED}`);
  await page.goto(new URL(`index.html?${bundled}hub=${hub.url}`, url).href);
});

afterAll(async () => {
  await browser?.close();
  await vite?.close();
  await hub?.close();
  if (hubRoot) await rm(hubRoot, { recursive: true, force: true });
});

const shot = (name: string) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
const stat = (key: string) => page.locator(`[data-testid="stats"] [data-stat="${key}"]`).textContent();
const output = () => page.getByTestId('output');

async function setValue(testid: string, value: string): Promise<void> {
  await page.getByTestId(testid).evaluate((e, v) => {
    if (!(e instanceof HTMLInputElement || e instanceof HTMLSelectElement)) throw new Error('not an input');
    e.value = v;
    e.dispatchEvent(new Event('input', { bubbles: true }));
    e.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
}

/** Sends `prompt` and counts how often the output text changed while it streamed. */
async function send(prompt: string): Promise<void> {
  await page.getByTestId('prompt-input').fill(prompt);
  await page.evaluate(() => {
    window.demoUpdates = 0;
    new MutationObserver(() => {
      window.demoUpdates++;
    }).observe(document.getElementById('transcript')!, {
      subtree: true,
      characterData: true,
      childList: true,
    });
  });
  await page.getByTestId('send-button').click();
}

/** The load line, with the problem shown when loading failed (so a failure says why). */
async function loadState(): Promise<string> {
  const line = (await page.getByTestId('loaded').textContent()) ?? '';
  return line === 'Loading failed.' ? `${line} ${await page.getByTestId('problem').textContent()}` : line;
}

const updates = () => page.evaluate(() => window.demoUpdates);
const state = () => page.getByTestId('stats').getAttribute('data-state');

describe('demo page', () => {
  it('loads the default (bundled) model', async () => {
    expect(await page.getByTestId('model-select').inputValue()).toBe('bundled');
    await expect.poll(() => page.getByTestId('model-note').textContent()).toMatch(/King James/);
    await page.getByTestId('load-button').click();
    await expect.poll(loadState, { timeout: 50_000 }).toMatch(/^Loaded/);
    expect(await page.getByTestId('mode').textContent()).toContain('text completion');
    expect(await page.getByTestId('send-button').isEnabled()).toBe(true);
    expect(await page.getByTestId('gpu-status').textContent()).toMatch(/^WebGPU adapter: /);
    // In the engine every tab of the site shares (a SharedWorker: Chromium exposes WebGPU there).
    expect(await page.getByTestId('loaded').getAttribute('data-shared')).toBe('yes');
    // The bundled model went through the weights cache, like a hub model.
    await expect
      .poll(() => page.getByTestId('cache-list').locator('li[data-model="KJV demo model (bundled)"]').count())
      .toBe(1);
    await shot('1-loaded');
  });

  it('streams a completion and shows stats', async () => {
    await setValue('max-tokens', '16');
    await setValue('drafter', 'none');
    await send('In the beginning');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    const text = (await output().textContent()) ?? '';
    expect(text.length).toBeGreaterThan(0);
    expect(await updates()).toBeGreaterThan(2);
    const tokens = Number(await stat('tokens'));
    expect(tokens).toBeGreaterThan(0);
    expect(tokens).toBeLessThanOrEqual(16);
    expect(Number(await stat('tok-s'))).toBeGreaterThan(0);
    expect(await stat('ttft')).toMatch(/\d+(\.\d)? m?s$/);
    expect(await stat('prompt')).toMatch(/^\d+ \(\d+ reused\)$/);
    await shot('2-streamed');
  });

  it('stops mid-stream, and the engine serves the next request', async () => {
    await setValue('max-tokens', '400');
    await send('And God said');
    await expect.poll(async () => Number(await stat('tokens')), { timeout: 50_000 }).toBeGreaterThan(3);
    await page.getByTestId('stop-button').click();
    await expect.poll(state, { timeout: 20_000 }).toBe('stopped');
    expect(await output().getAttribute('data-state')).toBe('stopped');
    expect(Number(await stat('tokens'))).toBeLessThan(400);
    expect(await page.getByTestId('stop-button').isDisabled()).toBe(true);
    await shot('3-stopped');
  });

  it('JSON output under a schema: the reply parses and validates, with n-gram speculation on', async () => {
    await setValue('max-tokens', '60');
    await setValue('drafter', 'ngram');
    await setValue('json-output', 'schema');
    expect(await page.getByTestId('json-schema').isVisible()).toBe(true);
    await page
      .getByTestId('json-schema')
      .fill(
        '{"type":"object","properties":{"king":{"enum":["david","saul"]},"age":{"type":"integer","minimum":1,"maximum":99}},"required":["king","age"]}',
      );
    await send('And the king');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    const reply = JSON.parse((await output().textContent()) ?? '');
    expect(reply).toEqual({ king: expect.stringMatching(/^(david|saul)$/), age: expect.any(Number) });
    expect(reply.age).toBeGreaterThanOrEqual(1);
    await setValue('json-output', 'off');
    expect(await page.getByTestId('json-schema').isVisible()).toBe(false);
  });

  it('sends again with changed settings, and draws the last draft tree with its accepted path', async () => {
    await setValue('max-tokens', '12');
    await setValue('temperature', '0.8');
    await setValue('drafter', 'ngram');
    expect(await page.locator('#temperature-value').textContent()).toBe('0.8');
    expect(await page.getByTestId('tree-budget').isEnabled()).toBe(true);
    // A prompt that repeats itself gives the n-gram drafter something to propose.
    await send('And the LORD said unto Moses, Speak unto the children of Israel. And the LORD said unto');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    expect(Number(await stat('tokens'))).toBeLessThanOrEqual(12);
    const tree = page.getByTestId('tree-view');
    const nodes = Number(await tree.getAttribute('data-nodes'));
    const accepted = Number(await tree.getAttribute('data-accepted'));
    expect(nodes).toBeGreaterThan(0);
    expect(await tree.locator('g.node').count()).toBe(nodes);
    expect(await tree.locator('g.node.accepted').count()).toBe(accepted);
    expect(await tree.locator('line.edge.accepted').count()).toBe(accepted);
    expect(Number(await stat('per-pass'))).toBeGreaterThanOrEqual(1);
    await shot('4-settings-tree');
  });

  it('downloads a hub model with progress, cancels, loads it in chat mode, then deletes it from the cache', async () => {
    await setValue('drafter', 'none');
    await setValue('model-select', 'hub-custom');
    await page.getByTestId('hub-id').fill(HUB_ID);
    // Cut the weights' connection a few times: retries back off for seconds, long enough to see the
    // progress bar and to cancel mid-download.
    hub.faults.drops.set('model.safetensors', 5);
    await page.getByTestId('load-button').click();
    await expect
      .poll(() => page.locator('#load-detail').textContent(), { timeout: 20_000 })
      .toMatch(/Downloading/);
    expect(await page.getByTestId('load-progress').isVisible()).toBe(true);
    await shot('5-downloading');
    await page.getByTestId('cancel-button').click();
    await expect.poll(() => page.getByTestId('loaded').textContent()).toBe('Loading cancelled.');
    expect(await page.getByTestId('load-progress').isVisible()).toBe(false);
    expect(hub.log.some((r) => r.dropped)).toBe(true);

    hub.faults.drops.clear();
    await page.getByTestId('load-button').click();
    await expect.poll(loadState, { timeout: 50_000 }).toMatch(/^Loaded/);
    expect(await loadState()).toBe(`Loaded: ${HUB_ID} (chat).`);
    expect(await page.getByTestId('mode').textContent()).toContain('chat');
    await setValue('max-tokens', '8');
    await send('Hello');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    expect(await page.locator('.turn.user').textContent()).toBe('Hello');
    const item = page.getByTestId('cache-list').locator(`li[data-model="${HUB_ID} @ main"]`);
    await expect.poll(() => item.count()).toBe(1);
    expect(await item.locator('.size').textContent()).toMatch(/\d+(\.\d)? KB$/);
    expect(await page.getByTestId('storage').textContent()).toMatch(/^Using .* available\.$/);
    await shot('6-chat-cached');

    await item.getByRole('button', { name: `Delete ${HUB_ID} @ main` }).click();
    await expect.poll(() => item.count()).toBe(0);
    expect(await page.getByTestId('cache-list').textContent()).not.toContain(HUB_ID);
    expect(await page.getByTestId('cache-list').textContent()).toContain('KJV demo model (bundled)');
    await shot('7-deleted');
  });

  it('downloads one GGUF file of a hub repository into the cache, runs it in chat mode, and deletes it', async () => {
    await setValue('model-select', 'hub-custom');
    await page.getByTestId('hub-id').fill(HUB_GGUF);
    const before = hub.log.length;
    await page.getByTestId('load-button').click();
    await expect.poll(loadState, { timeout: 50_000 }).toMatch(/^Loaded/);
    expect(await loadState()).toBe(`Loaded: ${HUB_GGUF} (chat).`);
    const fetched = new Set(hub.log.slice(before).map((r) => r.file));
    expect([...fetched]).toEqual(['tiny-q8_0.gguf']);
    await send('Hello');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    const item = page.getByTestId('cache-list').locator('li[data-model="weft-test/tiny-gguf @ main"]');
    await expect.poll(() => item.count()).toBe(1);
    await item.getByRole('button', { name: 'Delete weft-test/tiny-gguf @ main' }).click();
    await expect.poll(() => item.count()).toBe(0);
  });

  it('loads a model from files picked on this computer', async () => {
    await setValue('model-select', 'local');
    expect(await page.getByTestId('local-files').isVisible()).toBe(true);
    const files = await readdir(BUNDLED);
    await page.getByTestId('local-files').setInputFiles(files.map((f) => join(BUNDLED, f)));
    await page.getByTestId('load-button').click();
    await expect.poll(loadState, { timeout: 50_000 }).toBe('Loaded: local files (text completion).');
    // Picked files are read in place: nothing new in the cache.
    expect(
      await page.getByTestId('cache-list').locator('li[data-model]').allTextContents(),
    ).not.toContainEqual(expect.stringContaining('local files'));
    await send('Jesus wept');
    await expect.poll(state, { timeout: 50_000 }).toBe('done');
    await shot('8-local-files');
  });

  it('draws a draft tree with the accepted path highlighted (the view alone, on a fixed tree)', async () => {
    const p = await browser.newPage({ viewport: { width: 480, height: 320 } });
    await p.goto(new URL('test/helpers/pages/tree-view.html', url).href);
    const view = p.getByTestId('tree-view');
    await expect.poll(() => view.getAttribute('data-nodes')).toBe('7');
    expect(await view.locator('g.node').count()).toBe(7);
    expect(
      await view.locator('g.node.accepted').evaluateAll((g) => g.map((e) => e.getAttribute('data-node'))),
    ).toEqual(['0', '1', '2']);
    expect(await view.locator('line.edge.accepted').count()).toBe(3);
    expect(await view.locator('svg > title').textContent()).toBe('Draft tree: 7 drafted tokens, 3 accepted');
    await p.screenshot({ path: `${SHOTS}/9-tree-view.png` });
    await p.close();
  });

  it('says what to do when the browser has no WebGPU', async () => {
    const p = await browser.newPage({ viewport: { width: 1280, height: 700 } });
    await p.addInitScript(() => {
      Reflect.deleteProperty(Navigator.prototype, 'gpu');
    });
    await p.goto(new URL(`index.html?bundled=/${BUNDLED}/`, url).href);
    const problem = p.getByTestId('problem');
    await expect.poll(() => problem.isVisible()).toBe(true);
    expect(await problem.textContent()).toMatch(/WebGPU is not available.*Chrome or Edge/);
    await p.screenshot({ path: `${SHOTS}/10-no-webgpu.png` });
    await p.close();
  });
});
