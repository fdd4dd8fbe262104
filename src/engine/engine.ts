import {
  constrainDraft,
  type DraftGrammar,
  GrammarWalk,
  jumpDraft,
  type Spelling,
} from '../decode/constrained.js';
import { type Drafter, type DraftProposal, EMPTY_PROPOSAL, NgramDrafter } from '../decode/drafter.js';
import { SpeculationGovernor, type StepKind } from '../decode/governor.js';
import { type VerifyStep, verify, verifyChain } from '../decode/speculate.js';
import {
  AbortError,
  ContextLengthError,
  DeviceLostError,
  EngineClosedError,
  InvalidInputError,
} from '../errors.js';
import { type GpuContext, lossBehind } from '../gpu/device.js';
import { type Constraint, type ConstraintSpec, GrammarCompiler } from '../grammar/constraint.js';
import { MAX_FORWARD_TOKENS } from '../model/blocks/gpu.js';
import { CachedPrefix } from '../model/prefix.js';
import type { DecodeSession, ModelRunner, SamplerSpec } from '../model/runner.js';
import { DecodeTally, type DeviceLosses } from './decode-stats.js';
import { type ChatApi, chatApi } from './openai.js';
import { RELOSS_WINDOW_MS, type Request, stepOptions } from './request.js';
import { TokenOutput } from './text-stream.js';
import { draftTreeView } from './tree-view.js';
import type {
  Acceptance,
  ChatMessage,
  ChatTool,
  DraftTreeView,
  GenerateOptions,
  GenerationChunk,
  GenerationStats,
  TextCodec,
} from './types.js';

/** A loaded model as the engine runs it. */
export interface EngineModel {
  /** Name reported in responses (`model` field). */
  readonly id: string;
  readonly runner: ModelRunner;
  readonly codec: TextCodec;
  /** A draft model (separate, or the target at low precision) for speculative decoding. */
  readonly drafter?: Drafter;
  /** The acceptance rule of requests that do not name one (default 'gumbel'). */
  readonly acceptance?: Acceptance;
  /** The GPU context the runner is on; undefined off the GPU. */
  readonly gpu?: GpuContext;
  /**
   * The model placed again, as it was loaded, on a new device after `lost` (see createEngine);
   * undefined where a loss cannot be recovered from (an app's own context it cannot replace).
   */
  readonly replace?: (lost: DeviceLostError) => Promise<EngineModel>;
  /** Device losses recovered from while the model was loading. */
  readonly losses?: DeviceLosses;
}

const now = () => performance.now();

/**
 * The interface every engine offers, in the same thread ({@link Engine}) or across a Web Worker
 * (`createWorkerEngine`).
 */
export interface WeftEngine {
  readonly modelId: string;
  /**
   * Tokens of context every request shares: prompt and completion together. A prompt of more than
   * `contextLength - 1` tokens is refused with {@link ContextLengthError}; a completion that
   * reaches the context ends with `finishReason: 'length'`.
   */
  readonly contextLength: number;
  /** Stats of the last finished request. */
  readonly lastStats: GenerationStats | undefined;
  generate(prompt: string | readonly number[], options?: GenerateOptions): AsyncGenerator<GenerationChunk>;
  /** Token ids of a conversation rendered with the model's chat template, ready to generate from. */
  render(messages: readonly ChatMessage[], tools?: readonly ChatTool[]): Promise<number[]>;
  readonly chat: ChatApi;
  unload(): Promise<void>;
}

/**
 * Turns a loaded model into streamed tokens. Requests run one at a time in arrival order; the
 * KV cache is kept between requests and reused for the longest shared prompt prefix, so a chat
 * turn only prefills the new messages.
 */
export class Engine implements WeftEngine {
  /** OpenAI-style entry point: `engine.chat.completions.create(request)`. */
  readonly chat: ChatApi;
  /** Stats of the last finished request. */
  lastStats: GenerationStats | undefined;

