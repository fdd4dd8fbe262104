// The demo page's steering settings in Chromium, on the bundled KJV target (models/kjv-target):
// a steering file measured here in Node (Psalms − Leviticus direction, CPU reference) is picked
// with the file input, travels to the engine worker with the load options, and "add" at a large
// scale changes the greedy text; a file measured on another model (the bundled draft, hidden 128)
// is refused at load with a clear message in the page. Screenshots go to test-results/demo-steer/.
import { mkdir } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { modelChecksum, openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { writeSteerFile } from '../../src/steer/format.js';
import { measureDirections } from '../../src/steer/measure.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';

const SHOTS = 'test-results/demo-steer';
const PROMPT = 'And the LORD said unto Moses';

const PSALMS = [
  'The LORD is my shepherd; I shall not want.',
  'O give thanks unto the LORD; for he is good: for his mercy endureth for ever.',
  'Praise ye the LORD. Praise ye the LORD from the heavens: praise him in the heights.',
];
const LEVITICUS = [
  'And the priest shall burn it upon the altar: it is a burnt offering.',
  'And he shall wash his clothes, and bathe himself in water, and be unclean until the even.',
  'This is the law of the trespass offering: it is most holy.',
];

/** A steering file measured on the model in `dir` (every layer), with the given defaults. */
async function measureFile(dir: string): Promise<Uint8Array> {
  const files = await pathModel(dir);
  try {
    const opened = await openModel(files);
    const model = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const tok = (lines: string[]) => lines.map((l) => opened.tokenizer.encode(l, { addSpecialTokens: true }));
    const layers = Array.from({ length: opened.spec.layers }, (_, l) => l);
    const { vectors } = measureDirections(model, tok(PSALMS), tok(LEVITICUS), layers);
    return writeSteerFile({
      hidden: opened.spec.hidden,
      modelChecksum: await modelChecksum(files),
      layers: vectors,
      shared: undefined,
      defaultLayers: 'all',
      mode: 'ablate',
      scale: 1,
    });
  } finally {
    await files.close?.();
  }
}

let browser: Browser;
let vite: ViteDevServer;
let page: Page;
let target: Uint8Array;
let other: Uint8Array;

beforeAll(async () => {
  target = await measureFile('models/kjv-target');
  other = await measureFile('models/kjv-draft');
  await mkdir(SHOTS, { recursive: true });
  let url: string;
  ({ url, server: vite } = await startServer());
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  logPageErrors(page);
  await page.goto(new URL('index.html', url).href);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await vite?.close();
});

const shot = (name: string) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
const state = () => page.getByTestId('stats').getAttribute('data-state');

async function setValue(testid: string, value: string): Promise<void> {
  await page.getByTestId(testid).evaluate((e, v) => {
    if (!(e instanceof HTMLInputElement || e instanceof HTMLSelectElement)) throw new Error('not an input');
    e.value = v;
    e.dispatchEvent(new Event('input', { bubbles: true }));
    e.dispatchEvent(new Event('change', { bubbles: true }));
  }, value);
}

async function pickSteerFile(name: string, bytes: Uint8Array): Promise<void> {
  await page.getByTestId('steer-file').setInputFiles({
    name,
    mimeType: 'application/octet-stream',
    buffer: Buffer.from(bytes),
  });
}

/** Loads the bundled model and returns the "Loaded" line (or the problem shown when it failed). */
async function load(): Promise<string> {
  await page.getByTestId('load-button').click();
  await expect
    .poll(() => page.getByTestId('loaded').textContent(), { timeout: 60_000 })
    .toMatch(/^(Loaded|Loading failed)/);
  const line = (await page.getByTestId('loaded').textContent()) ?? '';
  return line === 'Loading failed.' ? `${line} ${await page.getByTestId('problem').textContent()}` : line;
}

/** Greedy completion of {@link PROMPT}, 10 tokens. */
async function complete(): Promise<string> {
  await setValue('max-tokens', '10');
  await setValue('temperature', '0');
  await setValue('drafter', 'none');
  await page.getByTestId('prompt-input').fill(PROMPT);
  await page.getByTestId('send-button').click();
  await expect.poll(state, { timeout: 90_000 }).toBe('done');
  return (await page.getByTestId('output').textContent()) ?? '';
}

describe('demo page: steering', () => {
  it('a steering file of this model, added at a large scale, changes the greedy text', async () => {
    await expect.poll(() => page.getByTestId('model-note').textContent()).toMatch(/King James/);
    expect(await page.getByTestId('steer-note').textContent()).toMatch(/No steering file/);
    expect(await page.getByTestId('steer-mode').isDisabled()).toBe(true);
    expect(await load()).toMatch(/^Loaded: .*\(text completion\)\.$/);
    const plain = await complete();
    expect(plain.length).toBeGreaterThan(0);

    await page.getByTestId('steer-panel').locator('summary').click();
    await pickSteerFile('psalms-leviticus.safetensors', target);
    await expect.poll(() => page.getByTestId('steer-note').getAttribute('data-state')).toBe('ready');
    expect(await page.getByTestId('steer-note').textContent()).toMatch(/6 vector\(s\) of width 256/);
    // The file's defaults fill the fields.
    expect(await page.getByTestId('steer-mode').inputValue()).toBe('ablate');
    expect(await page.getByTestId('steer-layers').inputValue()).toBe('all');
    expect(await page.getByTestId('steer-scale').isDisabled()).toBe(true); // "ablate" has no scale
    await setValue('steer-mode', 'add');
    expect(await page.getByTestId('steer-scale').isEnabled()).toBe(true);
    await setValue('steer-scale', '400');
    await setValue('steer-layers', '3');
    expect(await load()).toMatch(/^Loaded: .*steered: add ×400 at layer 3\)\.$/);
    const steered = await complete();
    console.log(JSON.stringify({ plain, steered }));
    expect(steered).not.toBe(plain);
    await shot('1-steered');

    // "No steering" and a reload give the plain text back: the change came from the file.
    await page.getByTestId('steer-clear').click();
    expect(await load()).toMatch(/\(text completion\)\.$/);
    expect(await complete()).toBe(plain);
  }, 300_000);

  it('refuses a steering file measured on another model, with a clear message', async () => {
    await pickSteerFile('draft-model.safetensors', other);
    await expect.poll(() => page.getByTestId('steer-note').getAttribute('data-state')).toBe('ready');
    expect(await load()).toMatch(/^Loading failed\./);
    const problem = page.getByTestId('problem');
    expect(await problem.isVisible()).toBe(true);
    expect(await problem.getAttribute('data-error')).toBe('SteerMismatchError');
    expect(await problem.textContent()).toMatch(/measured on another model/);
    expect(await problem.textContent()).toMatch(
      /draft-model\.safetensors: hidden = 128, but the model has 256/,
    );
    await shot('2-other-model');

    // A file that is not a steering file is reported as soon as it is picked.
    await pickSteerFile('notes.safetensors', new TextEncoder().encode('not a safetensors file'));
    await expect.poll(() => page.getByTestId('steer-note').getAttribute('data-state')).toBe('invalid');
    expect(await page.getByTestId('steer-note').textContent()).toMatch(
      /^notes\.safetensors is not a steering file/,
    );
    // The previous file's message was cleared, and nothing is left to load with.
    expect(await page.getByTestId('problem').isHidden()).toBe(true);
    expect(await page.getByTestId('steer-mode').isDisabled()).toBe(true);
    await shot('3-invalid-file');
  }, 120_000);
});
