// llama.cpp itself on the qwen3_moe GGUF `weft export-gguf` writes: see test/helpers/moe-wllama.ts.
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

it('llama.cpp (wllama) decodes the exported qwen3_moe GGUF to the reference’s greedy ids', async () => {
  await expectMoeWllamaParity(page, pageUrl, 'qwen3_moe', {
    ...tinyConfig('qwen3_moe'),
    mlp_only_layers: [],
  });
});