  private queue: Promise<void> = Promise.resolve();
  /** The tokens in the target's KV cache, reused for the longest shared prompt prefix. */
  private cached: CachedPrefix;
  /** Losses recovered from since the last request's stats, which report them. */
  private losses: DeviceLosses;
  /** Adaptive speculation's measurements, per drafter, budget and sampling mode (see governorFor). */
  private readonly governors = new Map<string, SpeculationGovernor>();
  private closed = false;
  private readonly ngram = new NgramDrafter();
  /** Compiles constrained requests' grammars against the model's vocabulary (made on first use). */
  private grammars: Promise<GrammarCompiler> | undefined;
  /** The tokenizer as jump-forward spells a grammar's forced text. */
  private readonly spelling: Spelling;

  /** Whether the model has a chat template (an instruct model), which `render` and chat need. */
  get hasChatTemplate(): boolean {
    return this.model.codec.applyChatTemplate !== undefined;
  }

  constructor(private model: EngineModel) {
    this.cached = new CachedPrefix(model.runner);
    this.losses = { ...(model.losses ?? { count: 0, ms: 0 }) };
    const { codec } = model;
    this.spelling = {
      encode: (text) => codec.encode(text, { addSpecialTokens: false }),
      decode: (ids) => codec.decode(ids, { skipSpecialTokens: false }),
    };
    this.chat = chatApi({
      modelId: model.id,
      contextLength: model.runner.capacity,
      render: (messages, tools) => this.render(messages, tools),
      generate: (ids, options) => this.generate(ids, options),
      stats: () => this.lastStats,
    });
  }

  /** The GPU context the model is on now (a new one after a loss); undefined off the GPU. */
  get gpu(): GpuContext | undefined {
    return this.model.gpu;
  }

  /** The model's id. */
  get modelId(): string {
    return this.model.id;
  }

  /** Tokens of context every request shares: the KV cache's capacity (see {@link WeftEngine}). */
  get contextLength(): number {
    return this.model.runner.capacity;
  }

  /** Token ids of `text` as the model's tokenizer encodes a prompt (with BOS when it uses one). */
  tokenize(text: string): number[] {
    return this.model.codec.encode(text, { addSpecialTokens: true });
  }

  /**
   * Generates from a prompt (text, or token ids used as given) and yields chunks of new ids with
   * their text as they are produced. Breaking out of the loop or aborting `options.signal` ends
   * the request; the engine stays usable.
   */
  async *generate(
    prompt: string | readonly number[],
    options: GenerateOptions = {},
  ): AsyncGenerator<GenerationChunk> {
    const ids = typeof prompt === 'string' ? this.tokenize(prompt) : [...prompt];
    const release = await this.acquire(options.signal);
    try {
      yield* this.run(ids, options);
    } finally {
      release();
    }
  }

  /** Frees the model's GPU memory. Later requests throw {@link EngineClosedError}. */
  async unload(): Promise<void> {
    this.closed = true;
    await this.queue.catch(() => {});
    this.model.runner.dispose();
    this.model.drafter?.dispose();
    (await this.grammars?.catch(() => undefined))?.dispose();
  }

  private async acquire(signal: AbortSignal | undefined): Promise<() => void> {
    if (this.closed) throw new EngineClosedError('engine was unloaded');
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const before = this.queue;
    this.queue = before.then(() => mine);
    await before;
    if (this.closed) {
      release();
      throw new EngineClosedError('engine was unloaded');
    }
    if (signal?.aborted) {
      release();
      throw new AbortError('request aborted before it started');
    }
    return release;
  }

  /**
   * The governor of adaptive speculation for a drafter, budget and sampling mode (greedy or not),
   * kept across requests so that what one request measured serves the next.
   */
  private governorFor(drafter: Drafter, budget: number, sampler: SamplerSpec): SpeculationGovernor {
    const key = `${drafter.name}/${budget}/${sampler.temperature > 0 ? 'sampled' : 'greedy'}`;
    let g = this.governors.get(key);
    if (!g) {
      g = new SpeculationGovernor();
      this.governors.set(key, g);
    }
    return g;
  }

