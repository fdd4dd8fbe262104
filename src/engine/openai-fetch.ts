// OpenAI's HTTP API answered in the page: a `fetch` that serves `POST …/chat/completions`,
// `POST …/completions` and `GET …/models` from an engine, so that the official `openai` client and
// the AI SDK's OpenAI-compatible provider run against it unchanged. Requests are read as an
// OpenAI server reads them; replies are JSON, or server-sent events when `stream` is set; errors
// are OpenAI's error bodies with the status of their weft class. Nothing leaves the page.
import { ContextLengthError, InvalidInputError, WeftError } from '../errors.js';
import { GrammarError } from '../grammar/errors.js';
import type { WeftEngine } from './engine.js';
import type {
  ChatCompletionRequest,
  ChatMessage,
  ChatTool,
  CompletionUsage,
  FinishReason,
  GenerateOptions,
  ResponseFormat,
  ToolCall,
  ToolChoice,
} from './types.js';

/**
 * What {@link createOpenAIFetch} needs of an engine: the public surface every engine offers, the
 * in-thread `Engine` and the `WorkerEngine` alike.
 */
export type OpenAIFetchEngine = Pick<WeftEngine, 'modelId' | 'chat' | 'generate' | 'lastStats'>;

/** A `fetch`: what the `fetch` options of the OpenAI client and the AI SDK's providers take. */
export type FetchFunction = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/**
 * A `fetch` that answers OpenAI's API from `engine`, at any base URL: `POST …/chat/completions`
 * (messages, tools and `tool_choice`, `response_format`, `stream` with `stream_options.include_usage`),
 * `POST …/completions` (a prompt's text or token ids) and `GET …/models` (the engine's model).
 * Streamed replies are server-sent events (`data: {…}` per chunk, then `data: [DONE]`). A request
 * the engine refuses (an invalid field, a bad schema or grammar, a prompt past the context) is a
 * 400 with OpenAI's error body `{ error: { message, type, param, code } }` and the engine's
 * message; an unknown route or model is a 404, anything else a 500. The request's `signal` aborts
 * it, before or during the reply, as it aborts a real `fetch`; the engine is then free for the
 * next request. Give it to the OpenAI client as
 * `new OpenAI({ baseURL: 'https://weft.local/v1', apiKey: 'unused', fetch: createOpenAIFetch(engine), dangerouslyAllowBrowser: true })`.
 */
export function createOpenAIFetch(engine: OpenAIFetchEngine): FetchFunction {
  return async (input, init) => {
    const request = new Request(input, init);
    // The caller's own signal: the one a Request derives follows it only while the Request lives
    // (Node's undici holds its controller weakly), and the request is done with once read.
    const signal = init?.signal ?? (input instanceof Request ? input.signal : new AbortController().signal);
    if (signal.aborted) throw signal.reason;
    try {
      return await route(engine, request, signal);
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      return errorResponse(err);
    }
  };
}

/** An answer that is not the engine's: an unknown route or model. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

async function route(engine: OpenAIFetchEngine, request: Request, signal: AbortSignal): Promise<Response> {
  const path = new URL(request.url).pathname.replace(/\/+$/, '');
  const { method } = request;
  if (method === 'POST' && path.endsWith('/chat/completions'))
    return chatCompletions(engine, await bodyOf(request), signal);
  if (method === 'POST' && path.endsWith('/completions'))
    return completions(engine, await bodyOf(request), signal);
  if (method === 'GET' && path.endsWith('/models'))
    return json({ object: 'list', data: [modelObject(engine.modelId)] });
  const named = /\/models\/([^/]+)$/.exec(path);
  if (method === 'GET' && named) {
    checkModel(engine, decodeURIComponent(named[1]!));
    return json(modelObject(engine.modelId));
  }
  throw new HttpError(404, `Invalid URL (${method} ${path})`);
}

function modelObject(id: string) {
  return { id, object: 'model', created: 0, owned_by: 'weft' };
}

function checkModel(engine: OpenAIFetchEngine, model: string | undefined): void {
  if (model !== undefined && model !== engine.modelId)
    throw new HttpError(
      404,
      `The model ${JSON.stringify(model)} does not exist: this engine serves ${JSON.stringify(engine.modelId)}`,
      'model_not_found',
      'model',
    );
}

/** A request body as a JSON object. */
type Body = Record<string, unknown>;

