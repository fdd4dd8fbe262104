import { weightShapes } from '../formats/layout.js';
import type { ModelSpec } from '../formats/spec.js';
import { mapWeights, type Tensor, type WeightSource } from './weights.js';

/**
 * A small seeded generator of uniform floats in [0, 1) (mulberry32): deterministic across hosts, so
 * a CPU reference test and a GPU test can build the same random model from the same seed.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Random weights for every tensor a spec needs, as a {@link WeightSource}: projections uniform in
 * ±1/sqrt(fan-in) so activations stay O(1) through the layers, the embedding and LM head in ±1,
 * norm weights in 1 ± 0.25 (so a broken norm shows), biases in ±0.1. For tests of the forward pass.
 */
export function randomWeights(spec: ModelSpec, seed: number): WeightSource {
  const rand = seededRandom(seed);
  const record: Record<string, Tensor> = {};
  for (const [name, shape] of weightShapes(spec)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const last = shape[shape.length - 1]!;
    const isNorm = name.endsWith('norm.weight');
    const isTable = name === 'model.embed_tokens.weight' || name === 'lm_head.weight';
    const range = isNorm ? 0.25 : name.endsWith('.bias') ? 0.1 : isTable ? 1 : 1 / Math.sqrt(last);
    for (let i = 0; i < data.length; i++) data[i] = (isNorm ? 1 : 0) + (2 * rand() - 1) * range;
    record[name] = { shape, data };
  }
  return mapWeights(record);
}

const tinyBase = { maxPositions: 64, rmsEps: 1e-6, bosId: undefined, eosIds: [] } as const;

/**
 * Tiny specs covering each family's switches, for tests of forward passes: `llama` with Llama 3
 * RoPE scaling (its frequencies fall in all three bands) and GQA; `qwen2` with q/k/v biases, tied
 * embeddings and GQA; `qwen3` with q/k-norm, headDim different from hidden / heads and one KV head.
 * Sizes are deliberately not powers of two.
 */
export const tinySpecs: Readonly<Record<'llama' | 'qwen2' | 'qwen3', ModelSpec>> = {
  llama: {
    ...tinyBase,
    family: 'llama',
    vocabSize: 37,
    hidden: 32,
    intermediate: 40,
    layers: 2,
    heads: 4,
    kvHeads: 2,
    headDim: 8,
    rope: {
      theta: 500,
      layout: 'half',
      scaling: { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 },
    },
    tiedEmbeddings: false,
    qkvBias: false,
    qkNorm: false,
  },
  qwen2: {
    ...tinyBase,
    family: 'qwen2',
    vocabSize: 41,
    hidden: 36,
    intermediate: 44,
    layers: 2,
    heads: 6,
    kvHeads: 2,
    headDim: 6,
    rope: { theta: 10000, layout: 'half' },
    tiedEmbeddings: true,
    qkvBias: true,
    qkNorm: false,
  },
  qwen3: {
    ...tinyBase,
    family: 'qwen3',
    vocabSize: 29,
    hidden: 24,
    intermediate: 36,
    layers: 2,
    heads: 3,
    kvHeads: 1,
    headDim: 10,
    rope: { theta: 1_000_000, layout: 'half' },
    tiedEmbeddings: true,
    qkvBias: false,
    qkNorm: true,
  },
};
