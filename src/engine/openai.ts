import { InvalidInputError } from '../errors.js';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  CompletionUsage,
  FinishReason,
  GenerateOptions,
  GenerationChunk,
  GenerationStats,
} from './types.js';

/** `engine.chat.completions`: the OpenAI-compatible surface. */
export interface ChatApi {
  completions: {
    create(req: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
    create(req: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
    create(req: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  };
}

/** What the OpenAI layer needs from an engine. */
export interface ChatHost {
  readonly modelId: string;
  /** Tokens of context a request's prompt and completion share. */
  readonly contextLength: number;
  render(messages: readonly ChatMessage[]): Promise<number[]>;
  generate(ids: readonly number[], options: GenerateOptions): AsyncGenerator<GenerationChunk>;
  /** Stats of the request that just finished. */
  stats(): GenerationStats | undefined;
}

let counter = 0;

/** Builds `chat.completions.create` on top of an engine's `generate`. */
export function chatApi(host: ChatHost): ChatApi {
  async function create(
    req: ChatCompletionRequest,
  ): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    const maxTokens = req.max_tokens ?? 256;
    const truncate = req.truncate ?? 'none';
    if (truncate !== 'none' && truncate !== 'oldest')
      throw new InvalidInputError(`truncate must be "none" or "oldest", got ${JSON.stringify(truncate)}`);
    const prompt =
      truncate === 'oldest'
        ? await fitContext(host, req.messages, maxTokens)
        : await host.render(req.messages);
    const options: GenerateOptions = {
      maxTokens,
      temperature: req.temperature ?? 1,
      topP: req.top_p ?? 1,
      seed: req.seed ?? 0,
      ...(req.stop !== undefined ? { stop: req.stop } : {}),
      ...(req.signal ? { signal: req.signal } : {}),
    };
    const id = `chatcmpl-weft-${Date.now().toString(36)}-${++counter}`;
    const created = Math.floor(Date.now() / 1000);
    const model = host.modelId;
    const usage = (): CompletionUsage => {
      const s = host.stats();
      const prompt_tokens = s?.prompt_tokens ?? prompt.length;
      const completion_tokens = s?.completion_tokens ?? 0;
      return {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        ...(s ? { weft: s } : {}),
      };
    };
    if (!req.stream) {
      let content = '';
      let finish: FinishReason = 'length';
      for await (const c of host.generate(prompt, options)) {
        content += c.text;
        if (c.finishReason) finish = c.finishReason;
      }
      return {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finish }],
        usage: usage(),
      };
    }
    const gen = host.generate(prompt, options);
    return (async function* (): AsyncGenerator<ChatCompletionChunk> {
      const base = { id, object: 'chat.completion.chunk' as const, created, model };
      yield { ...base, choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }] };
      let finish: FinishReason = 'length';
      for await (const c of gen) {
        if (c.finishReason) finish = c.finishReason;
        if (c.text)
          yield { ...base, choices: [{ index: 0, delta: { content: c.text }, finish_reason: null }] };
      }
      // After the generator has finished, so the usage figures are this request's.
      yield { ...base, choices: [{ index: 0, delta: {}, finish_reason: finish }], usage: usage() };
    })();
  }
  // One implementation serves the overloads, which narrow the result by `stream`.
  return { completions: { create } } as ChatApi;
}

/**
 * The prompt of `messages` with the oldest turns dropped until it leaves `maxTokens` of room in
 * the context, as `truncate: 'oldest'` asks. System messages and the latest message always stay;
 * a dropped message takes the assistant replies right after it along, so what remains still opens
 * with a user turn. When only those remain the prompt is returned as it is: generate then refuses
 * it (ContextLengthError) if it cannot fit, or ends the completion at the context ('length').
 */
async function fitContext(
  host: ChatHost,
  messages: readonly ChatMessage[],
  maxTokens: number,
): Promise<number[]> {
  let prompt = await host.render(messages); // checks the messages first
  const kept = [...messages];
  while (prompt.length + maxTokens > host.contextLength) {
    const oldest = kept.findIndex((m) => m.role !== 'system');
    if (oldest < 0 || oldest >= kept.length - 1) break;
    kept.splice(oldest, 1);
    while (kept[oldest]?.role === 'assistant' && oldest < kept.length - 1) kept.splice(oldest, 1);
    prompt = await host.render(kept);
  }
  return prompt;
}
