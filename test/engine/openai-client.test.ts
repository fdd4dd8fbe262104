// The official OpenAI client (`openai`) and the AI SDK (`ai` with `@ai-sdk/openai-compatible`),
// unchanged, against the bundled demo target (models/kjv-target, a base model of KJV text) on the
// CPU reference runner, through createOpenAIFetch: streamed text equal to the engine's own, JSON
// under a zod schema through weft's grammar, a tool-call round trip through the real Qwen3 chat
// template (forced by tool_choice 'required'), bad requests as the SDK's own error classes with
// weft's messages, and an abort mid-stream after which the engine serves the next request.
import { readFileSync } from 'node:fs';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, stepCountIs, streamText, tool } from 'ai';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import { createOpenAIFetch, type FetchFunction } from '../../src/engine/openai-fetch.js';
import type { ChatCompletion, ChatCompletionRequest, ChatMessage } from '../../src/engine/types.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { qwen3Template, withChatTemplate } from '../helpers/chat-template.js';

const BASE_URL = 'https://weft.local/v1';
let engine: Engine;
/** The same weights with Qwen3's chat template, which renders tools and tool calls. */
let qwen: Engine;
let client: OpenAI;
/** Every request body the clients sent to `engine`, in order. */
const bodies: Record<string, unknown>[] = [];

beforeAll(async () => {
  engine = await createEngine({
    model: await pathModel('models/kjv-target'),
    device: 'cpu',
    quant: 'f16',
    contextLength: 256,
  });
  qwen = await createEngine({
    model: await withChatTemplate('models/kjv-target', qwen3Template(), 'kjv-target+qwen3'),
    device: 'cpu',
    quant: 'f16',
    contextLength: 512,
  });
  client = new OpenAI({ baseURL: BASE_URL, apiKey: 'unused', fetch: recording(engine) });
}, 60_000);
afterAll(async () => {
  await engine.unload();
  await qwen.unload();
});

/** createOpenAIFetch(e), keeping each request's body in `bodies`. */
function recording(e: Engine): FetchFunction {
  const inner = createOpenAIFetch(e);
  return (input, init) => {
    if (typeof init?.body === 'string') bodies.push(JSON.parse(init.body));
    return inner(input, init);
  };
}

const messages = [{ role: 'user' as const, content: 'And God said' }];
const sampling = { max_tokens: 24, temperature: 1, seed: 7 };

/** The engine's own reply to `messages` with `sampling`, through generate. */
async function engineText(): Promise<string> {
  let text = '';
  for await (const c of engine.generate(await engine.render(messages), {
    maxTokens: sampling.max_tokens,
    temperature: sampling.temperature,
    seed: sampling.seed,
  }))
    text += c.text;
  return text;
}

