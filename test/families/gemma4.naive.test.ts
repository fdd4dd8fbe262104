// Gemma 4's reference forward (weft's blocks: ple, attention with two head sizes and shared KV,
// the MLP, layerend) against the independent f64 implementation written from Transformers'
// modeling_gemma4.py (test/fixtures/naive-gemma4.ts), on tiny odd-shaped configs whose sliding
// windows are crossed and whose KV-shared layers run: logits within f32 rounding, greedy ids equal.
import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { configFromSpec, modelBlocks, specFromConfig } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { kvSourceLayer, layerSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GEMMA4_MOE, GEMMA4_PLE, GEMMA4_WRAPPED, randomGemma4Weights } from '../fixtures/gemma4-config.js';
import { gemma4TextConfig, naiveGemma4 } from '../fixtures/naive-gemma4.js';
import { configFixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

type Config = Record<string, unknown>;

const argmax = (row: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};

/** 16 ids below every fixture's vocabulary (64): past each window (at most 6). */
const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21, 63, 7, 50, 2];

const CONFIGS: [string, Config][] = [
  ['per-layer inputs, 3 shared layers', GEMMA4_PLE],
  ['wrapped, K = V, RoPE factor 2', GEMMA4_WRAPPED],
  ['the weft fixture', tinyConfig('gemma4')],
];

describe('Gemma 4 reference forward vs the independent implementation', () => {
  for (const [label, config] of CONFIGS) {
    for (const seed of [41, 42]) {
      it(`${label}, seed ${seed}: logits agree, greedy ids equal`, () => {
        const spec = specFromConfig(config);
        const source = randomGemma4Weights(gemma4TextConfig(config) ?? config, seed);
        const want = naiveGemma4(gemma4TextConfig(config), source, PROMPT);
        const got = new ReferenceRunner(spec, source, { capacity: 64 }).logitsFor(PROMPT);
        const V = spec.vocabSize;
        let diff = 0;
        let scale = 0;
        want.forEach((row, t) => {
          row.forEach((w, i) => {
            diff = Math.max(diff, Math.abs(got[t * V + i]! - w));
            scale = Math.max(scale, Math.abs(w));
          });
        });
        expect(scale).toBeGreaterThan(0.5);
        // f32 rounding over up to seven layers of width ≤ 128: a few 1e-6 of the scale.
        expect(diff).toBeLessThanOrEqual(2e-5 * scale);
        expect(want.map((_, t) => argmax(got.subarray(t * V, (t + 1) * V)))).toEqual(want.map(argmax));
      });
    }
  }

  it('the fixtures exercise what Gemma 4 adds: two head sizes, shared KV, wide MLPs, per-layer inputs', () => {
    const spec = specFromConfig(GEMMA4_PLE);
    expect(Array.from({ length: spec.layers }, (_, l) => layerSpec(spec, l).headDim)).toEqual([
      16, 16, 32, 16, 16, 32, 32,
    ]);
    expect(Array.from({ length: spec.layers }, (_, l) => kvSourceLayer(spec, l))).toEqual([
      0, 1, 2, 3, 3, 2, 2,
    ]);
    expect(Array.from({ length: spec.layers }, (_, l) => layerSpec(spec, l).intermediate)).toEqual([
      40, 40, 40, 40, 80, 80, 80,
    ]);
    expect(spec.perLayerInput).toEqual({ width: 8, vocab: 96 });
    expect(spec.logitSoftcap).toBe(30);
    const wrapped = specFromConfig(GEMMA4_WRAPPED);
    expect(wrapped.fullAttention).toEqual({ headDim: 32, kvHeads: 1, valueIsKey: true });
    expect(wrapped.rope.scaling).toEqual({ type: 'proportional', rotatedPairs: 3, factor: 2 });
  });

  it('config.json written from a spec reads back as the same spec', () => {
    for (const [, config] of CONFIGS) {
      const spec = specFromConfig(config);
      expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
    }
  });

  // The 26B-A4B's kind of layer: a mixture beside the dense MLP (the router on the residual stream
  // through its scaled weightless norm, per-expert scales, each branch's output normed, the sum
  // normed again), K = V on full layers, an untied head. Loaded as published (the experts fused
  // as `experts.gate_up_proj` and `experts.down_proj`), so the fused view is exercised too.
  for (const seed of [41, 42]) {
    it(`the mixture beside the dense MLP (the 26B-A4B's layers), as published, seed ${seed}: logits agree, greedy ids equal`, async () => {
      const source = randomGemma4Weights(GEMMA4_MOE, seed);
      const { files } = configFixtureFiles(GEMMA4_MOE, seed);
      const stored = Object.entries(source.tensors).map(([name, t]) => ({
        name,
        shape: [...t.shape],
        data: t.data,
      }));
      files.set('model.safetensors', safetensorsBytes(stored, 'F32'));
      const opened = await openModel(memoryModelFiles('gemma4-moe', files));
      expect(opened.spec.moe).toMatchObject({ experts: 5, topK: 2, besideDense: true, perExpertScale: true });
      const want = naiveGemma4(GEMMA4_MOE, source, PROMPT);
      const weights = mapWeights(await readAllF32(opened.weights));
      const got = new ReferenceRunner(opened.spec, weights, { capacity: 64 }).logitsFor(PROMPT);
      const V = opened.spec.vocabSize;
      let diff = 0;
      let scale = 0;
      want.forEach((row, t) => {
        row.forEach((w, i) => {
          diff = Math.max(diff, Math.abs(got[t * V + i]! - w));
          scale = Math.max(scale, Math.abs(w));
        });
      });
      expect(scale).toBeGreaterThan(0.5);
      expect(diff).toBeLessThanOrEqual(2e-5 * scale);
      expect(want.map((_, t) => argmax(got.subarray(t * V, (t + 1) * V)))).toEqual(want.map(argmax));
    });
  }

  it('a mixture beside a dense MLP without sandwich norms is refused on the GPU, by name (Gemma 4 runs: gemma4-moe.gpu.test.ts)', async () => {
    const spec = specFromConfig(GEMMA4_MOE);
    expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
    const { placeMoe } = await import('../../src/model/blocks/moe/gpu.js');
    const block = modelBlocks(spec).find((b) => b.kind === 'moe')!;
    // The check comes before anything else is asked of the placer: one with only the spec will do.
    const placer = { spec: { ...spec, sandwichNorms: false } } as unknown as Parameters<typeof placeMoe>[0];
    await expect(placeMoe(placer, block as Parameters<typeof placeMoe>[1])).rejects.toThrow(
      /router\.proj\.weight: a mixture beside a dense MLP without sandwich norms \(gemma4\) does not run on the GPU/,
    );
  });
});
