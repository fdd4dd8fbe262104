// The demo page's speculation views in Chromium, on the bundled KJV target and its draft model
// (models/kjv-target, models/kjv-draft), one page and one load for the whole file: the adapter
// line and the model's GPU memory; the live figures over three prompts (tokens per pass from the
// engine's own counts: never above budget + 1, and equal to lastStats at the end); the draft
// trees at budget 8 and 32 (token text, id and draft probability on hover and focus, the accepted
// path and the bonus token, stepping and zoom); the race of plain decoding against the draft
// model; the keyboard (Enter, Shift+Enter, Escape, visible focus) and Chromium's accessibility
// tree. Screenshots go to test-results/demo-speculation/.
import { mkdir } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';

const SHOTS = 'test-results/demo-speculation';
const PROMPTS = ['In the beginning God', 'And the LORD said unto Moses', 'Blessed are the'];

declare global {
  interface Window {
    /** Set by the test: the stats panel at each redraw (state, tokens per pass, target passes). */
    demoFigures: { state: string; perPass: string; passes: string }[];
  }
}

let browser: Browser;
let vite: ViteDevServer;
let page: Page;

beforeAll(async () => {
  await mkdir(SHOTS, { recursive: true });
  let url: string;
  ({ url, server: vite } = await startServer());
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  logPageErrors(page);
  await page.goto(new URL('index.html', url).href);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await vite?.close();
});

