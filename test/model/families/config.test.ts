import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../../src/formats/errors.js';
import { specFromConfig } from '../../../src/model/families/index.js';
import { withGenerationConfig } from '../../../src/model/spec/generation.js';

// Key fields of published config.json files (values copied from the Hugging Face repos named).
const llama32_1b = {
  model_type: 'llama',
  attention_bias: false,
  mlp_bias: false,
  hidden_size: 2048,
  intermediate_size: 8192,
  num_hidden_layers: 16,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  head_dim: 64,
  rms_norm_eps: 1e-5,
  rope_theta: 500000,
  rope_scaling: {
    factor: 32,
    high_freq_factor: 4,
    low_freq_factor: 1,
    original_max_position_embeddings: 8192,
    rope_type: 'llama3',
  },
  max_position_embeddings: 131072,
  tie_word_embeddings: true,
  vocab_size: 128256,
  bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009],
  hidden_act: 'silu',
};
const tinyllama = {
  model_type: 'llama',
  hidden_size: 2048,
  intermediate_size: 5632,
  num_hidden_layers: 22,
  num_attention_heads: 32,
  num_key_value_heads: 4,
  rms_norm_eps: 1e-5,
  max_position_embeddings: 2048,
  vocab_size: 32000,
  bos_token_id: 1,
  eos_token_id: 2,
  rope_scaling: null,
  tie_word_embeddings: false,
};
const mistral7b = {
  model_type: 'mistral',
  hidden_size: 4096,
  intermediate_size: 14336,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  max_position_embeddings: 32768,
  sliding_window: 4096,
  vocab_size: 32000,
  bos_token_id: 1,
  eos_token_id: 2,
};
const qwen25_05b = {
  model_type: 'qwen2',
  hidden_size: 896,
  intermediate_size: 4864,
  num_hidden_layers: 24,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  max_position_embeddings: 32768,
  sliding_window: 32768,
  use_sliding_window: false,
  tie_word_embeddings: true,
  vocab_size: 151936,
  bos_token_id: 151643,
  eos_token_id: 151643,
};
const qwen3_06b = {
  model_type: 'qwen3',
  hidden_size: 1024,
  intermediate_size: 3072,
  num_hidden_layers: 28,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 128,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  rope_scaling: null,
  max_position_embeddings: 40960,
  attention_bias: false,
  sliding_window: null,
  use_sliding_window: false,
  tie_word_embeddings: true,
  vocab_size: 151936,
  bos_token_id: 151643,
  eos_token_id: 151645,
};

const smollm2_135m = {
  model_type: 'llama',
  attention_bias: false,
  mlp_bias: false,
  hidden_size: 576,
  intermediate_size: 1536,
  num_hidden_layers: 30,
  num_attention_heads: 9,
  num_key_value_heads: 3,
  rms_norm_eps: 1e-5,
  rope_theta: 100000,
  rope_scaling: null,
  max_position_embeddings: 8192,
  tie_word_embeddings: true,
  vocab_size: 49152,
  bos_token_id: 0,
  eos_token_id: 0,
  hidden_act: 'silu',
};
const published = { llama32_1b, tinyllama, mistral7b, qwen25_05b, qwen3_06b, smollm2_135m };

function expectFormatError(fn: () => unknown, field: string, problem: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ModelFormatError);
    if (!(e instanceof ModelFormatError)) return;
    expect(e.file).toBe('config.json');
    expect(e.field).toBe(field);
    expect(e.message).toContain('config.json');
    expect(e.message).toContain(field);
    expect(e.message).toMatch(problem);
    return;
  }
  throw new Error('expected a ModelFormatError');
}

describe('specFromConfig', () => {
  it('reads Llama 3.2 1B with llama3 RoPE scaling and an EOS list', () => {
    const s = specFromConfig(llama32_1b);
    expect(s).toMatchObject({
      family: 'llama',
      hidden: 2048,
      intermediate: 8192,
      layers: 16,
      heads: 32,
      kvHeads: 8,
      headDim: 64,
      rmsEps: 1e-5,
      maxPositions: 131072,
      tiedEmbeddings: true,
      qkvBias: false,
      qkNorm: false,
      vocabSize: 128256,
      bosId: 128000,
      eosIds: [128001, 128008, 128009],
    });
    expect(s.rope).toEqual({
      theta: 500000,
      layout: 'half',
      scaling: { factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 },
    });
  });
  it('fills Transformers defaults for TinyLlama (no rope_theta, no head_dim)', () => {
    const s = specFromConfig(tinyllama);
    expect(s.rope).toEqual({ theta: 10000, layout: 'half' });
    expect(s.headDim).toBe(64);
    expect(s.tiedEmbeddings).toBe(false);
    expect(s.eosIds).toEqual([2]);
  });
  it('accepts the older `type` key for llama3 scaling', () => {
    const cfg = {
      ...llama32_1b,
      rope_scaling: { ...llama32_1b.rope_scaling, rope_type: undefined, type: 'llama3' },
    };
    expect(specFromConfig(cfg).rope.scaling).toMatchObject({ factor: 32 });
  });
  it('reads Mistral with its sliding window on every layer, at its whole context', () => {
    const s = specFromConfig(mistral7b);
    expect(s.family).toBe('mistral');
    expect(s.maxPositions).toBe(32768);
    expect(s.slidingWindow).toBe(4096);
    expect(s.slidingLayers).toBeUndefined();
    expect(s.headDim).toBe(128);
  });
  it('reads Qwen2.5 with q/k/v biases and ignores an unused sliding window', () => {
    const s = specFromConfig(qwen25_05b);
    expect(s).toMatchObject({
      family: 'qwen2',
      qkvBias: true,
      qkNorm: false,
      headDim: 64,
      maxPositions: 32768,
    });
    expect(s.eosIds).toEqual([151643]);
  });
  it('reads Qwen3 with QK-norm and an explicit head_dim unlike hidden/heads', () => {
    const s = specFromConfig(qwen3_06b);
    expect(s).toMatchObject({
      family: 'qwen3',
      qkNorm: true,
      qkvBias: false,
      headDim: 128,
      tiedEmbeddings: true,
    });
    expect(s.hidden / s.heads).toBe(64);
  });
});

