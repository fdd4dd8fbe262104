// llama.cpp itself on the mistral3 GGUF `weft export-gguf` writes: wllama (llama.cpp in WebAssembly,
// CPU) loads the f32 file of a tiny random Ministral 3 (the published layout's tensors, YaRN with
// an attention factor from mscale_all_dim, Llama 4's query temperature as
// `attention.temperature_scale`) in headless Chromium and decodes 32 tokens greedily after an
// 81-token prompt; its ids are the CPU reference's on the same file (with llama.cpp's f16 cache). The temperature's floor scale
// is YaRN's original context of 32, so the prompt and the tokens cross three steps (beta 0.4 here,
// so that each shows). Runs of the reference without YaRN, without its attention factor or
// without the temperature give other ids, so the match shows llama.cpp ran what the spec says.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { ministral3FixtureFiles, tinyConfig } from '../fixtures/write.js';
import { greedyAllowed, setUpWllamaPage, unprintableIds } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

/** 81 ids in the tiny byte-level tokenizer (few of its merges apply). */
const LONG_TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

it('llama.cpp (wllama) decodes the exported mistral3 GGUF to the reference’s greedy ids (YaRN, temperature steps)', async () => {
  const text = tinyConfig('ministral3');
  const rp = text.rope_parameters as Record<string, unknown>;
  const { files } = ministral3FixtureFiles(11, {
    ...text,
    rope_parameters: { ...rp, llama_4_scaling_beta: 0.4 },
  });
  const bytes = await exportModelGguf(memoryModelFiles('ministral3', files), 'F32');
  const model = await openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));
  const spec = model.spec;
  const scaling = spec.rope.scaling;
  if (scaling?.type !== 'yarn') throw new Error('expected YaRN');
  expect(spec.queryTemperature?.floorScale).toBe(32);
  expect(spec.queryTemperature?.beta).toBeCloseTo(0.4, 6);
  const weights = mapWeights(await readAllF32(model.weights));
  // llama.cpp keeps its KV cache in f16 (its default cache type): so does the reference here. With
  // an f32 cache the reference's 28th pick differs, a near tie (it leads llama.cpp's by 0.018 in
  // logits, 8.18 against 8.16); the f16 reference gives llama.cpp's 32 ids.
  const runner = (s: ModelSpec) => new ReferenceRunner(s, weights, { capacity: 128, kvFormat: 'f16' });
  // Only printable ids may be generated (see unprintableIds).
  const banned = unprintableIds(spec.vocabSize);
  const greedy = (ref: ReferenceRunner, ids: number[], n: number): number[] =>
    greedyAllowed(ref, ids, n, banned);
  const ggufUrl = new URL('/ministral3.gguf', pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(LONG_TEXT);
  const tokens = 32;
  const want = greedy(runner(spec), ids, tokens);
  const { queryTemperature: _, ...noTemperature } = spec;
  const unlike: Record<string, ModelSpec> = {
    'no YaRN': { ...spec, rope: { theta: spec.rope.theta, layout: spec.rope.layout } },
    'no attention factor': { ...spec, rope: { ...spec.rope, scaling: { ...scaling, attentionFactor: 1 } } },
    'no query temperature': noTemperature,
  };
  for (const [what, changed] of Object.entries(unlike))
    expect(greedy(runner(changed), ids, tokens), what).not.toEqual(want);
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    LONG_TEXT,
    tokens,
    banned,
  ] as const);
  console.log(
    `[wllama mistral3] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
  );
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
  expect(got.text).toBe(model.tokenizer.decode(want));
});