  /** The drafter a request asked for; by default the engine's draft model when it has one. */
  private drafterFor(o: GenerateOptions): Drafter | undefined {
    const kind = o.drafter ?? (this.model.drafter ? 'draft' : 'none');
    switch (kind) {
      case 'none':
        return undefined;
      case 'ngram':
        return this.ngram;
      case 'draft':
        if (!this.model.drafter)
          throw new InvalidInputError('drafter "draft" needs a draft model: createEngine({ draft: ... })');
        return this.model.drafter;
      default:
        throw new InvalidInputError(
          `drafter must be "none", "ngram" or "draft", got ${JSON.stringify(kind)}`,
        );
    }
  }

  /** Whether a request verifies by the classic rejection rule (sampling only; greedy ignores it). */
  private usesRejection(o: GenerateOptions, sampler: SamplerSpec): boolean {
    const acceptance = o.acceptance ?? this.model.acceptance ?? 'gumbel';
    if (acceptance !== 'gumbel' && acceptance !== 'rejection')
      throw new InvalidInputError(
        `acceptance must be "gumbel" or "rejection", got ${JSON.stringify(acceptance)}`,
      );
    return acceptance === 'rejection' && sampler.temperature > 0;
  }

  private sampler(o: GenerateOptions): SamplerSpec {
    const temperature = o.temperature ?? 0;
    const topP = o.topP ?? 1;
    const topK = o.topK ?? 0;
    if (!(temperature >= 0)) throw new InvalidInputError(`temperature must be >= 0, got ${temperature}`);
    if (!(topP > 0 && topP <= 1)) throw new InvalidInputError(`top_p must be in (0, 1], got ${topP}`);
    if (!Number.isInteger(topK) || topK < 0)
      throw new InvalidInputError(`top_k must be an integer >= 0, got ${topK}`);
    return { temperature, topP, topK, seed: o.seed ?? 0 };
  }

  /** The request's constraint, compiled and at its start; undefined for free text. */
  private async constraintFor(o: GenerateOptions): Promise<Constraint | undefined> {
    const specs: ConstraintSpec[] = [
      ...(o.json ? [{ kind: 'json' as const }] : []),
      ...(o.jsonSchema !== undefined ? [{ kind: 'json_schema' as const, schema: o.jsonSchema }] : []),
      ...(o.grammar !== undefined ? [{ kind: 'grammar' as const, ebnf: o.grammar }] : []),
      ...(o.regex !== undefined ? [{ kind: 'regex' as const, pattern: o.regex }] : []),
      ...(o.structuralTag !== undefined ? [{ kind: 'structural_tag' as const, tag: o.structuralTag }] : []),
    ];
    if (specs.length === 0) return undefined;
    if (specs.length > 1)
      throw new InvalidInputError('give at most one of json, jsonSchema, grammar, regex and structuralTag');
    const { codec, runner } = this.model;
    const vocabulary = codec.vocabulary?.();
    if (!vocabulary) throw new InvalidInputError("constrained decoding needs the tokenizer's vocabulary");
    this.grammars ??= GrammarCompiler.create({ ...vocabulary, eosIds: codec.eosIds });
    const compiler = await this.grammars;
    if (compiler.vocab !== runner.spec.vocabSize)
      throw new InvalidInputError(
        `constrained decoding: vocabulary of ${compiler.vocab} tokens, the model has ${runner.spec.vocabSize}`,
      );
    return compiler.compile(specs[0]!);
  }

  private async *run(prompt: number[], o: GenerateOptions): AsyncGenerator<GenerationChunk> {
    const constraint = await this.constraintFor(o);
    try {
      yield* this.decode(prompt, o, constraint);
    } finally {
      constraint?.dispose();
    }
  }

