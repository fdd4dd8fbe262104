// A 30B-class mixture in a 4 GiB GPU: Qwen3-30B-A3B's published config through the footprint and
// the device-fit check, at each weight format, with and without an expert budget (the budget's
// cache and paging run on the tiny models: test/helpers/moe-gpu.ts).
import { describe, expect, it } from 'vitest';
import { checkDeviceFit, modelFootprint, SIZE_FORMATS } from '../../src/engine/limits.js';
import { DeviceLimitError } from '../../src/errors.js';
import { specFromConfig } from '../../src/model/families/index.js';

/** Qwen3-30B-A3B's config.json (the keys weft reads). */
const QWEN3_30B_A3B = {
  architectures: ['Qwen3MoeForCausalLM'],
  model_type: 'qwen3_moe',
  vocab_size: 151936,
  hidden_size: 2048,
  intermediate_size: 6144,
  moe_intermediate_size: 768,
  num_hidden_layers: 48,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  head_dim: 128,
  num_experts: 128,
  num_experts_per_tok: 8,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  max_position_embeddings: 40960,
  tie_word_embeddings: false,
  hidden_act: 'silu',
  bos_token_id: 151643,
  eos_token_id: 151645,
};

const GiB = 2 ** 30;
const kv = { context: 4096, kvFormat: 'f16' as const };
const limits = { maxBufferSize: 2 * GiB, maxStorageBufferBindingSize: 2 * GiB, deviceMemory: 4 * GiB };

describe('a 30B-class mixture in a 4 GiB GPU budget', () => {
  const spec = specFromConfig(QWEN3_30B_A3B);

  it('prints its footprint at each format; at int4 its experts are 9 in 10 of its bytes', () => {
    for (const f of SIZE_FORMATS) {
      const all = modelFootprint(spec, f, kv);
      const none = modelFootprint(spec, f, { ...kv, expertBudget: 0 });
      console.log(
        `[qwen3-30b-a3b] ${f}: ${(all.total / GiB).toFixed(2)} GiB on the GPU, ${((all.total - none.total) / GiB).toFixed(2)} GiB of it experts`,
      );
    }
    const all = modelFootprint(spec, 'int4', kv);
    const none = modelFootprint(spec, 'int4', { ...kv, expertBudget: 0 });
    expect((all.total - none.total) / all.total).toBeGreaterThan(0.9);
  });

  it('does not fit 4 GiB at int4 with every expert (the error says which expert budget would); fits with that budget, or 2.5 GiB', () => {
    let err: unknown;
    try {
      checkDeviceFit(spec, 'int4', kv, limits);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DeviceLimitError);
    const message = (err as Error).message;
    expect(message).toMatch(/device memory/);
    const budget = Number(/expertBudget: (\d+)/.exec(message)?.[1]);
    console.log(`[qwen3-30b-a3b] ${message}`);
    expect(budget).toBeGreaterThan(2.5 * GiB);
    // That budget, and a round 3 GiB, fit.
    expect(() => checkDeviceFit(spec, 'int4', { ...kv, expertBudget: budget }, limits)).not.toThrow();
    expect(() => checkDeviceFit(spec, 'int4', { ...kv, expertBudget: 2.5 * GiB }, limits)).not.toThrow();
    const f = modelFootprint(spec, 'int4', { ...kv, expertBudget: 2.5 * GiB });
    expect(f.total).toBeLessThanOrEqual(4 * GiB);
    console.log(
      `[qwen3-30b-a3b] int4 with a 2.5 GiB expert budget: ${(f.total / GiB).toFixed(2)} GiB on the GPU`,
    );
  });
});
