// llama.cpp itself on the gemma3 and smollm3 GGUFs `weft export-gguf` writes: wllama (llama.cpp in
// WebAssembly, CPU) loads the f32 file of a tiny random checkpoint in headless Chromium and decodes
// 32 tokens greedily; its ids are the CPU reference's on the same file. Gemma 3's prompt is longer
// than its 64-token window, so the sliding layers drop keys; a second Gemma 3 slides in a period of
// 2 with a local RoPE base of its own, which llama.cpp reads from attention.sliding_window_pattern
// and rope.freq_base_swa.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import {
  configFixtureFiles,
  tinyConfig,
  tinyGemma3LlamaCppConfig,
  tinySmolLM3LlamaCppConfig,
} from '../fixtures/write.js';
import { greedyAllowed, setUpWllamaPage, unprintableIds } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

/** 81 ids in the tiny byte-level tokenizer (few of its merges apply): past Gemma's 64-token window. */
const LONG_TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

/**
 * Exports `config`'s random checkpoint as an f32 GGUF, has wllama decode `tokens` greedily after
 * `text`, and expects the CPU reference's ids on the same file. Each of `unlike` changes the spec
 * in a way llama.cpp might have run it (a window ignored, another pattern or RoPE base): the
 * reference must give other ids then, so that the match shows llama.cpp ran what the spec says.
 */
async function sameGreedy(
  label: string,
  config: Record<string, unknown>,
  text: string,
  tokens: number,
  unlike: Record<string, (spec: ModelSpec) => ModelSpec>,
) {
  const { files } = configFixtureFiles(config, 11);
  const bytes = await exportModelGguf(memoryModelFiles(label, files), 'F32');
  const model = await openModel(memoryModelFiles(`${label}.gguf`, new Map([[`${label}.gguf`, bytes]])));
  const weights = mapWeights(await readAllF32(model.weights));
  const runner = (spec: ModelSpec) => new ReferenceRunner(spec, weights, { capacity: 128 });
  // Only printable ids may be generated (see unprintableIds).
  const banned = unprintableIds(model.spec.vocabSize);
  const greedy = (ref: ReferenceRunner, ids: number[], n: number): number[] =>
    greedyAllowed(ref, ids, n, banned);
  const ggufUrl = new URL(`/${label}.gguf`, pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(text);
  const want = greedy(runner(model.spec), ids, tokens);
  for (const [what, change] of Object.entries(unlike))
    expect(greedy(runner(change(model.spec)), ids, tokens), what).not.toEqual(want);
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    text,
    tokens,
    banned,
  ] as const);
  console.log(
    `[wllama ${label}] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
  );
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
  expect(got.text).toBe(model.tokenizer.decode(want));
  return { ids, spec: model.spec };
}

/** Every layer global: the spec as llama.cpp would run a file whose window it ignored. */
const noWindow = (spec: ModelSpec): ModelSpec => ({ ...spec, slidingWindow: undefined });

it('llama.cpp (wllama) decodes the exported gemma3 GGUF past its sliding window to the reference’s greedy ids', async () => {
  const { ids, spec } = await sameGreedy('g3', tinyGemma3LlamaCppConfig(), LONG_TEXT, 32, {
    'no window': noWindow,
    'another softmax scale': (s) => ({ ...s, attentionScale: 1 / Math.sqrt(24) }),
  });
  expect(ids.length).toBeGreaterThan(spec.slidingWindow! + 8);
});

it('llama.cpp reads a gemma3 sliding period of 2 and a local RoPE base of its own', async () => {
  // Sliding, full, sliding; the local base 100 turns the sliding layers' RoPE far from 10000's.
  const config = {
    ...tinyConfig('gemma3'),
    query_pre_attn_scalar: 32,
    rope_local_base_freq: 100,
    tie_word_embeddings: false,
  };
  await sameGreedy('g3p2', config, LONG_TEXT, 32, {
    'no window': noWindow,
    'the default period 6': (s) => ({ ...s, slidingLayers: [true, true, true] }),
    'the default local base': (s) => ({ ...s, localRope: { theta: 10_000, layout: 'half' } }),
  });
});

it('llama.cpp (wllama) decodes the exported smollm3 GGUF to the reference’s greedy ids', async () => {
  await sameGreedy('smol', tinySmolLM3LlamaCppConfig(), LONG_TEXT, 32, {
    'RoPE in every layer': (s) => ({ ...s, noRopeLayers: undefined }),
  });
});
