// Llama (Llama 1, 2 and 3, SmolLM2, TinyLlama, and Mistral's GGUFs, which are llama files): the
// block every other family varies. Transformers' `LlamaConfig`; llama.cpp's `llama` architecture,
// whose converter permutes Q and K rows for its interleaved RoPE and stores Llama 3 scaling as
// `rope_freqs.weight`.
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import { DECODER_LAYER_NAMES, decoderMetadata, GLOBAL_NAMES, ggufBaseSpec } from './gguf-base.js';
import { interleavedQk } from './stored.js';

export const llama: Family = {
  configTypes: { llama: (f) => decoderSpec(f, { family: 'llama' }) },
  config: (spec) => baseConfig(spec, 'LlamaForCausalLM', 'llama'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'llama',
    reads: true,
    spec: (g) => ggufBaseSpec(g, { family: 'llama', arch: 'llama', ropeFreqs: true }),
    metadata: (spec) => decoderMetadata(spec, 'llama'),
    names: { global: GLOBAL_NAMES, layer: DECODER_LAYER_NAMES },
    squeezed: [],
    storedForm: interleavedQk,
  },
};
