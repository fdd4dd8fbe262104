// llama.cpp itself on the gemma4 GGUFs `weft export-gguf` writes: wllama (llama.cpp in
// WebAssembly, CPU) loads the f32 file of a tiny random Gemma 4 in headless Chromium and decodes 32
// tokens greedily; its ids are the CPU reference's on the same file. The prompt is far longer than
// the 6-token window; the model has sliding and full layers of two head sizes, the full ones with
// proportional RoPE (llama.cpp's `rope_freqs.weight`), KV-shared layers with double-wide MLPs,
// per-layer inputs, layer scalars and soft-capped logits; a second one has V = K on its full layers
// with KV heads of their own (per-layer `head_count_kv`).
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GEMMA4_MOE } from '../fixtures/gemma4-config.js';
import { configFixtureFiles, tinyGemma4LlamaCppConfig } from '../fixtures/write.js';
import { expectMoeWllamaParity, MOE_UNLIKE } from '../helpers/moe-wllama.js';
import { greedyAllowed, setUpWllamaPage, unprintableIds } from '../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

/** 81 ids in the tiny byte-level tokenizer: far past the tiny Gemma 4's 6-token window. */
const LONG_TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

/**
 * Exports `config`'s random checkpoint as an f32 GGUF, has wllama decode 32 tokens greedily after
 * {@link LONG_TEXT}, and expects the CPU reference's ids on the same file. Each of `unlike` changes
 * the spec in a way llama.cpp might have run it: the reference must give other ids then, so that
 * the match shows llama.cpp ran what the spec says.
 */
async function sameGreedy(
  label: string,
  config: Record<string, unknown>,
  unlike: Record<string, (spec: ModelSpec) => ModelSpec>,
) {
  const tokens = 32;
  const { files } = configFixtureFiles(config, 11);
  const bytes = await exportModelGguf(memoryModelFiles(label, files), 'F32');
  const model = await openModel(memoryModelFiles(`${label}.gguf`, new Map([[`${label}.gguf`, bytes]])));
  const weights = mapWeights(await readAllF32(model.weights));
  const runner = (spec: ModelSpec) => new ReferenceRunner(spec, weights, { capacity: 128 });
  // Only printable ids may be generated (see unprintableIds).
  const banned = unprintableIds(model.spec.vocabSize);
  const greedy = (spec: ModelSpec, ids: number[]) => greedyAllowed(runner(spec), ids, tokens, banned);
  const ggufUrl = new URL(`/${label}.gguf`, pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(LONG_TEXT);
  expect(ids.length).toBeGreaterThan(model.spec.slidingWindow! + 8);
  const want = greedy(model.spec, ids);
  for (const [what, change] of Object.entries(unlike))
    expect(greedy(change(model.spec), ids), what).not.toEqual(want);
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    LONG_TEXT,
    tokens,
    banned,
  ] as const);
  console.log(
    `[wllama ${label}] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
  );
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
  expect(got.text).toBe(model.tokenizer.decode(want));
}

/** What llama.cpp might have run in place of the spec's Gemma 4 specifics. */
const UNLIKE: Record<string, (spec: ModelSpec) => ModelSpec> = {
  // A window past the context (no window at all would make every layer full, of the wider head).
  'no window': (s) => ({ ...s, slidingWindow: 4096 }),
  'the softmax scale 1/√head_dim': (s) => ({ ...s, attentionScale: undefined }),
  'the full layers’ RoPE over every pair': (s) => ({ ...s, rope: { theta: s.rope.theta, layout: 'half' } }),
  'no V norm': (s) => ({ ...s, valueNorm: undefined }),
  'no layer scalars': (s) => ({ ...s, layerScalar: undefined }),
};

it('llama.cpp (wllama) decodes the exported gemma4 GGUF past its window to the reference’s greedy ids', async () => {
  await sameGreedy('g4', tinyGemma4LlamaCppConfig(), UNLIKE);
});

it('llama.cpp reads V = K on the full layers and their KV heads per layer', async () => {
  await sameGreedy('g4kv', tinyGemma4LlamaCppConfig(true), UNLIKE);
});

it('llama.cpp decodes the exported gemma4 mixture (26B-A4B’s ffn_gate_up_exps, router and expert scales) to the reference’s greedy ids', async () => {
  const moe = (s: ModelSpec) => s.moe!;
  // GEMMA4_MOE over the tiny tokenizer's vocab. Renormalising the top k is no test here: the
  // experts' sum is RMS-normed (post_feedforward_layernorm_2), which undoes its scale.
  await expectMoeWllamaParity(
    page,
    pageUrl,
    'g4moe',
    { ...GEMMA4_MOE, vocab_size: 512, vocab_size_per_layer_input: 512 },
    {
      'first choice only': MOE_UNLIKE['first choice only']!,
      'no per-expert scale': ({ spec, tensors }) => ({
        spec: { ...spec, moe: { ...moe(spec), perExpertScale: false } },
        tensors,
      }),
      'the router unscaled': ({ spec, tensors }) => ({
        spec: { ...spec, moe: { ...moe(spec), scaledRouterNorm: false } },
        tensors,
      }),
      // ffn_gate_up_exps read as up then gate: each expert's gate and up swapped.
      'gate and up swapped': ({ spec, tensors }) => ({
        spec,
        tensors: Object.fromEntries(
          Object.entries(tensors).map(([name, t]) => [
            name.replace(
              /\.experts\.(\d+)\.(gate|up)_proj\./,
              (_, e: string, p: string) => `.experts.${e}.${p === 'gate' ? 'up' : 'gate'}_proj.`,
            ),
            t,
          ]),
        ),
      }),
    },
  );
});