const isBody = (v: unknown): v is Body => typeof v === 'object' && v !== null && !Array.isArray(v);
const isString = (v: unknown): v is string => typeof v === 'string';
const isNumber = (v: unknown): v is number => typeof v === 'number';
const isBoolean = (v: unknown): v is boolean => typeof v === 'boolean';
const isArray = (v: unknown): v is unknown[] => Array.isArray(v);
const isIds = (v: unknown): v is number[] =>
  Array.isArray(v) && v.length > 0 && v.every((id) => Number.isInteger(id) && id >= 0);
const isTruncate = (v: unknown): v is 'none' | 'oldest' => v === 'none' || v === 'oldest';
const isStop = (v: unknown): v is string | string[] =>
  typeof v === 'string' || (Array.isArray(v) && v.every(isString));

async function bodyOf(request: Request): Promise<Body> {
  let body: unknown;
  try {
    body = JSON.parse(await request.text());
  } catch (cause) {
    throw new InvalidInputError(`the request body is not JSON: ${cause}`, { cause });
  }
  if (!isBody(body)) throw new InvalidInputError('the request body must be a JSON object');
  return body;
}

/** `body[key]` when it is given (not null), checked by `is`. */
function field<T>(body: Body, key: string, is: (v: unknown) => v is T, what: string): T | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (!is(v)) throw new InvalidInputError(`${key} must be ${what}, got ${JSON.stringify(v)}`);
  return v;
}

/** Refuses the fields this server cannot honour, unless they ask for the default. */
function refuseUnsupported(body: Body, defaults: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(defaults)) {
    const v = body[key];
    if (v !== undefined && v !== null && v !== value)
      throw new InvalidInputError(
        `${key} is not supported: leave it out, or set it to ${JSON.stringify(value)}`,
      );
  }
}

/** The stream options of a request: whether a last chunk carries the usage. */
function includeUsage(body: Body): boolean {
  const o = field(body, 'stream_options', isBody, 'an object');
  return field(o ?? {}, 'include_usage', isBoolean, 'a boolean') ?? false;
}

async function chatCompletions(engine: OpenAIFetchEngine, body: Body, signal: AbortSignal) {
  const req = chatRequest(engine, body, signal);
  if (!field(body, 'stream', isBoolean, 'a boolean')) return json(await engine.chat.completions.create(req));
  const stream = await engine.chat.completions.create({ ...req, stream: true });
  const usage = includeUsage(body);
  return streamed(
    (async function* () {
      for await (const chunk of stream) {
        // The last chunk carries the usage; OpenAI sends it apart, in a chunk without choices.
        const { usage: figures, ...rest } = chunk;
        yield rest;
        if (figures && usage) yield { ...rest, choices: [], usage: figures };
      }
    })(),
    signal,
  );
}

/** A chat request as the engine reads it, from OpenAI's body. */
function chatRequest(engine: OpenAIFetchEngine, body: Body, signal: AbortSignal): ChatCompletionRequest {
  checkModel(engine, field(body, 'model', isString, 'a string'));
  refuseUnsupported(body, { n: 1, logprobs: false, frequency_penalty: 0, presence_penalty: 0 });
  const messages = field(body, 'messages', isArray, 'an array');
  if (!messages) throw new InvalidInputError('messages must be a non-empty array');
  const tools = field(body, 'tools', isArray, 'an array');
  const choice = body.tool_choice;
  const format = field(body, 'response_format', isBody, 'an object');
  const truncate = field(body, 'truncate', isTruncate, '"none" or "oldest"');
  return {
    messages: messages.map(messageOf),
    max_tokens:
      field(body, 'max_completion_tokens', isNumber, 'a number') ??
      field(body, 'max_tokens', isNumber, 'a number'),
    temperature: field(body, 'temperature', isNumber, 'a number'),
    top_p: field(body, 'top_p', isNumber, 'a number'),
    seed: field(body, 'seed', isNumber, 'a number'),
    stop: field(body, 'stop', isStop, 'a string or an array of strings'),
    ...(tools ? { tools: tools.map(toolOf) } : {}),
    ...(choice !== undefined && choice !== null ? { tool_choice: toolChoiceOf(choice) } : {}),
    ...(format ? { response_format: responseFormatOf(format) } : {}),
    ...(truncate ? { truncate } : {}),
    signal,
  };
}

const ROLES = ['system', 'user', 'assistant', 'tool'] as const;
const isRole = (v: unknown): v is ChatMessage['role'] => ROLES.some((r) => r === v);

