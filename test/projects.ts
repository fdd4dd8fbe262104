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
  'test/model/gpu/kv-int.gpu.test.ts',
  'test/decode/kv-int-speculate.gpu.test.ts',
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

// The model-level tests `npm test` runs under Deno (wgpu, vitest.deno.config.ts): the subset of
// LAVAPIPE_MODEL_TESTS that fits CI's time with the kernels' own tests beside it (every kernel family
// in both forms; the model files below take about 3 minutes there): every family and format's
// forward, the decode loop, the counters, the f16 and integer KV caches, rotations, steering,
// grammar, device-loss recovery, LFM2's short convolutions, Gemma 4's per-layer inputs and shared
// KV, a mixture; test/deno/ adds the bundled trained model's text at f16, int4 and w8a8 and
// self-draft, draft-model and draft-head speculation. The rest of LAVAPIPE_MODEL_TESTS (speculation
// in every family, the assistant, Qwen3.5 and its trained model, Gemma 3, the other Gemma 4 and
// mixture files, Phi-3, Ministral 3, speculation over integer caches) runs there with
// WEFT_DENO_ALL=1 (about 10 minutes more).
export const DENO_MODEL_TESTS = [
  'test/model/gpu/forward.gpu.test.ts',
  'test/model/gpu/decode-loop.gpu.test.ts',
  'test/model/gpu/counters.gpu.test.ts',
  'test/grammar/grammar.gpu.test.ts',
  'test/steer/steer.gpu.test.ts',
  'test/model/gpu/kv-f16.gpu.test.ts',
  'test/model/gpu/kv-int.gpu.test.ts',
  'test/model/gpu/rotate.gpu.test.ts',
  'test/families/gemma4.gpu.test.ts',
  'test/families/lfm2.gpu.test.ts',
  'test/families/qwen3-moe.gpu.test.ts',
  'test/engine/device-loss.gpu.test.ts',
];