describe('specFromConfig refusals', () => {
  it('refuses unsupported architectures', () => {
    expectFormatError(
      () => specFromConfig({ ...tinyllama, model_type: 'gpt2' }),
      'model_type',
      /unsupported/,
    );
    expectFormatError(
      () => specFromConfig({ ...tinyllama, model_type: undefined }),
      'model_type',
      /unsupported/,
    );
  });
  it('refuses missing and ill-typed fields', () => {
    expectFormatError(
      () => specFromConfig({ ...tinyllama, hidden_size: undefined }),
      'hidden_size',
      /missing/,
    );
    expectFormatError(() => specFromConfig({ ...tinyllama, hidden_size: '2048' }), 'hidden_size', /number/);
    expectFormatError(
      () => specFromConfig({ ...tinyllama, num_hidden_layers: 2.5 }),
      'num_hidden_layers',
      /integer/,
    );
    expectFormatError(() => specFromConfig({ ...tinyllama, rms_norm_eps: -1 }), 'rms_norm_eps', /> 0/);
    expectFormatError(
      () => specFromConfig({ ...tinyllama, eos_token_id: [2, 'x'] }),
      'eos_token_id',
      /integer/,
    );
    expectFormatError(
      () => specFromConfig({ ...tinyllama, tie_word_embeddings: 'yes' }),
      'tie_word_embeddings',
      /true or false/,
    );
    expectFormatError(
      () => specFromConfig({ ...tinyllama, num_key_value_heads: 3 }),
      'num_key_value_heads',
      /divide/,
    );
    expectFormatError(() => specFromConfig([1, 2]), '(root)', /object/);
  });
  it('refuses unsupported RoPE scalings, activations and llama attention biases', () => {
    expectFormatError(
      () => specFromConfig({ ...tinyllama, rope_scaling: { type: 'yarn', factor: 4 } }),
      'rope_scaling.type',
      /unsupported RoPE/,
    );
    expectFormatError(
      () => specFromConfig({ ...llama32_1b, rope_scaling: { rope_type: 'llama3', factor: 8 } }),
      'rope_scaling.low_freq_factor',
      /missing/,
    );
    expectFormatError(() => specFromConfig({ ...tinyllama, hidden_act: 'gelu' }), 'hidden_act', /silu/);
    expectFormatError(
      () => specFromConfig({ ...tinyllama, attention_bias: true }),
      'attention_bias',
      /attention biases \(q, k, v and o\) are not supported for llama/,
    );
  });
  it('refuses MLP biases, partial RoPE and pre-quantized checkpoints, naming the value', () => {
    expectFormatError(
      () => specFromConfig({ ...llama32_1b, mlp_bias: true }),
      'mlp_bias',
      /= true: MLP biases/,
    );
    expectFormatError(
      () => specFromConfig({ ...qwen3_06b, partial_rotary_factor: 0.5 }),
      'partial_rotary_factor',
      /= 0.5: partial RoPE/,
    );
    expectFormatError(
      () => specFromConfig({ ...mistral7b, partial_rotary_factor: 'half' }),
      'partial_rotary_factor',
      /finite number/,
    );
    for (const quant of [
      { quant_method: 'gptq', bits: 4, group_size: 128 },
      { quant_method: 'awq', bits: 4, version: 'gemm' },
      { quant_method: 'bitsandbytes', load_in_4bit: true },
    ]) {
      expectFormatError(
        () => specFromConfig({ ...qwen25_05b, quantization_config: quant }),
        'quantization_config',
        new RegExp(`"quant_method":"${quant.quant_method}".*: pre-quantized checkpoints`),
      );
    }
  });
  it('published configs carry no MLP bias, partial RoPE or quantization, and stay loadable', () => {
    for (const [name, cfg] of Object.entries(published)) {
      const fields: Record<string, unknown> = cfg;
      expect(fields.mlp_bias ?? false, name).toBe(false);
      expect(fields.partial_rotary_factor ?? 1, name).toBe(1);
      expect(fields.quantization_config, name).toBeUndefined();
      // The neutral values of the refused fields leave the spec as it was.
      const neutral = { ...cfg, mlp_bias: false, partial_rotary_factor: 1, quantization_config: null };
      expect(specFromConfig(neutral), name).toEqual(specFromConfig(cfg));
    }
  });
  it('names the given file', () => {
    expect(() => specFromConfig({}, 'models/x/config.json')).toThrow(/^models\/x\/config.json: model_type/);
  });
});

describe('withGenerationConfig', () => {
  it('merges EOS ids in order without duplicates and fills BOS', () => {
    const s = specFromConfig({ ...tinyllama, bos_token_id: null });
    const m = withGenerationConfig(s, { bos_token_id: 1, eos_token_id: [32000, 2] });
    expect(m.eosIds).toEqual([2, 32000]);
    expect(m.bosId).toBe(1);
    expect(withGenerationConfig(s, { eos_token_id: 7 }).eosIds).toEqual([2, 7]);
  });
  it('refuses a malformed generation config', () => {
    const s = specFromConfig(tinyllama);
    expect(() => withGenerationConfig(s, { eos_token_id: 'x' })).toThrow(ModelFormatError);
    expect(() => withGenerationConfig(s, { eos_token_id: 'x' })).toThrow(
      /generation_config.json: eos_token_id/,
    );
  });
});