/** A message of the request: text content (parts joined), OpenAI's tool calls and tool results. */
function messageOf(m: unknown, i: number): ChatMessage {
  if (!isBody(m)) throw new InvalidInputError(`messages[${i}] must be an object, got ${JSON.stringify(m)}`);
  // 'developer' is what newer OpenAI models call the system message.
  const role = m.role === 'developer' ? 'system' : m.role;
  if (!isRole(role))
    throw new InvalidInputError(
      `messages[${i}].role must be "system", "developer", "user", "assistant" or "tool", got ${JSON.stringify(m.role)}`,
    );
  const calls = field(m, 'tool_calls', isArray, 'an array');
  const callId = field(m, 'tool_call_id', isString, 'a string');
  return {
    role,
    content: contentOf(m.content, i),
    ...(calls ? { tool_calls: calls.map((c, j) => toolCallOf(c, `messages[${i}].tool_calls[${j}]`)) } : {}),
    ...(callId !== undefined ? { tool_call_id: callId } : {}),
  };
}

function contentOf(content: unknown, i: number): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .map((part, j) => {
        if (isBody(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
        throw new InvalidInputError(
          `messages[${i}].content[${j}]: only text parts are supported, got ${JSON.stringify(isBody(part) ? part.type : part)}`,
        );
      })
      .join('');
  throw new InvalidInputError(
    `messages[${i}].content must be a string or an array of text parts, got ${JSON.stringify(content)}`,
  );
}

function toolCallOf(c: unknown, where: string): ToolCall {
  const f = isBody(c) ? c.function : undefined;
  if (!isBody(c) || typeof c.id !== 'string' || !isBody(f) || typeof f.name !== 'string')
    throw new InvalidInputError(
      `${where} must be { id, type: "function", function: { name, arguments } }, got ${JSON.stringify(c)}`,
    );
  const args = f.arguments ?? '{}';
  if (typeof args !== 'string')
    throw new InvalidInputError(`${where}.function.arguments must be JSON text, got ${JSON.stringify(args)}`);
  return { id: c.id, type: 'function', function: { name: f.name, arguments: args } };
}

function toolOf(t: unknown, i: number): ChatTool {
  const f = isBody(t) ? t.function : undefined;
  if (!isBody(t) || t.type !== 'function' || !isBody(f) || typeof f.name !== 'string')
    throw new InvalidInputError(
      `tools[${i}] must be { type: "function", function: { name, description?, parameters? } }, got ${JSON.stringify(t)}`,
    );
  const description = field(f, 'description', isString, 'a string');
  return {
    type: 'function',
    function: {
      name: f.name,
      ...(description !== undefined ? { description } : {}),
      ...(f.parameters !== undefined ? { parameters: f.parameters } : {}),
    },
  };
}

function toolChoiceOf(choice: unknown): ToolChoice {
  if (choice === 'none' || choice === 'auto' || choice === 'required') return choice;
  const f = isBody(choice) ? choice.function : undefined;
  if (isBody(f) && typeof f.name === 'string') return { type: 'function', function: { name: f.name } };
  throw new InvalidInputError(
    `tool_choice must be "none", "auto", "required" or { type: "function", function: { name } }, got ${JSON.stringify(choice)}`,
  );
}

function responseFormatOf(format: Body): ResponseFormat {
  if (format.type === 'text' || format.type === 'json_object') return { type: format.type };
  const spec = format.json_schema;
  if (format.type === 'json_schema' && isBody(spec) && spec.schema !== undefined)
    return {
      type: 'json_schema',
      json_schema: { name: field(spec, 'name', isString, 'a string') ?? 'response', schema: spec.schema },
    };
  throw new InvalidInputError(
    `response_format must be { type: "text" }, { type: "json_object" } or { type: "json_schema", json_schema: { name, schema } }, got ${JSON.stringify(format)}`,
  );
}

let counter = 0;

/** `POST …/completions`: a prompt (text or token ids) continued by `engine.generate`. */
async function completions(engine: OpenAIFetchEngine, body: Body, signal: AbortSignal) {
  checkModel(engine, field(body, 'model', isString, 'a string'));
  refuseUnsupported(body, { n: 1, best_of: 1, echo: false, logprobs: 0, suffix: '' });
  const prompt = promptOf(body.prompt);
  const options: GenerateOptions = {
    // OpenAI's defaults for this endpoint.
    maxTokens: field(body, 'max_tokens', isNumber, 'a number') ?? 16,
    temperature: field(body, 'temperature', isNumber, 'a number') ?? 1,
    topP: field(body, 'top_p', isNumber, 'a number') ?? 1,
    seed: field(body, 'seed', isNumber, 'a number') ?? 0,
    stop: field(body, 'stop', isStop, 'a string or an array of strings'),
    signal,
  };
  const base = {
    id: `cmpl-weft-${Date.now().toString(36)}-${++counter}`,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model: engine.modelId,
  };
  const choice = (text: string, finish: FinishReason | null) => ({
    text,
    index: 0,
    logprobs: null,
    finish_reason: finish,
  });
  const usage = (): CompletionUsage => {
    const s = engine.lastStats;
    const prompt_tokens = s?.prompt_tokens ?? 0;
    const completion_tokens = s?.completion_tokens ?? 0;
    return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
  };
  if (!field(body, 'stream', isBoolean, 'a boolean')) {
    let text = '';
    let finish: FinishReason = 'length';
    for await (const c of engine.generate(prompt, options)) {
      text += c.text;
      if (c.finishReason) finish = c.finishReason;
    }
    return json({ ...base, choices: [choice(text, finish)], usage: usage() });
  }
  const usageChunk = includeUsage(body);
  return streamed(
    (async function* () {
      for await (const c of engine.generate(prompt, options))
        if (c.text || c.finishReason) yield { ...base, choices: [choice(c.text, c.finishReason ?? null)] };
      if (usageChunk) yield { ...base, choices: [], usage: usage() };
    })(),
    signal,
  );
}

/** The prompt of a completions request: text or token ids (one of each, or a list of one). */
function promptOf(prompt: unknown): string | number[] {
  const one = isArray(prompt) && prompt.length === 1 && !isNumber(prompt[0]) ? prompt[0] : prompt;
  if (isString(one) || isIds(one)) return one;
  throw new InvalidInputError(
    `prompt must be a string or an array of token ids (one prompt: n > 1 is not supported), got ${JSON.stringify(prompt)}`,
  );
}

function json(value: unknown, status = 200): Response {
  return new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json' } });
}

/**
 * OpenAI's error body of `err`, with its status: 400 for what the request got wrong (weft's
 * InvalidInputError, GrammarError, ContextLengthError), 404 for an unknown route or model, else
 * 500. The code is OpenAI's where it has one (`context_length_exceeded`), else weft's class name.
 */
function errorOf(err: unknown): { status: number; body: { error: Record<string, unknown> } } {
  const message = err instanceof Error ? err.message : String(err);
  const bad =
    err instanceof InvalidInputError || err instanceof GrammarError || err instanceof ContextLengthError;
  const status = err instanceof HttpError ? err.status : bad ? 400 : 500;
  const code =
    err instanceof HttpError
      ? err.code
      : err instanceof ContextLengthError
        ? 'context_length_exceeded'
        : err instanceof WeftError
          ? err.name
          : null;
  const param = err instanceof HttpError ? err.param : err instanceof ContextLengthError ? 'messages' : null;
  const type = status === 500 ? 'server_error' : 'invalid_request_error';
  return { status, body: { error: { message, type, param, code } } };
}

function errorResponse(err: unknown): Response {
  const { status, body } = errorOf(err);
  // The engine answers the same request the same way: a client need not retry it.
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json', 'x-should-retry': 'false' },
  });
}

