// Test lists shared by the vitest configs (vitest.config.ts, vitest.deno.config.ts).

// The model-level GPU tests the lavapipe project runs in the GPU forms: every family and format
// against the reference, the decode session, tree verification, every drafter and the draft head,
// grammar, steering, the f16 KV cache, rotations, the counters, Qwen3.5's and LFM2's hybrid layers,
// Gemma 3's sliding windows, SmolLM3's RoPE-less layers, Ministral 3's YaRN and query temperature, the mixtures of experts, and the engine's recovery from a lost device. (The others check placement,
// conversion and device limits, which do not depend on the kernel forms: Chromium runs them.)
export const LAVAPIPE_MODEL_TESTS = [
  'test/model/gpu/forward.gpu.test.ts',
  'test/model/gpu/decode-loop.gpu.test.ts',
  'test/decode/speculate.gpu.test.ts',
  'test/model/gpu/counters.gpu.test.ts',
  'test/grammar/grammar.gpu.test.ts',
  'test/steer/steer.gpu.test.ts',
  'test/model/gpu/kv-f16.gpu.test.ts',
  'test/model/gpu/rotate.gpu.test.ts',
  'test/families/qwen3-5.gpu.test.ts',
  'test/families/qwen3-5.trained.gpu.test.ts',
  'test/families/gemma3.gpu.test.ts',
  'test/families/gemma4.gpu.test.ts',
  'test/families/gemma4-moe.gpu.test.ts',
  'test/families/gemma4-gguf.gpu.test.ts',
  'test/families/gemma4.head.gpu.test.ts',
  'test/model/draft/assistant.gpu.test.ts',
  'test/families/lfm2.gpu.test.ts',
  'test/families/phi3.gpu.test.ts',
  'test/families/ministral3.gpu.test.ts',
  'test/families/qwen3-moe.gpu.test.ts',
  'test/families/lfm2-moe.gpu.test.ts',
  'test/families/qwen3-5-moe.gpu.test.ts',
  'test/families/moe-gguf.gpu.test.ts',
  'test/engine/device-loss.gpu.test.ts',
];
