// Qwen3 (dense): a Llama with RMSNorm on each head of q and k before RoPE and an explicit
// `head_dim`. Transformers' `Qwen3Config`; llama.cpp's `qwen3` architecture (NEOX RoPE, Q and K as
// they are).
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import { DECODER_LAYER_NAMES, decoderMetadata, GLOBAL_NAMES, ggufBaseSpec } from './gguf-base.js';

export const qwen3: Family = {
  configTypes: { qwen3: (f) => decoderSpec(f, { family: 'qwen3', qkNorm: true }) },
  config: (spec) => baseConfig(spec, 'Qwen3ForCausalLM', 'qwen3'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'qwen3',
    reads: true,
    spec: (g) => ggufBaseSpec(g, { family: 'qwen3', arch: 'qwen3', ropeFreqs: true, qkNorm: true }),
    metadata: (spec) => decoderMetadata(spec, 'qwen3'),
    names: { global: GLOBAL_NAMES, layer: DECODER_LAYER_NAMES },
    squeezed: [],
    storedForm: () => ({}),
  },
};
