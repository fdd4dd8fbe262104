// llama.cpp itself on the qwen35 GGUF `weft export-gguf` writes: wllama (llama.cpp in WebAssembly,
// CPU) loads the f32 file of a Qwen3.5 fixture in headless Chromium and decodes greedily; its ids
// are the CPU reference's on the same file. The fixture's DeltaNet heads are 16 wide for keys and
// values alike: llama.cpp's qwen35 loader sizes ssm_norm by ssm.state_size (the key width).
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { qwen35FixtureFiles, tinyQwen35TextConfig } from '../fixtures/write.js';
import { greedyAllowed, setUpWllamaPage, unprintableIds } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

it('llama.cpp (wllama) decodes the exported qwen35 GGUF to the reference’s greedy ids', async () => {
  const config = { ...tinyQwen35TextConfig(), linear_value_head_dim: 16 };
  const { files } = qwen35FixtureFiles(11, config);
  const bytes = await exportModelGguf(memoryModelFiles('q35', files), 'F32');
  const model = await openModel(memoryModelFiles('q35.gguf', new Map([['q35.gguf', bytes]])));
  // 8 greedy tokens: a longer reply, or a second request whose prompt holds the first one's text,
  // ends in an error inside wllama's reading of the reply ("Invalid typed array length"), which a
  // request of the same size on other models does not (not chased further here).
  const ref = new ReferenceRunner(model.spec, mapWeights(await readAllF32(model.weights)), { capacity: 96 });
  // Only printable ids may be generated (see unprintableIds).
  const banned = unprintableIds(model.spec.vocabSize);
  const greedy = (ids: number[], n: number): number[] => greedyAllowed(ref, ids, n, banned);
  const ggufUrl = new URL('/q35.gguf', pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const text = 'the cat sat on the mat';
  const ids = model.tokenizer.encode(text);
  const want = greedy(ids, 32);
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    text,
    32,
    banned,
  ] as const);
  console.log(
    `[wllama] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
  );
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
  expect(got.text).toBe(model.tokenizer.decode(want));
});