  /**
   * One request after its constraint is compiled: checks its options, then runs it
   * ({@link Engine.stream}) until it ends. When the device is lost the model is placed again on a
   * new one ({@link Engine.recover}) and the request runs on from its prompt and the tokens it has
   * emitted: their prefill rebuilds the KV cache, and the sampler's noise, keyed by position,
   * makes the text the one an uninterrupted run gives. A second loss within
   * {@link RELOSS_WINDOW_MS} of a recovery ends the request with {@link DeviceLostError}.
   */
  private async *decode(
    prompt: number[],
    o: GenerateOptions,
    constraint: Constraint | undefined,
  ): AsyncGenerator<GenerationChunk> {
    const maxTokens = o.maxTokens ?? 256;
    const sampler = this.sampler(o);
    if (prompt.length === 0) throw new InvalidInputError('prompt is empty');
    if (!Number.isInteger(maxTokens) || maxTokens < 1)
      throw new InvalidInputError(`max_tokens must be >= 1, got ${maxTokens}`);
    // Prompt and completion share the context: the prompt must leave room for one token, and the
    // completion ends ('length') where the context does, whatever max_tokens asked.
    const { capacity, spec } = this.model.runner;
    if (prompt.length >= capacity) throw new ContextLengthError(prompt.length, capacity, spec.maxPositions);
    // A device lost since the last request (or while it ended it) is replaced first.
    const idle = this.model.gpu?.lostError;
    if (idle) await this.recover(idle);
    const limit = Math.min(maxTokens, capacity - prompt.length);
    const req: Request = {
      prompt,
      o,
      constraint,
      sampler,
      limit,
      output: new TokenOutput(this.model.codec, o.stop, limit, constraint),
      tally: new DecodeTally(this.model.runner),
      abortCheck: () => {
        if (o.signal?.aborted) throw new AbortError('request aborted');
      },
      reused: undefined,
      drafterBytes: undefined,
    };
    let recovered: number | undefined;
    try {
      for (;;) {
        try {
          yield* this.stream(req);
          return;
        } catch (err) {
          const lost = await lossBehind(this.model.gpu, err);
          if (!lost) throw err;
          if (recovered !== undefined && now() - recovered < RELOSS_WINDOW_MS)
            throw new DeviceLostError(
              lost.reason,
              `lost again ${Math.round(now() - recovered)} ms after weft placed the model on a new device; the request ends, and the next one places the model again (cause: the loss)`,
              { cause: lost },
            );
          await this.recover(lost);
          recovered = now();
          req.tally.rebind(this.model.runner);
        }
      }
    } finally {
      if (req.reused !== undefined) {
        this.lastStats = req.tally.stats(
          { tokens: prompt.length, reused: req.reused },
          req.output.count,
          req.drafterBytes,
          this.losses,
        );
        this.losses = { count: 0, ms: 0 };
      }
    }
  }

  /**
   * Places the model again on a new device after `lost` (see {@link EngineModel.replace}), with an
   * empty KV cache; throws `lost` where it cannot, or why no new device could be had (the next
   * request tries again).
   */
  private async recover(lost: DeviceLostError): Promise<void> {
    const { replace } = this.model;
    if (!replace) throw lost;
    const t0 = now();
    const model = await replace(lost);
    // What the old runner and drafter hold is on the lost device: gone with it.
    this.model.runner.dispose();
    this.model.drafter?.dispose();
    this.model = model;
    this.cached = new CachedPrefix(model.runner);
    this.losses.count++;
    this.losses.ms += now() - t0;
  }

