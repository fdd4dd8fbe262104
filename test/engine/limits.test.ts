// The device check createEngine runs before allocating: the model's bytes per weight format at
// real shapes, and the refusal of a model that does not fit an adapter's limits, with the smaller
// format that would. (test/engine/limits.gpu.test.ts runs it through createEngine on a device.)
import { describe, expect, it } from 'vitest';
import { checkDeviceFit, modelFootprint, SIZE_FORMATS } from '../../src/engine/limits.js';
import { DeviceLimitError } from '../../src/errors.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { withGenerationConfig } from '../../src/model/spec/generation.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { SCALE_MODELS, type ScaleShape } from '../fixtures/scale.js';

const specOf = (shape: ScaleShape): ModelSpec => {
  const m = SCALE_MODELS[shape];
  return withGenerationConfig(specFromConfig(m.config), m.generation);
};

/** Matrix and vector element counts of a spec, from the checkpoint's tensor list. */
function params(spec: ModelSpec): { matrices: number; vectors: number } {
  let matrices = 0;
  let vectors = 0;
  for (const shape of weightShapes(spec).values()) {
    const n = shape.reduce((a, b) => a * b, 1);
    if (shape.length === 2) matrices += n;
    else vectors += n;
  }
  return { matrices, vectors };
}

const KV = { context: 2048, kvFormat: 'f32' } as const;

describe('model footprint', () => {
  it('counts Qwen3-0.6B as its published 596M weights, at 16, 8.5, 4.5 and 2.625 bits', () => {
    const spec = specOf('qwen3-0.6b');
    const { matrices, vectors } = params(spec);
    expect(matrices).toBe(595_984_384); // 0.6B: 151936·1024 embedding (tied) + 28 layers of 15.7M
    expect(vectors).toBe(28 * (2 * 1024 + 2 * 128) + 1024);
    // Every Qwen3-0.6B matrix fills whole 256-element super-blocks, so the bits are exact.
    for (const [format, bits] of [
      ['f32', 32],
      ['f16', 16],
      ['int8', 8.5],
      ['int4', 4.5],
      ['int2', 2.625],
    ] as const)
      expect(modelFootprint(spec, format, KV).weights, format).toBe((matrices * bits) / 8 + 4 * vectors);
    const f = modelFootprint(spec, 'int4', KV);
    // K and V of 28 layers, 2048 positions of 8 heads of 128 f32.
    expect(f.kvCache).toBe(2 * 28 * 2048 * 8 * 128 * 4);
    expect(modelFootprint(spec, 'int4', { ...KV, kvFormat: 'f16' }).kvCache).toBe(f.kvCache / 2);
    expect(f.total).toBe(f.weights + f.kvCache + f.activations);
    expect(f.bound.map((b) => b.bytes)).toEqual([2048 * 8 * 128 * 4, 64 * 151936 * 4]);
  });

  it('sizes Qwen2.5-0.5B (QKV biases) and Llama-3.2-1B from their configs', () => {
    for (const shape of ['qwen2.5-0.5b', 'llama-3.2-1b'] as const) {
      const spec = specOf(shape);
      const { matrices } = params(spec);
      const f16 = modelFootprint(spec, 'f16', KV).weights;
      expect(f16).toBeGreaterThan(2 * matrices);
      expect(f16).toBeLessThan(2 * matrices * 1.01);
    }
    expect(params(specOf('qwen2.5-0.5b')).matrices).toBe(494_032_768 - 24 * 1152 - 24 * 2 * 896 - 896);
    expect(params(specOf('llama-3.2-1b')).matrices).toBe(1_235_814_400 - 16 * 2 * 2048 - 2048);
  });

  it('reads Gemma 3 270M and 1B, SmolLM3-3B, Phi-4-mini and LFM2-350M as published: their parameter counts, windows, partial rotary and RoPE-less layers', () => {
    const total = (shape: ScaleShape) => {
      const { matrices, vectors } = params(specOf(shape));
      return matrices + vectors;
    };
    // The counts the model cards and safetensors index state.
    expect(total('gemma-3-270m')).toBe(268_098_176);
    expect(total('gemma-3-1b')).toBe(999_885_952);
    expect(total('smollm3-3b')).toBe(3_075_098_624);
    expect(total('phi-4-mini')).toBe(3_836_021_760);
    // 10 short-convolution and 6 attention layers; the MLP 6656 → 4437 → 4608 (block_multiple_of).
    expect(total('lfm2-350m')).toBe(354_483_968);
    expect(specOf('lfm2-350m').intermediate).toBe(4608);
    const g = specOf('gemma-3-1b');
    expect([g.slidingWindow, g.headDim, g.attentionScale]).toEqual([512, 256, 1 / 16]);
    expect(g.slidingLayers!.filter((s) => !s).length).toBe(4); // layers 6, 12, 18, 24 are global
    expect(g.eosIds).toEqual([1, 106]);
    expect(specOf('smollm3-3b').noRopeLayers!.filter(Boolean).length).toBe(9);
    expect(specOf('phi-4-mini').rope.rotaryDim).toBe(96);
    // Qwen3.5-0.8B's text model: 18 Gated DeltaNet layers and 6 of gated attention (every fourth).
    const q = specOf('qwen3.5-0.8b');
    expect(q.layerKinds!.filter((k) => k === 'deltanet').length).toBe(18);
    expect([q.family, q.headDim, q.rope.rotaryDim, q.tiedEmbeddings]).toEqual(['qwen3_5', 256, 64, true]);
    console.log(`[scale] qwen3.5-0.8b: ${total('qwen3.5-0.8b')} parameters`);
    // The 2B: the same layer plan at twice the width, its MLP 6144.
    const q2 = specOf('qwen3.5-2b');
    expect(q2.layerKinds).toEqual(q.layerKinds);
    expect([q2.hidden, q2.intermediate, q2.headDim, q2.tiedEmbeddings]).toEqual([2048, 6144, 256, true]);
    expect(total('qwen3.5-2b')).toBe(1_881_825_088);
  });
});

