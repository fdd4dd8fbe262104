// llama.cpp itself on the lfm2_moe GGUF `weft export-gguf` writes: see test/helpers/moe-wllama.ts.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, it } from 'vitest';
import { tinyConfig } from '../fixtures/write.js';
import { expectMoeWllamaParity } from '../helpers/moe-wllama.js';
import { setUpWllamaPage } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

it('llama.cpp (wllama) decodes the exported lfm2_moe GGUF to the reference’s greedy ids', async () => {
  await expectMoeWllamaParity(page, pageUrl, 'lfm2_moe', tinyConfig('lfm2_moe'));
});
