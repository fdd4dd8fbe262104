// llama.cpp itself on the phi3 GGUF `weft export-gguf` writes: wllama (llama.cpp in WebAssembly,
// CPU) loads the f32 file of a tiny random Phi-3 (fused attn_qkv and gate | up ffn_up, partial
// rotary of 24 of 32, LongRoPE factors and attention factor) in headless Chromium and decodes 32
// tokens greedily; its ids are the CPU reference's on the same file.
//
// Which LongRoPE factors: llama.cpp takes the long ones when its context (n_ctx_seq, which it
// rounds up to a multiple of 256) passes `rope.scaling.original_context_length`
// (`llama_model::get_rope_factors`), and so does weft's engine (`ropeForContext`), for every
// position. The page's context is 128 (256 once rounded): with an original context of 512 both
// run the short factors, with one of 64 both run the long ones. The checkpoint has 2048 positions
// in all, for an attention factor of √(1 + ln 4 / ln 512) and √(1 + ln 32 / ln 64). Runs of the
// reference with the other factors, without the attention factor or without LongRoPE give other
// ids, so each match shows llama.cpp ran what the spec says.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { type ModelSpec, ropeForContext } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
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
const LONG_TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

/**
 * The tiny Phi-3 ({@link tinyConfig}) with an original context of `original` (see the note above)
 * and its own head: with random weights a tied head's greedy text leans on the last token's own row.
 */
const config = (original: number): Record<string, unknown> => ({
  ...tinyConfig('phi3'),
  max_position_embeddings: 2048,
  original_max_position_embeddings: original,
  tie_word_embeddings: false,
});

it.each([
  [512, 'short'],
  [64, 'long'],
] as const)(
  'llama.cpp (wllama) decodes the exported phi3 GGUF (original context %i: the %s factors) to the reference’s greedy ids',
  async (original, which) => {
    const { files } = configFixtureFiles(config(original), 11);
    const bytes = await exportModelGguf(memoryModelFiles('phi3', files), 'F32');
    const model = await openModel(memoryModelFiles('phi3.gguf', new Map([['phi3.gguf', bytes]])));
    expect(model.spec.maxPositions).toBe(2048);
    // What an engine of the page's context runs.
    const spec = ropeForContext(model.spec, 128);
    const scaling = spec.rope.scaling;
    if (scaling?.type !== 'longrope' || !scaling.long) throw new Error('expected LongRoPE with long factors');
    const lists = config(original).rope_scaling as Record<string, number[]>;
    const [runs, other] =
      which === 'long'
        ? [lists.long_factor!, lists.short_factor!]
        : [lists.short_factor!, lists.long_factor!];
    expect(scaling.factors).toEqual(runs.map(Math.fround));
    const weights = mapWeights(await readAllF32(model.weights));
    const runner = (s: ModelSpec) => new ReferenceRunner(s, weights, { capacity: 128 });
    // Only printable ids may be generated (see unprintableIds).
    const banned = unprintableIds(spec.vocabSize);
    const greedy = (ref: ReferenceRunner, ids: number[], n: number): number[] =>
      greedyAllowed(ref, ids, n, banned);
    const ggufUrl = new URL('/phi3.gguf', pageUrl).href;
    await page.route(ggufUrl, (route) =>
      route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
    );
    const ids = model.tokenizer.encode(LONG_TEXT);
    const tokens = 32;
    const want = greedy(runner(spec), ids, tokens);
    const unlike: Record<string, ModelSpec> = {
      [`the ${which === 'long' ? 'short' : 'long'} factors`]: {
        ...spec,
        rope: { ...spec.rope, scaling: { ...scaling, factors: other.map(Math.fround) } },
      },
      'no attention factor': { ...spec, rope: { ...spec.rope, scaling: { ...scaling, attentionFactor: 1 } } },
      'no LongRoPE': { ...spec, rope: { theta: spec.rope.theta, layout: 'half', rotaryDim: 24 } },
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
      `[wllama phi3, ${which} factors] prompt ${ids.length} ids, llama.cpp saw ${got.promptTokens}; weft ${want}; llama.cpp ${got.ids} ${JSON.stringify(got.text)}`,
    );
    expect(got.promptTokens).toBe(ids.length);
    expect(got.ids).toEqual(want);
    expect(got.text).toBe(model.tokenizer.decode(want));
  },
);
