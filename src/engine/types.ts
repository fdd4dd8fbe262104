import type { StructuralTag } from '@mlc-ai/web-xgrammar';

/** One chat message, as in OpenAI's chat completions API. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** An assistant turn's tool calls (OpenAI's shape: arguments as JSON text). */
  tool_calls?: ToolCall[];
  /** A tool turn: the id of the call it answers. */
  tool_call_id?: string;
}

/** A function tool call, as OpenAI writes it in `message.tool_calls`. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A tool a request offers, as OpenAI's `tools` entries: a function with a JSON schema of its parameters. */
export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown };
}

/**
 * OpenAI's `tool_choice`: 'none' hides the tools; 'auto' offers them; 'required' offers them and
 * forces the reply to be one call to one of them, a named function offers it alone and forces a
 * call to it (by a grammar of the calls: the arguments are valid under the tool's schema).
 */
export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

/** What the engine needs from a tokenizer: text ↔ ids, its chat template, and where to stop. */
export interface TextCodec {
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
  /** Renders messages with the model's chat template; absent for base models without one. */
  applyChatTemplate?(
    messages: readonly ChatMessage[],
    options: { addGenerationPrompt: boolean; tools?: readonly ChatTool[] },
  ): string;
  /** Generation stops on any of these ids. */
  readonly eosIds: readonly number[];
  /**
   * The token strings of every id below the model's vocabulary size and how they are spelt, which
   * constrained decoding compiles grammars against; absent, constrained requests are refused.
   */
  vocabulary?(): { tokens: readonly string[]; type: 'byte_level' | 'byte_fallback' | 'raw' };
}

/** Options of `engine.generate`. */
export interface GenerateOptions {
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
  /** 0 is greedy (the default); higher samples more freely. */
  temperature?: number;
  topP?: number;
  topK?: number;
  /** Seed of the sampling noise; the same seed gives the same text. Default 0. */
  seed?: number;
  /** Generation stops before any of these strings; the string itself is not returned. */
  stop?: string | readonly string[];
  signal?: AbortSignal;
  /** Prompt tokens per prefill pass (default 64). */
  prefillChunk?: number;
  /**
   * Speculative decoding: how drafts are proposed ('none' disables it). 'ngram' looks up the
   * context; 'draft' uses the engine's draft model (loaded with `createEngine({ draft })`).
   * Defaults to the engine's drafter.
   */
  drafter?: DrafterKind;
  /** Most draft tokens verified per target pass (4..32, default 8). */
  treeBudget?: number;
  /**
   * Jump-forward under a constraint (default true): tokens the grammar forces (the only one its
   * mask allows) go into the step's draft as a chain that costs no budget and no draft pass and is
   * always accepted, so a pass emits them together with the next free token; with no drafter, a
   * step drafts them itself, with the canonical tokenisation of the text the grammar forces after
   * them. Exact: every token is still the target's own choice under its mask, so the ids equal
   * plain constrained decoding, greedy and seeded. Forced text is never appended unverified (its
   * canonical tokenisation may not be the one the model picks). Ignored without a constraint.
   */
  jumpForward?: boolean;
  /**
   * 'always' (the default) speculates at every step a drafter can; 'adaptive' lets the engine
   * measure, step by step, what a speculative step and a plain one cost per token on this device
   * and take the cheaper (see SpeculationGovernor), so speculation never makes decoding slower
   * than plain decoding by more than its measurements cost. The tokens are the same either way.
   */
  speculation?: 'always' | 'adaptive';
  /**
   * Where the decoding loop runs: 'device' (the default) keeps it on the GPU when the runner can.
   * Plain decoding (`ModelRunner.decode`): each step runs the id the step before sampled, queued
   * before that id reaches the CPU. Speculation with a draft model on the same GPU
   * (`Drafter.speculate`): the tree is grown, verified and its accepted path committed in one
   * submission with one readback. 'host' runs one forward and one readback per token (plain) or
   * per draft depth (speculation), as on the CPU. The ids are the same; 'host' is there to measure
   * the difference (`npm run bench`'s none-host row, `npm run bench:spec`).
   */
  decodeLoop?: 'device' | 'host';
  /**
   * How drafts are accepted when sampling (temperature > 0; greedy always takes exact matches).
   * Defaults to the engine's (`createEngine({ acceptance })`, else 'gumbel').
   */
  acceptance?: Acceptance;
  /**
   * Constrained decoding (at most one of `json`, `jsonSchema`, `grammar`, `regex`): the output is
   * one JSON object (`json: true`), JSON valid under a JSON schema (`jsonSchema`, an object or its
   * text), text of an EBNF grammar (`grammar`, XGrammar's GBNF-like dialect with a `root` rule), or
   * text matching a regex (`regex`). The grammar's token bitmask is applied to the logits before
   * sampling at every step (on the GPU); a bad schema, grammar or regex throws GrammarError.
   * Under speculative decoding, drafters grow their trees under the grammar (nothing it refuses is
   * proposed) and every node is verified under its own mask, so the ids equal plain constrained
   * decoding ('gumbel' acceptance; 'rejection' is refused under a constraint).
   */
  json?: boolean;
  jsonSchema?: unknown;
  grammar?: string;
  regex?: string;
  /**
   * XGrammar's structural tag (`{ type: 'structural_tag', format }`): constant strings, tags, JSON
   * schemas, grammars and regexes in sequence or as alternatives, the JSON in it on one line as
   * `json.dumps` writes it. A forced tool call (`tool_choice: 'required'`) is one. At most one
   * constraint per request, as above.
   */
  structuralTag?: StructuralTag;
}