/**
 * A streamed reply: `events` as server-sent events, then `data: [DONE]`. The first event is
 * awaited before answering, so a request the engine refuses is an error status, not a stream.
 * An error later in the stream is sent as an event of OpenAI's error body (as OpenAI's servers
 * do); an abort of `signal` errors the body with the signal's reason, as `fetch` does. Either
 * way, and when the reader cancels, the request is ended in the engine.
 */
async function streamed(events: AsyncGenerator<object>, signal: AbortSignal): Promise<Response> {
  const first = await events.next();
  const encoder = new TextEncoder();
  const data = (text: string) => encoder.encode(`data: ${text}\n\n`);
  let ended = false;
  let onAbort = () => {};
  const end = () => {
    ended = true;
    signal.removeEventListener('abort', onAbort);
    // After a pending next(), if any: the engine's generator closes and frees the engine.
    events.return(undefined).catch(() => {});
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      onAbort = () => {
        if (ended) return;
        end();
        controller.error(signal.reason);
      };
      signal.addEventListener('abort', onAbort);
      if (first.done) {
        controller.enqueue(data('[DONE]'));
        controller.close();
        end();
      } else controller.enqueue(data(JSON.stringify(first.value)));
    },
    async pull(controller) {
      let next: IteratorResult<object>;
      try {
        next = await events.next();
      } catch (err) {
        if (ended) return;
        end();
        if (signal.aborted) controller.error(signal.reason);
        else {
          controller.enqueue(data(JSON.stringify(errorOf(err).body)));
          controller.close();
        }
        return;
      }
      if (ended) return;
      if (next.done) {
        controller.enqueue(data('[DONE]'));
        controller.close();
        end();
      } else controller.enqueue(data(JSON.stringify(next.value)));
    },
    cancel: end,
  });
  return new Response(body, {
    headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' },
  });
}
