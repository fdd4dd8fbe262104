import { InvalidInputError } from '../errors.js';
import { forcedCallTag, parseToolCalls, ToolCallParser } from './tools.js';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  ChatTool,
  CompletionUsage,
  FinishReason,
  GenerateOptions,
  GenerationChunk,
  GenerationStats,
  ResponseFormat,
  ToolCall,
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
  render(messages: readonly ChatMessage[], tools?: readonly ChatTool[]): Promise<number[]>;
  generate(ids: readonly number[], options: GenerateOptions): AsyncGenerator<GenerationChunk>;
  /** Stats of the request that just finished. */
  stats(): GenerationStats | undefined;
}

let counter = 0;

/**
 * The tools a request offers the template: none without `tools` or with tool_choice 'none'; only
 * the named one for a named tool_choice. ('required' and a named choice also force a call: see
 * {@link toolOptions}.)
 */
function offeredTools(req: ChatCompletionRequest): ChatTool[] | undefined {
  const { tools, tool_choice: choice } = req;
  const known = choice === undefined || choice === 'none' || choice === 'auto' || choice === 'required';
  if (!known && (typeof choice !== 'object' || choice === null || typeof choice.function?.name !== 'string'))
    throw new InvalidInputError(
      `tool_choice must be "none", "auto", "required" or { type: "function", function: { name } }, got ${JSON.stringify(choice)}`,
    );
  if (tools === undefined || tools.length === 0) {
    if (choice === 'required' || !known)
      throw new InvalidInputError(`tool_choice ${JSON.stringify(choice)} needs tools`);
    return undefined;
  }
  if (choice === 'none') return undefined;
  if (!Array.isArray(tools)) throw new InvalidInputError('tools must be an array');
  if (typeof choice === 'object' && choice !== null) {
    const named = tools.filter((t) => t.function?.name === choice.function?.name);
    if (named.length === 0)
      throw new InvalidInputError(
        `tool_choice names ${JSON.stringify(choice.function?.name)}, which is not in tools`,
      );
    return named;
  }
  return tools;
}

/**
 * The generate options of a request's tools: with tool_choice 'required' or a named function, the
 * reply is forced to be one call to one of `tools` (the offered ones: the named one alone), its
 * arguments valid under the tool's schema ({@link forcedCallTag}).
 */
function toolOptions(req: ChatCompletionRequest, tools: readonly ChatTool[] | undefined): GenerateOptions {
  const choice = req.tool_choice;
  if (!tools || choice === undefined || choice === 'auto') return {};
  if (req.response_format !== undefined && req.response_format.type !== 'text')
    throw new InvalidInputError(
      `tool_choice ${JSON.stringify(choice)} forces a tool call: it does not go with response_format ${JSON.stringify(req.response_format.type)}`,
    );
  return { structuralTag: forcedCallTag(tools) };
}

/** The generate options of OpenAI's `response_format`. */
function responseFormatOptions(format: ResponseFormat | undefined): GenerateOptions {
  if (format === undefined || format.type === 'text') return {};
  if (format.type === 'json_object') return { json: true };
  if (format.type === 'json_schema') {
    if (
      typeof format.json_schema !== 'object' ||
      format.json_schema === null ||
      !('schema' in format.json_schema)
    )
      throw new InvalidInputError('response_format.json_schema must be { name, schema }');
    return { jsonSchema: format.json_schema.schema };
  }
  throw new InvalidInputError(
    `response_format.type must be "text", "json_object" or "json_schema", got ${JSON.stringify((format as { type?: unknown }).type)}`,
  );
}

