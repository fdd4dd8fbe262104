/**
 * weft: a WebGPU LLM inference runtime for the browser and Node.
 *
 * Start with {@link createEngine} (same thread, or inside your own worker) or
 * {@link createWorkerEngine} (the page side of weft's engine worker, `weft/worker`).
 *
 * @packageDocumentation
 */

// Speculative decoding.
export type { Drafter, DraftProposal } from './decode/drafter.js';
export { NgramDrafter } from './decode/drafter.js';
export { ModelDrafter } from './decode/model-drafter.js';
export { type VerifyStep, verify } from './decode/speculate.js';
// Engine: the public API.
export type { CreateEngineOptions, LoadProgress, Quant } from './engine/create.js';
export { createEngine, modelFiles } from './engine/create.js';
export type { EngineModel, WeftEngine } from './engine/engine.js';
export { Engine } from './engine/engine.js';
export type { ChatApi } from './engine/openai.js';
export type * from './engine/types.js';
export { createWorkerEngine, WorkerEngine } from './engine/worker-client.js';
export type { EngineWorkerApi, StreamEvent } from './engine/worker-protocol.js';
export { type ServableEngine, serveEngine } from './engine/worker-server.js';
export * from './errors.js';

// Models and formats.
export { ModelFormatError } from './formats/errors.js';
export { exportGguf } from './formats/gguf-write.js';
export { openSafetensors, openShardedSafetensors } from './formats/safetensors.js';
export { type ByteSource, blobSource, bytesSource, urlSource } from './formats/source.js';
// WebGPU plumbing, for custom kernels and hosts.
export * from './gpu/index.js';
export { specFromConfig, withGenerationConfig } from './model/config.js';
export { type ModelFiles, memoryModelFiles, urlModelFiles } from './model/files.js';
export { type OpenedModel, openModel } from './model/load.js';
export type { ForwardInput, ModelRunner, SamplerSpec } from './model/runner.js';
export type { ModelFamily, ModelSpec } from './model/spec.js';
// The weights cache.
export * from './store/index.js';
export { type ChatMessage as TemplateMessage, ChatTemplate } from './tokenizer/chat.js';
export { loadTokenizer, WeftTokenizer } from './tokenizer/tokenizer.js';
