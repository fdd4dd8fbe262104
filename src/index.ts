/**
 * weft: a WebGPU LLM inference runtime for the browser and Node.
 *
 * Start with {@link createEngine} (same thread, or inside your own worker) or
 * {@link createWorkerEngine} (the page side of weft's engine worker, `weft/worker`).
 *
 * @packageDocumentation
 */

// The public types name WebGPU's (GPUBuffer, GPUDevice): an app's type-check finds them here.
/// <reference types="@webgpu/types" preserve="true" />

export {
  type ConvertModelOptions,
  type ConvertQuant,
  type ConvertSink,
  convertModel,
  EXPORT_TYPES,
  exportModelGguf,
} from './convert/convert.js';
export { exportGguf } from './convert/gguf-export.js';
// Speculative decoding.
export type { Drafter, DraftProposal, DraftShape } from './decode/drafter.js';
export { firstChain, NgramDrafter } from './decode/drafter.js';
export { ModelDrafter } from './decode/model-drafter.js';
export { rankChildren, samplingProbs } from './decode/probs.js';
export { type RejectionRand, rejectionUniform } from './decode/rejection.js';
export { type VerifyStep, verify, verifyChain } from './decode/speculate.js';
// Engine: the public API.
export type { CreateEngineOptions, LoadProgress, LoadStep, LoadWarning } from './engine/create.js';
export { createEngine } from './engine/create.js';
export type { EngineModel, WeftEngine } from './engine/engine.js';
export { Engine } from './engine/engine.js';
// Opening a named model (see resolveModel in the store), in place or through the weights cache.
export { type OpenSourceOptions, openModelSource, remoteFileList, storedModelFiles } from './engine/open.js';
export type { ChatApi } from './engine/openai.js';
// OpenAI's HTTP API served in the page, for the official client and the AI SDK.
export { createOpenAIFetch, type FetchFunction, type OpenAIFetchEngine } from './engine/openai-fetch.js';
export {
  createSharedEngine,
  inspectSharedEngine,
  type SharedEngineOptions,
  type SharedEngineWorkers,
} from './engine/shared-client.js';
export { serveSharedEngine } from './engine/shared-server.js';
// Model choices as plain data, loaded through the weights cache (what weft's worker runs).
export { type ChoiceLoadEvent, type ChoiceLoadOptions, loadChoice } from './engine/sources.js';
export type * from './engine/types.js';
export { createWorkerEngine, type EngineSharing, WorkerEngine } from './engine/worker-client.js';
export type { WireThrown } from './engine/worker-errors.js';
export type {
  EngineWorkerApi,
  EngineWorkerCalls,
  EngineWorkerLoadEvent,
  EngineWorkerLoadOptions,
  Reply,
  SharedEngineState,
  SharedEngineWorkerApi,
  SharedLoadResult,
  StreamEvent,
} from './engine/worker-protocol.js';
export { serveEngine } from './engine/worker-server.js';
export * from './errors.js';
// Models and formats.
export { ModelFormatError } from './formats/errors.js';
export { blobBytes, type FileBytes, memoryBytes, urlBytes } from './formats/io/bytes.js';
export {
  blobsModel,
  type DirectoryEntry,
  type DirectoryLike,
  directoryModel,
  type LocalFiles,
  localFilesModel,
  type ModelFiles,
  memoryModelFiles,
  urlModelFiles,
} from './formats/io/files.js';
export { openSafetensors, openShardedSafetensors } from './formats/safetensors.js';
export type { TensorReader } from './formats/weft-checkpoint.js';
// WebGPU plumbing, for custom kernels and hosts.
export * from './gpu/index.js';
// Constrained decoding: grammars compiled against a vocabulary, applied as token bitmasks.
export {
  Constraint,
  type ConstraintSpec,
  GrammarCompiler,
  maskAllows,
  type Vocabulary,
  type VocabularyType,
} from './grammar/constraint.js';
export { GrammarError, type GrammarKind } from './grammar/errors.js';
export type { KvFormat } from './kernels/kv/kv.js';
// Activation steering.
export type { SteerMode, SteerPlan } from './kernels/steer/steer.js';
export type { ModelFamily } from './model/families/index.js';
export { specFromConfig } from './model/families/index.js';
export { GGUF_IN_FOLDER, modelChecksum, type OpenedModel, openModel, WEFT_WEIGHTS } from './model/load.js';
export type { ForwardInput, ModelRunner, SamplerSpec } from './model/runner.js';
export { withGenerationConfig } from './model/spec/generation.js';
export type { ModelSpec } from './model/spec/spec.js';
export { type DraftTree, draftTree } from './model/tree.js';
export type { Quant, Rotation } from './quant/pack.js';
export { SteerMismatchError } from './steer/errors.js';
export { checkSteerModel, readSteerFile, type SteerFile, writeSteerFile } from './steer/format.js';
export { type MeasuredDirections, measureDirections } from './steer/measure.js';
export type { SteerOptions } from './steer/plan.js';
// The weights cache.
export * from './store/index.js';
export { type ChatMessage as TemplateMessage, ChatTemplate } from './tokenizer/chat.js';
export { loadTokenizer, WeftTokenizer } from './tokenizer/tokenizer.js';
