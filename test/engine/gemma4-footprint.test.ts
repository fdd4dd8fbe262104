// Gemma 4 E2B and E4B in a tab's GPU: their published text configs through the spec reader and the
// footprint, printed at int4 (weights with the per-layer table, the KV cache at 4K and 32K tokens),
// with the KV cache checked from first principles: only the layers before the KV-shared ones hold
// a cache, each sliding one a ring of its 512-token window and 128 rows, each full one the context
// at its 512-wide heads.
import { describe, expect, it } from 'vitest';
import { modelFootprint } from '../../src/engine/limits.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { firstSharedLayer } from '../../src/model/spec/spec.js';
import { packedBytes } from '../../src/quant/formats.js';

const types = (pattern: number, layers: number) =>
  Array.from({ length: layers }, (_, i) =>
    (i + 1) % pattern === 0 ? 'full_attention' : 'sliding_attention',
  );

/** The text config both publish (Gemma4TextConfig's keys), with each one's sizes. */
function gemma4(o: Record<string, unknown>): Record<string, unknown> {
  return {
    model_type: 'gemma4_text',
    num_attention_heads: 8,
    head_dim: 256,
    global_head_dim: 512,
    num_global_key_value_heads: null,
    attention_k_eq_v: false,
    sliding_window: 512,
    vocab_size: 262144,
    vocab_size_per_layer_input: 262144,
    hidden_size_per_layer_input: 256,
    max_position_embeddings: 131072,
    rms_norm_eps: 1e-6,
    hidden_activation: 'gelu_pytorch_tanh',
    final_logit_softcapping: 30.0,
    tie_word_embeddings: true,
    enable_moe_block: false,
    bos_token_id: 2,
    eos_token_id: 1,
    rope_parameters: {
      full_attention: { partial_rotary_factor: 0.25, rope_theta: 1000000.0, rope_type: 'proportional' },
      sliding_attention: { rope_theta: 10000.0, rope_type: 'default' },
    },
    ...o,
  };
}

const E2B = gemma4({
  hidden_size: 1536,
  num_hidden_layers: 35,
  num_key_value_heads: 1,
  num_kv_shared_layers: 20,
  use_double_wide_mlp: true,
  intermediate_size: 6144,
  layer_types: types(5, 35),
});
const E4B = gemma4({
  hidden_size: 2560,
  num_hidden_layers: 42,
  num_key_value_heads: 2,
  num_kv_shared_layers: 18,
  use_double_wide_mlp: false,
  intermediate_size: 10240,
  layer_types: types(6, 42),
});

const GB = 1e9;

describe('Gemma 4 E2B and E4B footprints', () => {
  for (const [name, config, sharedFrom] of [
    ['E2B', E2B, 15],
    ['E4B', E4B, 24],
  ] as const) {
    it(`${name}: the published config reads; at int4 its weights, per-layer table and KV cache printed`, () => {
      const spec = specFromConfig(config);
      expect(firstSharedLayer(spec)).toBe(sharedFrom);
      const table = packedBytes('int4', spec.perLayerInput!.vocab, spec.layers * spec.perLayerInput!.width);
      const line: string[] = [];
      for (const context of [4096, 32768]) {
        const f = modelFootprint(spec, 'int4', { context, kvFormat: 'f16' });
        // K and V in f16 of the layers that hold a cache.
        let kv = 0;
        for (let l = 0; l < sharedFrom; l++) {
          const sliding = spec.slidingLayers![l]!;
          const rows = sliding ? Math.min(512 + 64 + 64, context) : context;
          const width = sliding ? spec.kvHeads * 256 : spec.fullAttention!.kvHeads * 512;
          kv += 2 * rows * width * 2;
        }
        expect(f.kvCache).toBe(kv);
        if (context === 4096)
          line.push(
            `weights ${(f.weights / GB).toFixed(2)} GB (per-layer table ${(table / GB).toFixed(2)} GB)`,
          );
        line.push(
          `KV at ${context / 1024}K ${(f.kvCache / 2 ** 20).toFixed(1)} MiB, total ${(f.total / GB).toFixed(2)} GB`,
        );
      }
      console.log(`[gemma4 ${name}] int4: ${line.join('; ')}`);
    });
  }
});