describe('the OpenAI client', () => {
  it("streamed chat.completions.create yields the engine's text exactly, with usage", async () => {
    const want = await engineText();
    const direct = await engine.chat.completions.create({ messages, ...sampling });
    expect(direct.choices[0]!.message.content).toBe(want);
    expect(want.length).toBeGreaterThan(0);

    const stream = await client.chat.completions.create({
      model: engine.modelId,
      messages,
      ...sampling,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish ??= chunk.choices[0]?.finish_reason;
      usage ??= chunk.usage;
    }
    expect(text).toBe(want);
    expect(finish).toBe(direct.choices[0]!.finish_reason);
    expect(usage?.completion_tokens).toBe(engine.lastStats!.completion_tokens);
    expect(usage?.prompt_tokens).toBe((await engine.render(messages)).length);

    const whole = await client.chat.completions.create({ model: engine.modelId, messages, ...sampling });
    expect(whole.choices[0]!.message.content).toBe(want);
    expect(whole.usage?.completion_tokens).toBe(direct.usage.completion_tokens);
  }, 60_000);

  it('completions (text, streamed) and models answer as an OpenAI server does', async () => {
    let want = '';
    for await (const c of engine.generate('And God said,', { maxTokens: 16, temperature: 1, seed: 3 }))
      want += c.text;
    const request = { model: engine.modelId, prompt: 'And God said,', max_tokens: 16, seed: 3 };
    const whole = await client.completions.create(request);
    expect(whole.choices[0]!.text).toBe(want);
    let streamed = '';
    for await (const c of await client.completions.create({ ...request, stream: true }))
      streamed += c.choices[0]?.text ?? '';
    expect(streamed).toBe(want);

    expect((await client.models.list()).data.map((m) => m.id)).toEqual([engine.modelId]);
    expect((await client.models.retrieve(engine.modelId)).id).toBe(engine.modelId);
    await expect(client.models.retrieve('gpt-4o')).rejects.toThrow(OpenAI.NotFoundError);
  }, 60_000);

  it('chat.completions.parse with zodResponseFormat returns a parsed object (through the grammar)', async () => {
    const Person = z.object({ name: z.string().max(16), age: z.number().int().min(0).max(120) });
    const completion = await client.chat.completions.parse({
      model: engine.modelId,
      messages: [{ role: 'user', content: 'Name a person' }],
      response_format: zodResponseFormat(Person, 'person'),
      max_tokens: 32,
      seed: 1,
    });
    const parsed = completion.choices[0]!.message.parsed;
    expect(parsed).not.toBeNull();
    expect(Person.parse(parsed)).toEqual(parsed);
    expect(bodies.at(-1)!.response_format).toMatchObject({ type: 'json_schema' });
  }, 60_000);

  it("bad requests are the SDK's own errors with weft's message", async () => {
    const bad = async (
      request: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming>,
      stream = false,
    ) => {
      try {
        const body = { model: engine.modelId, messages, max_tokens: 4, ...request };
        await (stream
          ? client.chat.completions.create({ ...body, stream: true })
          : client.chat.completions.create(body));
      } catch (err) {
        return err;
      }
      throw new Error(`${JSON.stringify(request)} was accepted`);
    };
    for (const stream of [false, true]) {
      const temperature = await bad({ temperature: -1 }, stream);
      expect(temperature).toBeInstanceOf(OpenAI.BadRequestError);
      expect(String(temperature)).toContain('temperature must be >= 0, got -1');

      const long = await bad({ messages: [{ role: 'user', content: 'And God said, '.repeat(80) }] }, stream);
      expect(long).toBeInstanceOf(OpenAI.BadRequestError);
      expect(String(long)).toContain('does not fit the context of 256 tokens');
      expect(long).toMatchObject({ code: 'context_length_exceeded', param: 'messages' });
    }
    const schema = await bad({
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'objekt' } } },
    });
    expect(schema).toBeInstanceOf(OpenAI.BadRequestError);
    expect(String(schema)).toContain('invalid json_schema');
    expect(await bad({ model: 'gpt-4o' })).toBeInstanceOf(OpenAI.NotFoundError);
  }, 60_000);

  it('an abort mid-stream ends the request; the engine serves the next one', async () => {
    const want = await engineText();
    const ac = new AbortController();
    const stream = await client.chat.completions.create(
      { model: engine.modelId, messages, ...sampling, max_tokens: 200, stream: true },
      { signal: ac.signal },
    );
    let chunks = 0;
    let text = '';
    try {
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        if (++chunks === 3) ac.abort();
      }
    } catch (err) {
      expect(err).toBeInstanceOf(OpenAI.APIUserAbortError);
    }
    expect(chunks).toBeLessThan(6);
    expect(want.startsWith(text)).toBe(true);
    // A request aborted once sent, before its reply, rejects as the SDK's abort. (The abort comes
    // from the fetch: the reference runner computes without yielding to timers.)
    const late = new AbortController();
    const inner = createOpenAIFetch(engine);
    const aborting = new OpenAI({
      baseURL: BASE_URL,
      apiKey: 'unused',
      fetch: (input, init) => {
        const reply = inner(input, init);
        late.abort();
        return reply;
      },
    });
    await expect(
      aborting.chat.completions.create(
        { model: engine.modelId, messages, ...sampling, max_tokens: 200 },
        { signal: late.signal },
      ),
    ).rejects.toThrow(OpenAI.APIUserAbortError);

    const next = await client.chat.completions.create({ model: engine.modelId, messages, ...sampling });
    expect(next.choices[0]!.message.content).toBe(want);
  }, 60_000);

  it('a tool call round trip through the real Qwen3 chat template: call, tool message, reply', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: {
            type: 'object',
            properties: { city: { type: 'string', maxLength: 8 } },
            required: ['city'],
          },
        },
      },
    ];
    const openai = new OpenAI({ baseURL: BASE_URL, apiKey: 'unused', fetch: createOpenAIFetch(qwen) });
    const question = { role: 'user' as const, content: 'Weather in Paris?' };
    const first = await openai.chat.completions.create({
      model: qwen.modelId,
      messages: [question],
      tools,
      tool_choice: 'required',
      max_tokens: 128,
      seed: 1,
    });
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    const call = choice.message.tool_calls![0]!;
    expect(call.type === 'function' && call.function.name).toBe('get_weather');
    if (call.type !== 'function') throw new Error('not a function call');
    expect(typeof JSON.parse(call.function.arguments).city).toBe('string');

    const answer = { role: 'tool' as const, tool_call_id: call.id, content: '{"temperature": 21}' };
    const next = await openai.chat.completions.create({
      model: qwen.modelId,
      messages: [question, choice.message, answer],
      tools,
      max_tokens: 8,
      seed: 1,
    });
    expect(typeof next.choices[0]!.message.content).toBe('string');
    // The conversation reached the template as weft's own messages render it.
    const turn: ChatMessage[] = [
      question,
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
    ];
    expect(next.usage?.prompt_tokens).toBe((await qwen.render(turn, tools)).length);

    // Streamed, the forced call arrives as a tool_calls delta.
    const stream = await openai.chat.completions.create({
      model: qwen.modelId,
      messages: [question],
      tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 128,
      seed: 2,
      stream: true,
    });
    const deltas: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      deltas.push(...(chunk.choices[0]?.delta.tool_calls ?? []));
      finish ??= chunk.choices[0]?.finish_reason;
    }
    expect(deltas.map((d) => d.function?.name)).toEqual(['get_weather']);
    expect(typeof JSON.parse(deltas[0]!.function!.arguments!).city).toBe('string');
    expect(finish).toBe('tool_calls');
  }, 120_000);
});