  /**
   * Runs `req` on the engine's runner from its prompt and the tokens it has emitted: prefill them
   * (reusing the cached prefix), then stream tokens step by step, each step plain (the
   * device-resident session, or one host pass under a constraint) or speculative
   * ({@link Engine.speculate}), until EOS, a stop string, the token limit or the context ends it.
   * Statistics go to the request's {@link DecodeTally}.
   */
  private async *stream(req: Request): AsyncGenerator<GenerationChunk> {
    const { runner } = this.model;
    const { o, constraint, sampler, limit, output, tally, abortCheck } = req;
    const context = [...req.prompt, ...output.ids];
    const chunk = o.prefillChunk ?? 64;

    // Reuse the cached rows of the longest shared prefix and prefill the rest.
    const prefill = await this.cached.sync(context, sampler, chunk, abortCheck, await constraint?.mask());
    tally.prefilled(prefill.passes);
    req.reused ??= prefill.reused;
    const experts = await runner.expertTally?.();
    const cache = runner.expertCache?.();
    const drafter = this.drafterFor(o);
    req.drafterBytes = drafter?.weightBytesPerPass;
    const rejection = this.usesRejection(o, sampler);
    const { loop, budget, speculation, jumpForward } = stepOptions(o);
    if (constraint && drafter && rejection)
      throw new InvalidInputError(
        'acceptance "rejection" does not run under a constraint (json, jsonSchema, grammar, regex): use "gumbel"',
      );
    // A model drafter takes in the context now, so that each speculative step runs only the tokens
    // after it (one chain pass in the step's own submission). Its time counts as decoding's.
    if (drafter?.prefill && limit - output.count > 1) await drafter.prefill(context, sampler, abortCheck);
    const governor =
      drafter && speculation === 'adaptive' ? this.governorFor(drafter, budget, sampler) : undefined;
    // Tokens the target chose and nobody has seen yet; all but the last are already in the cache.
    let pending = [prefill.next];
    let tree: DraftTreeView | undefined;
    // Plain decoding on a runner that keeps the loop on the device: opened at the first step.
    let session: DecodeSession | undefined;
    try {
      for (;;) {
        const out = output.take(pending, tree);
        yield { ...out.chunk, progress: tally.progress() };
        if (out.done) break;
        abortCheck();
        const before = runner.deviceCounts?.();
        const last = pending.at(-1)!;
        const room = runner.capacity - this.cached.tokens.length - 1;
        // Speculate, or take a plain step where the governor found plain decoding faster.
        const speculator =
          drafter && room >= 1 && (governor?.next() ?? 'speculate') === 'speculate' ? drafter : undefined;
        const kind: StepKind = speculator ? 'speculate' : 'plain';
        // Under a grammar, the tree's nodes in all (forced ones included): no more than the verify
        // pass's rows, the cache's room, and the tokens the request may still emit after this step's
        // own choice. With jump-forward a step without a drafter drafts what the grammar forces.
        const grammarNodes = Math.min(MAX_FORWARD_TOKENS - 1, room, limit - output.count - 1);
        const jump = !speculator && constraint !== undefined && jumpForward && grammarNodes >= 1;
        const tStep = now();
        if (speculator || jump) {
          // Leaving the plain loop: its run-ahead step is dropped (its row was never committed).
          session?.close();
          session = undefined;
          const step = await this.speculate(speculator, last, Math.min(budget, room), sampler, tally, {
            device: loop === 'device' && !rejection && !constraint,
            rejection: rejection && speculator !== undefined,
            constraint,
            jumpForward,
            grammarNodes,
          });
          pending = step.emitted;
          tree = step.tree;
        } else if (!constraint && runner.decode && !runner.hostDriven && loop === 'device') {
          // The session runs `last` (the id it sampled a step ago) and commits its row; it may
          // have queued the step after, which close() drops if `last`'s successor ends the request.
          // (A constrained step needs its mask from the CPU before it runs: no run-ahead loop.)
          session ??= runner.decode(last, sampler, limit - output.count);
          pending = [await session.next()];
          this.cached.push([last]);
          tree = undefined;
        } else {
          const masks = await constraint?.mask();
          const next = await runner.forward({ tokens: [last], masks }, sampler, 'last');
          runner.commit([0]);
          this.cached.push([last]);
          pending = [next[0]!];
          tree = undefined;
        }
        governor?.record(kind, now() - tStep, pending.length);
        tally.step(pending.length, before);
      }
    } finally {
      session?.close();
      // (A lost device has no tallies to read: the stats go without them.)
      const after = experts && (await runner.expertTally?.().catch(() => undefined));
      if (experts && after) tally.experts(experts, after);
      const cached = cache && runner.expertCache?.();
      if (cache && cached) tally.expertCache(cache, cached);
    }
  }