/** Builds `chat.completions.create` on top of an engine's `generate`. */
export function chatApi(host: ChatHost): ChatApi {
  async function create(
    req: ChatCompletionRequest,
  ): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    const maxTokens = req.max_tokens ?? 256;
    const truncate = req.truncate ?? 'none';
    if (truncate !== 'none' && truncate !== 'oldest')
      throw new InvalidInputError(`truncate must be "none" or "oldest", got ${JSON.stringify(truncate)}`);
    const tools = offeredTools(req);
    const prompt =
      truncate === 'oldest'
        ? await fitContext(host, req.messages, maxTokens, tools)
        : await host.render(req.messages, tools);
    const options: GenerateOptions = {
      maxTokens,
      temperature: req.temperature ?? 1,
      topP: req.top_p ?? 1,
      seed: req.seed ?? 0,
      stop: req.stop,
      signal: req.signal,
      ...responseFormatOptions(req.response_format),
      ...toolOptions(req, tools),
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
        weft: s,
      };
    };
    if (!req.stream) {
      let content = '';
      let finish: FinishReason = 'length';
      for await (const c of host.generate(prompt, options)) {
        content += c.text;
        if (c.finishReason) finish = c.finishReason;
      }
      const parsed = tools ? parseToolCalls(content) : { content, calls: [] };
      const message =
        parsed.calls.length > 0
          ? { role: 'assistant' as const, content: parsed.content, tool_calls: parsed.calls }
          : { role: 'assistant' as const, content };
      return {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message,
            finish_reason: parsed.calls.length > 0 && finish === 'stop' ? 'tool_calls' : finish,
          },
        ],
        usage: usage(),
      };
    }
    const gen = host.generate(prompt, options);
    return (async function* (): AsyncGenerator<ChatCompletionChunk> {
      const base = { id, object: 'chat.completion.chunk' as const, created, model };
      // The role comes with the engine's first chunk, as a server's does: so the stream's first
      // item is there once the prompt is prefilled, or it throws what refused the request.
      const first = await gen.next();
      yield { ...base, choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }] };
      let finish: FinishReason = 'length';
      // With tools, text inside tool-call markup becomes tool_calls deltas, one whole call each.
      const parser = tools ? new ToolCallParser() : undefined;
      let calls = 0;
      const deltas = (piece: { content: string; calls: ToolCall[] }) => {
        const out: ChatCompletionChunk[] = [];
        if (piece.content)
          out.push({
            ...base,
            choices: [{ index: 0, delta: { content: piece.content }, finish_reason: null }],
          });
        for (const call of piece.calls)
          out.push({
            ...base,
            choices: [
              { index: 0, delta: { tool_calls: [{ index: calls++, ...call }] }, finish_reason: null },
            ],
          });
        return out;
      };
      const chunks = async function* () {
        if (!first.done) yield first.value;
        yield* gen;
      };
      for await (const c of chunks()) {
        if (c.finishReason) finish = c.finishReason;
        if (c.text) yield* deltas(parser ? parser.push(c.text) : { content: c.text, calls: [] });
      }
      if (parser) yield* deltas(parser.finish());
      if (calls > 0 && finish === 'stop') finish = 'tool_calls';
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
 * a dropped message takes the assistant replies and tool results right after it along, so what remains still opens
 * with a user turn. When only those remain the prompt is returned as it is: generate then refuses
 * it (ContextLengthError) if it cannot fit, or ends the completion at the context ('length').
 */
async function fitContext(
  host: ChatHost,
  messages: readonly ChatMessage[],
  maxTokens: number,
  tools: readonly ChatTool[] | undefined,
): Promise<number[]> {
  let prompt = await host.render(messages, tools); // checks the messages first
  const kept = [...messages];
  while (prompt.length + maxTokens > host.contextLength) {
    const oldest = kept.findIndex((m) => m.role !== 'system');
    if (oldest < 0 || oldest >= kept.length - 1) break;
    kept.splice(oldest, 1);
    // The replies to it go too: the assistant's, and the results of the tools it called.
    const reply = (m: ChatMessage | undefined) => m?.role === 'assistant' || m?.role === 'tool';
    while (reply(kept[oldest]) && oldest < kept.length - 1) kept.splice(oldest, 1);
    prompt = await host.render(kept, tools);
  }
  return prompt;
}
