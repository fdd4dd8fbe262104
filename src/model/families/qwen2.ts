// Qwen2 and Qwen2.5: a Llama with q/k/v biases. Transformers' `Qwen2Config` (its
// `use_sliding_window` caps the context at the window, where full and windowed attention agree);
// llama.cpp's `qwen2` architecture, which stores Q and K as they are (NEOX RoPE).
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import { DECODER_LAYER_NAMES, decoderMetadata, GLOBAL_NAMES, ggufBaseSpec } from './gguf-base.js';

export const qwen2: Family = {
  configTypes: { qwen2: (f) => decoderSpec(f, { family: 'qwen2', qkvBias: true }) },
  config: (spec) => baseConfig(spec, 'Qwen2ForCausalLM', 'qwen2'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'qwen2',
    reads: true,
    spec: (g) => ggufBaseSpec(g, { family: 'qwen2', arch: 'qwen2', ropeFreqs: true }),
    metadata: (spec) => decoderMetadata(spec, 'qwen2'),
    names: { global: GLOBAL_NAMES, layer: DECODER_LAYER_NAMES },
    squeezed: [],
    storedForm: () => ({}),
  },
};