describe('checkDeviceFit', () => {
  const spec = specOf('qwen3-0.6b');
  const roomy = { maxBufferSize: 2 ** 31, maxStorageBufferBindingSize: 2 ** 30, deviceMemory: 2 ** 34 };

  it('passes a model that fits', () => {
    expect(() => checkDeviceFit(spec, 'f16', KV, roomy)).not.toThrow();
  });

  it('refuses a model over the memory estimate, naming bytes per format and a format that fits', () => {
    const sizes = Object.fromEntries(SIZE_FORMATS.map((f) => [f, modelFootprint(spec, f, KV).total]));
    const deviceMemory = Math.floor((sizes.int8! + sizes.f16!) / 2); // f16 does not fit, int8 does
    const err = (() => {
      try {
        checkDeviceFit(spec, 'f16', KV, { ...roomy, deviceMemory });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(DeviceLimitError);
    expect(err).toMatchObject({
      limit: 'device memory',
      needed: sizes.f16,
      available: deviceMemory,
      bytesPerFormat: sizes,
      fits: 'int8',
    });
    expect(String(err)).toMatch(
      /over the adapter's device memory.*f16 .*MiB.*int4 .*MiB.*quant: 'int8' would fit/,
    );
  });

  it('adds a companion model (the drafter) to the total and to the buffers bound whole', () => {
    const target = modelFootprint(spec, 'f16', KV);
    const draft = modelFootprint(spec, 'int4', KV);
    const companion = { what: 'self-draft at int4', footprint: draft };
    expect(() =>
      checkDeviceFit(spec, 'f16', KV, { ...roomy, deviceMemory: target.total }, companion),
    ).toThrow(DeviceLimitError);
    expect(() =>
      checkDeviceFit(spec, 'f16', KV, { ...roomy, deviceMemory: target.total + draft.total }, companion),
    ).not.toThrow();
    const deviceMemory = target.total + Math.floor(draft.total / 2);
    const err = (() => {
      try {
        checkDeviceFit(spec, 'f16', KV, { ...roomy, deviceMemory }, companion);
      } catch (e) {
        return e;
      }
    })();
    // int8 beside the same draft fits where f16 does not.
    expect(err).toMatchObject({ limit: 'device memory', needed: target.total + draft.total, fits: 'int8' });
    expect(String(err)).toMatch(/with its self-draft at int4/);
    // A companion's buffer over the binding limit is named as the companion's (Llama's vocabulary,
    // 128256, keeps the target's own logits under the limit that Qwen3's 151936 exceeds).
    const small = { ...roomy, maxStorageBufferBindingSize: draft.bound[1]!.bytes - 4 };
    const big = { what: 'draft model x at f16', footprint: draft };
    expect(() =>
      checkDeviceFit(specOf('llama-3.2-1b'), 'int4', { context: 64, kvFormat: 'f32' }, small, big),
    ).toThrow(/draft model x at f16: logits/);
  });

  it('refuses a KV cache over the binding limit, where no weight format helps', () => {
    // A phone-class limit: 128 MiB bindings; one layer's K at 40960 positions is 160 MiB.
    const limits = { ...roomy, maxStorageBufferBindingSize: 2 ** 27 };
    const long = { context: 40960, kvFormat: 'f32' } as const;
    const err = (() => {
      try {
        checkDeviceFit(spec, 'int4', long, limits);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toMatchObject({
      name: 'DeviceLimitError',
      limit: 'maxStorageBufferBindingSize',
      needed: 40960 * 8 * 128 * 4,
      available: 2 ** 27,
      fits: undefined,
    });
    expect(String(err)).toMatch(/k_cache \[40960, 8, 128\] f32.*smaller contextLength/);
    // An f16 cache of the same context fits (80 MiB).
    expect(() => checkDeviceFit(spec, 'int4', { ...long, kvFormat: 'f16' }, limits)).not.toThrow();
    // maxBufferSize is checked too.
    expect(() => checkDeviceFit(spec, 'int4', KV, { ...roomy, maxBufferSize: 2 ** 20 })).toThrow(
      /maxBufferSize/,
    );
  });
});