  /**
   * One speculative step after `last`: a draft of up to `n` tokens, run whole on the device where
   * the drafter can (a draft model on the target's GPU: drafting, verification and the commit in
   * one submission), else proposed by the drafter and verified from the host by Gumbel
   * sample-and-match or, on chains, the rejection rule. Under a grammar the drafter grows its tree
   * on the grammar's paths, at most `grammarNodes` nodes, with the forced tokens as free nodes
   * under `jumpForward` (without a drafter, the draft is the grammar's forced chain: see
   * jumpDraft), and every row is verified under its own mask. Commits the accepted path to the
   * cached prefix.
   */
  private async speculate(
    drafter: Drafter | undefined,
    last: number,
    n: number,
    sampler: SamplerSpec,
    tally: DecodeTally,
    o: {
      device: boolean;
      rejection: boolean;
      constraint: Constraint | undefined;
      jumpForward: boolean;
      grammarNodes: number;
    },
  ): Promise<{ emitted: number[]; tree: DraftTreeView }> {
    const { runner } = this.model;
    const t1 = now();
    const context = [...this.cached.tokens, last];
    const device =
      o.device && drafter?.speculate ? await drafter.speculate(runner, context, n, sampler) : undefined;
    let draft: DraftProposal;
    let step: VerifyStep;
    if (device) {
      tally.drafted(device.draftPasses);
      draft = device.draft;
      step = device;
      tally.deviceStepMs += now() - t1;
    } else {
      // Under a grammar the tree grows on its paths (without a drafter: its forced chain), and
      // constrainDraft gives every node its mask, walking the grammar back to where it was.
      const walk = o.constraint && new GrammarWalk(o.constraint, this.spelling);
      const grammar: DraftGrammar | undefined = walk && {
        walk,
        jumpForward: o.jumpForward,
        maxNodes: o.grammarNodes,
      };
      const proposed: DraftProposal = drafter
        ? await drafter.propose(context, n, sampler, o.rejection ? 'chain' : 'tree', grammar)
        : grammar
          ? await jumpDraft(grammar)
          : EMPTY_PROPOSAL;
      const constrained = walk && (await constrainDraft(walk, proposed));
      if (proposed.passes !== undefined) tally.drafted(proposed.passes);
      draft = constrained?.draft ?? proposed;
      const t2 = now();
      step = o.rejection
        ? await verifyChain(runner, last, draft, sampler)
        : await verify(runner, last, draft, sampler, constrained?.masks);
      tally.verifyMs += now() - t2;
      tally.draftMs += t2 - t1;
    }
    this.cached.push([last, ...step.accepted.map((i) => draft.tokens[i]!)]);
    return {
      emitted: step.emitted,
      tree: draftTreeView(draft, step, (id) => this.model.codec.decode([id], { skipSpecialTokens: false })),
    };
  }

  /** Token ids of a conversation rendered with the model's chat template, ready to generate from. */
  async render(messages: readonly ChatMessage[], tools?: readonly ChatTool[]): Promise<number[]> {
    const { codec } = this.model;
    if (!Array.isArray(messages) || messages.length === 0)
      throw new InvalidInputError('messages must be a non-empty array');
    for (const [i, m] of messages.entries()) {
      if (
        !m ||
        !['system', 'user', 'assistant', 'tool'].includes(m.role) ||
        typeof m.content !== 'string' ||
        (m.tool_calls !== undefined && (m.role !== 'assistant' || !Array.isArray(m.tool_calls)))
      ) {
        throw new InvalidInputError(
          `messages[${i}] must be { role: "system" | "user" | "assistant" | "tool", content: string } (tool_calls: an assistant's array)`,
        );
      }
    }
    if (tools !== undefined && (!Array.isArray(tools) || tools.some((t) => t?.type !== 'function')))
      throw new InvalidInputError(
        'tools must be an array of { type: "function", function: { name, parameters } }',
      );
    if (codec.applyChatTemplate) {
      // The template adds BOS itself where the model wants it.
      const text = codec.applyChatTemplate(messages, {
        addGenerationPrompt: true,
        tools,
      });
      return codec.encode(text, { addSpecialTokens: false });
    }
    if (tools) throw new InvalidInputError('tools need a model with a chat template');
    // Base model: continue the plain text of the conversation.
    return this.tokenize(messages.map((m) => m.content).join('\n'));
  }
}