/** OpenAI's `response_format` of a chat completion request. */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | {
      type: 'json_schema';
      json_schema: { name?: string; schema: unknown; strict?: boolean; description?: string };
    };

/**
 * Acceptance rule of speculative sampling. 'gumbel' (default): the target's own Gumbel-argmax at
 * every tree node with noise shared by position; the text equals plain sampling with the same
 * seed. 'rejection': the classic rule on a chain (accept with min(1, p/q), else sample the
 * residual); an exact sample of the same distribution, not the same text.
 */
export type Acceptance = 'gumbel' | 'rejection';

/** Kinds of drafter. 'draft' is a separate draft model or the target's own low-bit copy. */
export type DrafterKind = 'none' | 'ngram' | 'draft';

/** The draft tree of one target pass, for display: node tokens, their parents, the accepted path. */
export interface DraftTreeView {
  /** Token of each node, depth-first. */
  tokens: number[];
  /** Parent of each node (-1: child of the last committed token). */
  parents: number[];
  /** Node indices of the accepted path, root to leaf. */
  accepted: number[];
  /** Text of each node's token decoded alone (a piece of a multi-byte character shows as U+FFFD). */
  texts?: string[];
  /**
   * The drafter's probability of each node given its parent, as it ranked the tree: the draft
   * model's softmax when greedy, its weight of the token under the shared sampling noise when
   * sampling (see `rankChildren`), for a sampled chain the probability it was drawn with. Absent
   * for drafts that are no model's (n-grams) or that a grammar cut.
   */
  probs?: number[];
  /** The target's own token after the accepted path (the pass's last emitted token), and its text. */
  bonus?: { token: number; text: string };
}

/**
 * The engine's running counts of a request when it made a chunk: `lastStats` reports the same
 * counts when the request ends (`target_passes`, and `tokens_per_pass` = decodeTokens / decodePasses).
 */
export interface GenerationProgress {
  /** Target passes so far, prefill chunks included. */
  targetPasses: number;
  /** Decode steps (target passes after prefill) so far, and the tokens they produced. */
  decodePasses: number;
  decodeTokens: number;
}

/** Why a generation ended. */
export type FinishReason = 'stop' | 'length' | 'tool_calls';

/** A piece of streamed output: new token ids and the text they complete. */
export interface GenerationChunk {
  ids: number[];
  text: string;
  /** Set on the last chunk. */
  finishReason?: FinishReason;
  /** With speculative decoding: the tree of the pass that produced these tokens. */
  tree?: DraftTreeView;
  /** The request's counts after the pass that produced these tokens. */
  progress?: GenerationProgress;
}