describe('the AI SDK (createOpenAICompatible with createOpenAIFetch)', () => {
  const provider = (e: Engine) =>
    createOpenAICompatible({
      name: 'weft',
      baseURL: BASE_URL,
      fetch: recording(e),
      supportsStructuredOutputs: true,
      includeUsage: true,
    });

  it("streamText yields the engine's text exactly", async () => {
    const want = await engineText();
    const result = streamText({
      model: provider(engine)(engine.modelId),
      prompt: 'And God said',
      maxOutputTokens: sampling.max_tokens,
      temperature: sampling.temperature,
      seed: sampling.seed,
    });
    let text = '';
    for await (const t of result.textStream) text += t;
    expect(text).toBe(want);
    expect((await result.usage).outputTokens).toBe(engine.lastStats!.completion_tokens);
  }, 60_000);

  it('generateObject with a zod schema goes through the grammar (response_format json_schema)', async () => {
    const Person = z.object({ name: z.string().max(16), age: z.number().int().min(0).max(120) });
    const { object } = await generateObject({
      model: provider(engine)(engine.modelId),
      schema: Person,
      prompt: 'Name a person',
      maxOutputTokens: 32,
      seed: 1,
    });
    expect(Person.parse(object)).toEqual(object);
    const sent = bodies.at(-1)!.response_format;
    expect(sent).toMatchObject({ type: 'json_schema', json_schema: { schema: { type: 'object' } } });
  }, 60_000);

  it('tools: a forced call, its result, and the reply (Qwen3 template)', async () => {
    const result = streamText({
      model: provider(qwen)(qwen.modelId),
      prompt: 'Weather in Paris?',
      tools: {
        get_weather: tool({
          description: 'The weather in a city',
          inputSchema: z.object({ city: z.string().max(8) }),
          execute: async ({ city }) => ({ city, temperature: 21 }),
        }),
      },
      // The call is forced (it ends where its grammar does); the reply after it is kept short.
      prepareStep: ({ stepNumber }) =>
        stepNumber === 0 ? { toolChoice: 'required' } : { toolChoice: 'none', maxOutputTokens: 8 },
      stopWhen: stepCountIs(2),
      maxOutputTokens: 128,
      seed: 1,
    });
    await result.consumeStream();
    const steps = await result.steps;
    expect(steps).toHaveLength(2);
    const call = steps[0]!.toolCalls[0]!;
    expect(call.toolName).toBe('get_weather');
    expect(call.input).toEqual({ city: expect.any(String) });
    expect(steps[0]!.toolResults[0]!.output).toMatchObject({ temperature: 21 });
    expect(['stop', 'length']).toContain(steps[1]!.finishReason);
    // The second request carried the call and its result back.
    const last = bodies.at(-1)!.messages;
    expect(JSON.stringify(last)).toContain('"role":"tool"');
  }, 120_000);
});

describe('the README', () => {
  it('the JSON-schema example, run as written on the bundled model, gives JSON valid under its schema', async () => {
    const readme = readFileSync('README.md', 'utf8');
    const at = readme.indexOf('const reply = await engine.chat.completions.create({');
    const statement = readme.slice(at, readme.indexOf('\n});', at) + 4);
    expect(statement).toContain("type: 'json_schema'");
    // The statement runs as written, its `engine` the bundled model's.
    let request: ChatCompletionRequest | undefined;
    let reply: ChatCompletion | undefined;
    const create = async (r: ChatCompletionRequest & { stream?: false }) => {
      request = r;
      reply = await engine.chat.completions.create(r);
      return reply;
    };
    await new Function('engine', `return (async () => { ${statement} })();`)({
      chat: { completions: { create } },
    });
    const format = request!.response_format!;
    if (format.type !== 'json_schema') throw new Error(`the example asks for ${format.type}`);
    const validate = new Ajv({ strict: false }).compile(schemaObject(format.json_schema.schema));
    const choice = reply!.choices[0]!;
    expect(choice.finish_reason, choice.message.content).toBe('stop');
    const value: unknown = JSON.parse(choice.message.content);
    expect(validate(value), choice.message.content).toBe(true);
    console.log(`[readme] ${choice.message.content}`);
  }, 60_000);
});

function schemaObject(schema: unknown): object {
  if (typeof schema !== 'object' || schema === null) throw new Error('the schema is not an object');
  return schema;
}
