// Mistral (Mistral 7B and its kind): a Llama whose `sliding_window` applies to every layer.
// llama.cpp writes it as a `llama` file (no window key), which reads back as Llama.
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import { llama } from './llama.js';

export const mistral: Family = {
  configTypes: { mistral: (f) => decoderSpec(f, { family: 'mistral', window: 'every-layer' }) },
  config: (spec) => baseConfig(spec, 'MistralForCausalLM', 'mistral'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  // Written as llama's architecture, names and stored form; a llama file reads as Llama.
  gguf: { ...llama.gguf, reads: false },
};
