// llama.cpp itself on the lfm2 GGUF `weft export-gguf` writes: wllama (llama.cpp in WebAssembly,
// CPU) loads the f32 file of a tiny random LFM2 (conv, conv, attention, conv; a convolution of
// width 3) in headless Chromium and decodes 32 tokens greedily; its ids are the CPU reference's on
// the same file. The reference must give other ids where the file's convolution were read another
// way (taps reversed, B and C swapped, no window) or its RoPE paired otherwise or left out, so the
// match shows llama.cpp ran the short convolution, its state across tokens and the attention as the
// reference does.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32, type Tensor } from '../../src/model/weights.js';
import { configFixtureFiles, tinyConfig } from '../fixtures/write.js';
import { greedyAllowed, setUpWllamaPage, unprintableIds } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

/** 81 ids in the tiny byte-level tokenizer (few of its merges apply). */
const TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

type Tensors = Record<string, Tensor>;

/** `tensors` with every conv layer's `conv.conv.weight` [H, 1, L] changed by `change` (per channel). */
function eachConv(tensors: Tensors, change: (taps: Float32Array) => Float32Array): Tensors {
  const out = { ...tensors };
  for (const [name, t] of Object.entries(tensors)) {
    if (!name.endsWith('.conv.conv.weight')) continue;
    const L = t.shape[2]!;
    const data = new Float32Array(t.data.length);
    for (let c = 0; c < t.data.length / L; c++) data.set(change(t.data.subarray(c * L, (c + 1) * L)), c * L);
    out[name] = { shape: t.shape, data };
  }
  return out;
}

/** `tensors` with the B and C rows of every conv layer's in_proj [3H, H] swapped. */
function swapBC(tensors: Tensors, H: number): Tensors {
  const out = { ...tensors };
  for (const [name, t] of Object.entries(tensors)) {
    if (!name.endsWith('.conv.in_proj.weight')) continue;
    const data = t.data.slice();
    data.set(t.data.subarray(H * H, 2 * H * H), 0);
    data.set(t.data.subarray(0, H * H), H * H);
    out[name] = { shape: t.shape, data };
  }
  return out;
}

it('llama.cpp (wllama) decodes the exported lfm2 GGUF to the reference’s greedy ids', async () => {
  const label = 'lfm2';
  const { files } = configFixtureFiles(tinyConfig('lfm2'), 11);
  const bytes = await exportModelGguf(memoryModelFiles(label, files), 'F32');
  const model = await openModel(memoryModelFiles(`${label}.gguf`, new Map([[`${label}.gguf`, bytes]])));
  const tensors = await readAllF32(model.weights);
  const runner = (spec: ModelSpec, t: Tensors) => new ReferenceRunner(spec, mapWeights(t), { capacity: 128 });
  // Only printable ids may be generated (see unprintableIds).
  const banned = unprintableIds(model.spec.vocabSize);
  const greedy = (ref: ReferenceRunner, ids: number[], n: number): number[] =>
    greedyAllowed(ref, ids, n, banned);
  const ggufUrl = new URL(`/${label}.gguf`, pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(TEXT);
  const tokens = 32;
  const want = greedy(runner(model.spec, tensors), ids, tokens);
  // A random model's greedy text that moves: not one token repeated.
  expect(new Set(want).size).toBeGreaterThan(4);
  const unlike: Record<string, ReferenceRunner> = {
    'conv taps reversed': runner(
      model.spec,
      eachConv(tensors, (w) => w.slice().reverse()),
    ),
    'B and C swapped': runner(model.spec, swapBC(tensors, model.spec.hidden)),
    'no conv window (only the current tap)': runner(
      model.spec,
      eachConv(tensors, (w) => w.map((v, j) => (j === w.length - 1 ? v : 0))),
    ),
    'interleaved (NORM) RoPE pairs': runner(
      { ...model.spec, rope: { ...model.spec.rope, layout: 'interleaved' } },
      tensors,
    ),
    'no RoPE': runner({ ...model.spec, noRopeLayers: Array(model.spec.layers).fill(true) }, tensors),
  };
  for (const [what, ref] of Object.entries(unlike)) expect(greedy(ref, ids, tokens), what).not.toEqual(want);
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    TEXT,
    tokens,
    banned,
  ] as const);
  console.log(
    `[wllama ${label}] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
  );
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
  expect(got.text).toBe(model.tokenizer.decode(want));
});