async function setValue(testid: string, value: string): Promise<void> {
  await page.getByTestId(testid).evaluate((e, v) => {
    if (!(e instanceof HTMLInputElement || e instanceof HTMLSelectElement)) throw new Error('not an input');
    e.value = v;
    e.dispatchEvent(new Event('input', { bubbles: true }));
    e.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
}

const state = () => page.getByTestId('stats').getAttribute('data-state');
const tree = () => page.getByTestId('tree-view');

/**
 * The tree's boxes (drafted nodes and the bonus): where each stands, and whether every one lies
 * inside the picture with no two in the same place.
 */
async function layout(): Promise<{ boxes: number; distinct: number; inside: boolean }> {
  return tree()
    .locator('svg')
    .evaluate((svg) => {
      const [, , w, h] = (svg.getAttribute('viewBox') ?? '').split(' ').map(Number);
      const rects = [...svg.querySelectorAll('g[data-about] rect')].map((r) => {
        const n = (k: string) => Number(r.getAttribute(k));
        return { x: n('x'), y: n('y'), right: n('x') + n('width'), bottom: n('y') + n('height') };
      });
      return {
        boxes: rects.length,
        distinct: new Set(rects.map((r) => `${r.x},${r.y}`)).size,
        inside: rects.every((r) => r.x >= 0 && r.y >= 0 && r.right <= w! && r.bottom <= h!),
      };
    });
}

/** Sends `prompt` and waits until the request is done. */
async function complete(prompt: string): Promise<void> {
  await page.getByTestId('prompt-input').fill(prompt);
  await page.getByTestId('send-button').click();
  await expect.poll(state, { timeout: 60_000 }).toBe('done');
}

describe('demo page: speculation', () => {
  it('loads the bundled model with its draft model', async () => {
    // The bundled draft model is served: the page offers it, and loads it with the target.
    await expect.poll(() => page.getByTestId('draft-model').isChecked(), { timeout: 20_000 }).toBe(true);
    await page.getByTestId('load-button').click();
    await expect.poll(() => page.getByTestId('loaded').textContent(), { timeout: 60_000 }).toMatch(/^Loaded/);
    expect(await page.getByTestId('drafter').inputValue()).toBe('draft');
    expect(await page.getByTestId('gpu-memory').textContent()).toBe(
      'GPU memory: measured at the first request.',
    );
  });

  it('names the adapter, says whether it is software and which features are in use', async () => {
    const status = page.getByTestId('gpu-status');
    expect(await status.textContent()).toMatch(/^WebGPU adapter: \S/);
    const software = await status.getAttribute('data-software');
    expect(software).toMatch(/^(true|false)$/);
    expect(await page.getByTestId('adapter-kind').textContent()).toMatch(
      software === 'true' ? /software adapter: WebGPU runs on the CPU, so .* slower/ : /hardware GPU/,
    );
    expect(await page.getByTestId('adapter-features').textContent()).toMatch(
      /^Features in use: shader-f16 (on|off), subgroups (on|off) \((serial|GPU) kernels/,
    );
    expect(await status.getAttribute('data-f16')).toMatch(/^(true|false)$/);
  });

  it('live figures from the engine’s counts over three prompts: per pass ≤ budget + 1, equal to lastStats at the end', async () => {
    await setValue('max-tokens', '20');
    await setValue('tree-budget', '8');
    // Every step speculative (by default the engine drops speculation where it loses, as a
    // draft model does on a software adapter).
    await setValue('speculation', 'always');
    await page.evaluate(() => {
      window.demoFigures = [];
      const stats = document.getElementById('stats')!;
      const value = (key: string) =>
        stats.querySelector(`[data-stat="${key}"]`)?.getAttribute('data-value') ?? 'absent';
      new MutationObserver(() => {
        window.demoFigures.push({
          state: stats.dataset.state ?? '',
          perPass: value('per-pass'),
          passes: value('passes'),
        });
      }).observe(stats, { childList: true });
    });
    for (const prompt of PROMPTS) {
      await page.evaluate(() => {
        window.demoFigures = [];
      });
      await complete(prompt);
      const figures = await page.evaluate(() => window.demoFigures);
      const live = figures.filter((f) => f.state === 'generating' && f.perPass !== 'NaN');
      const done = figures.filter((f) => f.state === 'done');
      expect(live.length, prompt).toBeGreaterThan(1);
      for (const f of live) expect(Number(f.perPass), prompt).toBeLessThanOrEqual(9);
      expect(done, prompt).toHaveLength(1);
      // The last live value (the last chunk's counts) is the engine's lastStats.tokens_per_pass.
      expect(live.at(-1)!.perPass, prompt).toBe(done[0]!.perPass);
      expect(live.at(-1)!.passes, prompt).toBe(done[0]!.passes);
      // The draft model's drafts are accepted: 2.7 to 2.9 tokens per pass measured over these
      // prompts (drafts all rejected would give exactly 1).
      expect(Number(done[0]!.perPass), prompt).toBeGreaterThan(1.8);
      console.log(
        `[demo-speculation] "${prompt}": ${live.length} live updates, tokens per pass ${live.map((f) => Number(f.perPass).toFixed(2)).join(' ')} → ${done[0]!.perPass}`,
      );
    }
    const rate = page.locator('[data-testid="stats"] [data-stat="tok-s-recent"]');
    expect(Number(await rate.getAttribute('data-value'))).toBeGreaterThan(0);
    const memory = page.getByTestId('gpu-memory');
    expect(await memory.textContent()).toMatch(
      /^GPU memory: weights [\d.]+ [KM]B \(draft model [\d.]+ [KM]B\) · KV cache [\d.]+ [KM]B\.$/,
    );
    expect(Number(await memory.getAttribute('data-kv'))).toBeGreaterThan(0);
  });

  it('draws the tree at budget 8 with token text, id and probability on hover and focus, accepted path and bonus; steps back', async () => {
    // Labels: visible whitespace, an ellipsis past 8 characters.
    expect(
      await page.evaluate(
        // A string, so that the test's own transform leaves the page's dynamic import alone.
        "import('/demo/ui/tree.ts').then((m) => [' the', '\\n\\n', '\\tfor', ' everlasting'].map((t) => m.tokenLabel(t)))",
      ),
    ).toEqual(['·the', '↵↵', '⇥for', '·everla…']);
    const view = tree();
    const nodes = Number(await view.getAttribute('data-nodes'));
    expect(nodes).toBeGreaterThan(0);
    expect(nodes).toBeLessThanOrEqual(8);
    expect(await view.locator('g.node').count()).toBe(nodes);
    expect(await view.locator('g.node.accepted').count()).toBe(
      Number(await view.getAttribute('data-accepted')),
    );
    expect(await view.locator('g.bonus').count()).toBe(1);
    expect(await layout()).toEqual({ boxes: nodes + 1, distinct: nodes + 1, inside: true });
    const labels = await view.locator('g.node text').allTextContents();
    expect(labels.some((l) => /^#\d+$/.test(l))).toBe(false);
    expect(labels.join('')).toMatch(/[A-Za-z]/);
    const detail = page.getByTestId('tree-detail');
    await view.locator('g.node').first().hover();
    expect(await detail.textContent()).toMatch(
      /^“.+” · id \d+ · draft p = (0\.\d{3}|1\.000) · (accepted|rejected)$/,
    );
    await view.locator('g.bonus').hover();
    expect(await detail.textContent()).toMatch(/^bonus: “.+” · id \d+ · the target’s own next token/);
    // Keyboard: the first node takes the focus; the arrow keys move it and the detail follows.
    await view.locator('g.node').first().focus();
    const first = await detail.textContent();
    await page.keyboard.press('ArrowDown');
    expect(await detail.textContent()).not.toBe(first);
    expect(await page.evaluate(() => document.activeElement?.getAttribute('data-about'))).toBe(
      await detail.textContent(),
    );
    await page.locator('section.trees').screenshot({ path: `${SHOTS}/tree-budget-8.png` });
    // Stepping back through the last passes' trees, and forward again.
    const pass = Number(await view.getAttribute('data-pass'));
    expect(await page.getByTestId('tree-position').textContent()).toMatch(/^Pass \d+ · tree (\d) of \1$/);
    await page.getByTestId('tree-earlier').click();
    expect(Number(await view.getAttribute('data-pass'))).toBeLessThan(pass);
    expect(await page.getByTestId('tree-position').textContent()).toMatch(/^Pass \d+ · tree \d of \d$/);
    await page.getByTestId('tree-later').click();
    expect(Number(await view.getAttribute('data-pass'))).toBe(pass);
    expect(await page.getByTestId('tree-later').isDisabled()).toBe(true);
  });

  it('draws a readable tree at budget 32, in a scrolling box that zooms', async () => {
    await setValue('tree-budget', '32');
    await setValue('max-tokens', '12');
    await complete('And God said, Let there be light');
    const view = tree();
    const nodes = Number(await view.getAttribute('data-nodes'));
    expect(nodes).toBeGreaterThan(8);
    expect(nodes).toBeLessThanOrEqual(32);
    const svg = view.locator('svg');
    const size = async () => Number(await svg.getAttribute('width'));
    const natural = Number((await svg.getAttribute('viewBox'))!.split(' ')[2]);
    expect(await size()).toBe(Math.round(natural));
    // Boxes never overlap: each (column, row) place holds one node, all inside the picture.
    expect(await layout()).toEqual({ boxes: nodes + 1, distinct: nodes + 1, inside: true });
    expect(await view.evaluate((e) => getComputedStyle(e).overflow)).toBe('auto');
    await page.locator('section.trees').screenshot({ path: `${SHOTS}/tree-budget-32.png` });
    await page.getByTestId('tree-zoom-in').click();
    expect(await size()).toBe(Math.round(natural * 1.25));
    await page.getByTestId('tree-zoom-out').click();
    await page.getByTestId('tree-zoom-out').click();
    expect(await size()).toBe(Math.round(natural * 0.75));
    await page.locator('section.trees').screenshot({ path: `${SHOTS}/tree-budget-32-zoomed-out.png` });
    await page.getByTestId('tree-zoom-in').click();
  });

  it('races plain decoding against the draft model: identical outputs, both speeds and the speed-up', async () => {
    await setValue('tree-budget', '8');
    await setValue('max-tokens', '20');
    await page.getByTestId('prompt-input').fill('And the LORD spake unto Moses, saying');
    await page.getByTestId('race-button').click();
    const race = page.getByTestId('race');
    await expect.poll(() => race.getAttribute('data-state'), { timeout: 90_000 }).toBe('done');
    const verdict = page.getByTestId('race-verdict');
    expect(await verdict.getAttribute('data-identical')).toBe('true');
    const plain = page.getByTestId('race-plain');
    const spec = page.getByTestId('race-speculative');
    const text = await plain.locator('.race-text').textContent();
    expect(text?.length).toBeGreaterThan(0);
    expect(await spec.locator('.race-text').textContent()).toBe(text);
    const value = async (side: typeof plain, key: string) =>
      Number(await side.locator(`[data-stat="${key}"]`).getAttribute('data-value'));
    expect(await value(plain, 'tok-s')).toBeGreaterThan(0);
    expect(await value(spec, 'tok-s')).toBeGreaterThan(0);
    expect(await value(plain, 'per-pass')).toBe(1);
    // The draft model's drafts are accepted (3.5 tokens per pass measured; drafts all rejected
    // would give exactly 1), so the race compares real speculation with plain decoding.
    expect(await value(spec, 'per-pass')).toBeGreaterThan(2);
    expect(await value(spec, 'per-pass')).toBeLessThanOrEqual(9);
    const speedup = Number(await verdict.getAttribute('data-speedup'));
    expect(speedup).toBeCloseTo((await value(spec, 'tok-s')) / (await value(plain, 'tok-s')), 6);
    expect(await page.getByTestId('race-speedup').textContent()).toMatch(
      /^Speculation decodes \d+\.\d\d× as fast as plain decoding \([\d.]+ vs [\d.]+ tokens\/s\)\.$/,
    );
    console.log(`[demo-speculation] race: ${await verdict.textContent()}`);
    await race.screenshot({ path: `${SHOTS}/race.png` });
    await page.screenshot({ path: `${SHOTS}/page.png`, fullPage: true });
  });

  it('keyboard: Shift+Enter adds a line, Enter sends, Escape stops; focus is visible', async () => {
    await setValue('max-tokens', '400');
    const input = page.getByTestId('prompt-input');
    await input.fill('');
    await input.focus();
    await page.keyboard.type('And it came to pass');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('that');
    expect(await input.inputValue()).toBe('And it came to pass\nthat');
    expect(await state()).toBe('done');
    await page.keyboard.press('Enter');
    await expect.poll(state, { timeout: 20_000 }).toBe('generating');
    await expect
      .poll(
        async () =>
          Number(await page.locator('[data-testid="stats"] [data-stat="tokens"]').getAttribute('data-value')),
        {
          timeout: 30_000,
        },
      )
      .toBeGreaterThan(2);
    await page.keyboard.press('Escape');
    await expect.poll(state, { timeout: 20_000 }).toBe('stopped');
    expect(await page.getByTestId('output').getAttribute('data-state')).toBe('stopped');
    // Tab from the prompt reaches Send, drawn with a visible focus ring.
    await input.focus();
    await page.keyboard.press('Tab');
    const ring = await page.evaluate(() => {
      const e = document.activeElement;
      if (!e) return undefined;
      const s = getComputedStyle(e);
      return { id: e.id, visible: e.matches(':focus-visible'), style: s.outlineStyle, width: s.outlineWidth };
    });
    expect(ring).toEqual({ id: 'send-button', visible: true, style: 'solid', width: '3px' });
  });

  it('every control has a name in Chromium’s accessibility tree', async () => {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Accessibility.enable');
    const { nodes } = await cdp.send('Accessibility.getFullAXTree');
    const controls = new Set([
      'button',
      'textbox',
      'combobox',
      'slider',
      'checkbox',
      'spinbutton',
      'link',
      'img',
      'image',
    ]);
    const named = nodes
      .filter((n) => !n.ignored && controls.has(String(n.role?.value)))
      .map((n) => ({ role: String(n.role?.value), name: String(n.name?.value ?? '').trim() }));
    expect(named.filter((n) => n.name === '')).toEqual([]);
    const has = (role: string, name: string | RegExp) =>
      named.some((n) => n.role === role && (typeof name === 'string' ? n.name === name : name.test(n.name)));
    expect(has('textbox', 'Prompt')).toBe(true);
    expect(has('button', 'Race: plain vs drafter')).toBe(true);
    expect(has('button', 'Earlier pass')).toBe(true);
    expect(has('button', 'Zoom in')).toBe(true);
    const node = /^“.+” · id \d+ · draft p = /;
    expect(has('image', node) || has('img', node)).toBe(true);
    await cdp.detach();
  });
});
