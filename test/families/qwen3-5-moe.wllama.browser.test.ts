// llama.cpp itself on the qwen3_5_moe GGUF `weft export-gguf` writes: see test/helpers/moe-wllama.ts.
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

it('llama.cpp (wllama) decodes the exported qwen3_5_moe GGUF to the reference’s greedy ids', async () => {
  const config = tinyConfig('qwen3_5_moe');
  // llama.cpp's qwen35moe loader takes the DeltaNet value heads as wide as the key heads.
  const text = { ...(config.text_config as Record<string, unknown>), linear_value_head_dim: 16 };
  await expectMoeWllamaParity(page, pageUrl, 'qwen3_5_moe', { ...config, text_config: text });
});
