// llama.cpp (wllama, in headless Chromium) on the GGUF `weft export-gguf` writes for a tiny random
// mixture-of-experts config: its 32 greedy ids must be the CPU reference's on the same file, and the
// reference must give other ids where the routing were read another way (no renormalisation, the
// first choice only, or a family's own readings), so the match shows llama.cpp routed as weft does.
import type { Page } from 'playwright-core';
import { expect } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32, type Tensor } from '../../src/model/weights.js';
import { configFixtureFiles } from '../fixtures/write.js';
import { greedyAllowed, unprintableIds } from './wllama-parity.js';

const TEXT = 'a quick brown fox jumps over my lazy dog; pack my box with five dozen liquor jugs.';

/** A model as the reference runs it: its spec and its tensors. */
export interface ReferenceModel {
  readonly spec: ModelSpec;
  readonly tensors: Record<string, Tensor>;
}

/** Another reading of a model (its spec or its tensors changed). */
export type Unlike = (m: ReferenceModel) => ReferenceModel;

/**
 * Other readings of a mixture the reference must tell apart from the spec's: the routing weights
 * not renormalised, the first choice only.
 */
export const MOE_UNLIKE: Record<string, Unlike> = {
  'routing weights not renormalised': ({ spec, tensors }) => ({
    spec: { ...spec, moe: { ...spec.moe!, renormalize: false, routedScale: 1 } },
    tensors,
  }),
  'first choice only': ({ spec, tensors }) => ({
    spec: { ...spec, moe: { ...spec.moe!, topK: 1 } },
    tensors,
  }),
};

/**
 * Runs the parity check of `config` (family `label`) on `page`, served from `pageUrl`, the
 * reference telling the model apart from each of `unlike`.
 */
export async function expectMoeWllamaParity(
  page: Page,
  pageUrl: string,
  label: string,
  config: Record<string, unknown>,
  unlike: Record<string, Unlike> = MOE_UNLIKE,
): Promise<void> {
  const { files } = configFixtureFiles(config, 11);
  const bytes = await exportModelGguf(memoryModelFiles(label, files), 'F32');
  const model = await openModel(memoryModelFiles(`${label}.gguf`, new Map([[`${label}.gguf`, bytes]])));
  const tensors: Record<string, Tensor> = await readAllF32(model.weights);
  const runner = (spec: ModelSpec, t: Record<string, Tensor>) =>
    new ReferenceRunner(spec, mapWeights(t), { capacity: 128 });
  const banned = unprintableIds(model.spec.vocabSize);
  const greedy = (ref: ReferenceRunner, ids: number[], n: number) => greedyAllowed(ref, ids, n, banned);
  const ggufUrl = new URL(`/${label}.gguf`, pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(TEXT);
  const tokens = 32;
  const want = greedy(runner(model.spec, tensors), ids, tokens);
  expect(new Set(want).size).toBeGreaterThan(4);
  for (const [what, change] of Object.entries(unlike)) {
    const other = change({ spec: model.spec, tensors });
    expect(greedy(runner(other.spec, other.tensors), ids, tokens), what).not.toEqual(want);
  }
  // An f32 KV cache without flash attention in llama.cpp: with its f16 defaults, the qwen3_moe
  // fixture's rows drift from the reference's by enough (about 1e-3) to flip a router choice whose
  // two scores lie 1.5e-3 apart, 9 tokens in (measured; its 32 ids match with exact attention).
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b, true), [
    ggufUrl,
    TEXT,
    tokens,
    banned,
  ] as const);
  console.log(`[wllama ${label}] weft ${want}; llama.cpp ${got.ids}`);
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toEqual(want);
}