/** Figures of one request. */
export interface GenerationStats {
  prompt_tokens: number;
  /** Prompt tokens whose K/V rows were reused from the previous request. */
  cached_prompt_tokens: number;
  completion_tokens: number;
  prefill_tok_s: number;
  decode_tok_s: number;
  time_to_first_token_ms: number;
  /** Forward passes of the target model (prefill chunks included). */
  target_passes: number;
  /** Generated tokens per decode pass of the target (1 without speculation). */
  tokens_per_pass: number;
  /** Time spent drafting and verifying in speculative steps driven from the host. */
  draft_ms: number;
  verify_ms: number;
  /**
   * Time of speculative steps run whole on the device (a draft model on the target's GPU), where
   * drafting and verification are one submission and their shares are not measured apart.
   */
  device_step_ms: number;
  // What the GPU was asked to do in the decode steps (drafting, verifying and committing included;
  // prefill not), from the device's counters. Absent off the GPU (the CPU reference runner).
  /** Compute dispatches per token the decode steps produced. */
  dispatches_per_token?: number;
  /** Queue buffer writes (uniforms included) per token the decode steps produced. */
  writes_per_token?: number;
  /** Buffers mapped for reading (CPU round trips) per decode step (one target pass each). */
  readbacks_per_pass?: number;
  /** Bytes mapped for reading per decode step. */
  readback_bytes_per_pass?: number;
  /** Bytes of weights the target's forward reads for one token, as packed (linears, LM head, one embedding row). */
  weight_bytes_per_pass?: number;
  /**
   * A mixture-of-experts model's decode steps: the experts one mixture layer reads per target pass
   * (topK in plain decoding; a verification pass reads the union of its rows' choices), and per
   * emitted token (experts_per_pass divided by the tokens a pass emits): the cost that makes
   * speculation on mixtures dearer. Counted on the device (a decode loop's dropped run-ahead step
   * included, at most one). Absent for other models and off the GPU.
   */
  experts_per_pass?: number;
  expert_reads_per_token?: number;
  /**
   * A mixture paged under an expert budget (`expertBudget`), over the decode steps: the share of
   * chosen experts found in the GPU caches, and the bytes of experts loaded from CPU memory per
   * emitted token. Absent when every expert is on the GPU.
   */
  expert_cache_hit_rate?: number;
  expert_bytes_loaded_per_token?: number;
  /**
   * Bytes the target's KV cache holds on the GPU, every attention layer's keys and values: a
   * sliding-window layer (Gemma 3) holds its window, not the context. Absent off the GPU.
   */
  kv_bytes?: number;
  /**
   * Bytes of cached keys and values attention reads for the next token at the request's end (every
   * attention layer's visible slots, K and V, in the cache's format): with weight_bytes_per_pass,
   * what a long context adds to each decode step. Absent off the GPU.
   */
  attention_bytes_per_token?: number;
  /**
   * Forward passes of the drafter's model over the decode steps (its catch-up on each new context
   * included), and the bytes of weights one of them reads (on the GPU): with the target's
   * `weight_bytes_per_pass`, the weight bytes speculation moves per step. Absent without a model
   * drafter.
   */
  draft_passes?: number;
  draft_weight_bytes_per_pass?: number;
  /** The totals the figures above divide. */
  decode_counts?: DecodeCounts;
  /** The WebGPU adapter the target ran on (see `describeAdapter`); absent off the GPU. */
  adapter?: string;
  /** The forms its heavy kernels took (`GpuContext.kernels`); absent off the GPU. */
  kernels?: 'gpu' | 'serial';
  /**
   * GPU devices lost and recovered from since the previous request's stats: during this request
   * (the model placed again on a new device, and the request run on from its tokens so far), while
   * the engine was idle, or, for the first request, while the engine loaded. 0 without a loss.
   */
  device_losses: number;
  /** Time those recoveries took (a new device, the model placed again), ms; 0 without a loss. */
  recovery_ms: number;
}

/** Totals of a request's decode steps (see {@link GenerationStats}). */
export interface DecodeCounts {
  /** Decode steps (target passes after prefill) and the tokens they produced. */
  passes: number;
  tokens: number;
  dispatches: number;
  writes: number;
  write_bytes: number;
  readbacks: number;
  readback_bytes: number;
  submits: number;
}

/** Request of `engine.chat.completions.create`, a subset of OpenAI's. */
export interface ChatCompletionRequest {
  messages: ChatMessage[];
  stream?: boolean;
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  seed?: number;
  stop?: string | string[];
  signal?: AbortSignal;
  model?: string;
  /**
   * What to do when the conversation and `max_tokens` do not fit the context: `'none'` (default)
   * sends it as it is (a prompt that cannot fit is refused with `ContextLengthError`, a completion
   * that reaches the context ends with `finish_reason: 'length'`); `'oldest'` first drops the oldest
   * turns, keeping system messages and the latest message, until `max_tokens` fit after the prompt.
   */
  truncate?: 'none' | 'oldest';
  /** Tools the model may call, rendered through its chat template; calls come back in `tool_calls`. */
  tools?: ChatTool[];
  tool_choice?: ToolChoice;
  /** Structured output: `json_object` (any JSON object) or `json_schema` (JSON valid under a schema). */
  response_format?: ResponseFormat;
}

/** OpenAI-compatible usage block, with weft's figures beside it. */
export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  weft?: GenerationStats;
}

/** Non-streamed response, shaped as OpenAI's `chat.completion`. */
export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: {
    index: number;
    message: { role: 'assistant'; content: string; tool_calls?: ToolCall[] };
    finish_reason: FinishReason;
  }[];
  usage: CompletionUsage;
}

/** Streamed chunk, shaped as OpenAI's `chat.completion.chunk`; the last one carries `usage`. */
export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: {
    index: number;
    delta: {
      role?: 'assistant';
      content?: string;
      /** Each call arrives whole in one delta, at its `index` among the reply's calls. */
      tool_calls?: (ToolCall & { index: number })[];
    };
    finish_reason: FinishReason | null;
  }[];
  usage?: CompletionUsage;
}
