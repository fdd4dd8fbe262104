// Forced tool calls on the bundled demo target (models/kjv-target, a base model of KJV text, which
// knows nothing of tools) through the CPU reference runner: with tool_choice 'required' or a named
// function the reply is forced by a grammar of the calls built from the tools' schemas, so every
// seeded reply parses into one call that validates against its tool's schema (ajv). The model is
// given a short chat template that lists the tools (Qwen3's own, with its tools section, takes
// more than the model's 512-token context for two tools; openai-client.test.ts runs it with one).
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import { forcedCallTag, parseToolCalls } from '../../src/engine/tools.js';
import type { ChatMessage, ChatTool } from '../../src/engine/types.js';
import { InvalidInputError } from '../../src/errors.js';
import { GrammarError } from '../../src/grammar/errors.js';
import { withChatTemplate } from '../helpers/chat-template.js';

/** A ChatML template that lists the tools by name: the prompt stays short. */
const TEMPLATE =
  '{%- if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}' +
  '{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n';

const tool = (name: string, properties: Record<string, unknown>, required: string[]): ChatTool => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties, required } },
});

/** A tool's parameters as ajv compiles them. */
function schemaOf(t: ChatTool): object {
  const p = t.function.parameters;
  if (typeof p !== 'object' || p === null) throw new Error(`${t.function.name} has no schema`);
  return p;
}

// Every value bounded (string lengths, integer ranges, enums), so a call fits max_tokens.
const TOOLS: ChatTool[] = [
  tool(
    'add',
    {
      a: { type: 'integer', minimum: 0, maximum: 99 },
      b: { type: 'integer', minimum: 0, maximum: 99 },
    },
    ['a', 'b'],
  ),
  tool('echo', { text: { type: 'string', maxLength: 8 } }, ['text']),
  tool('paint', { color: { enum: ['red', 'green', 'blue'] }, bold: { type: 'boolean' } }, ['color']),
  tool(
    'move',
    {
      to: {
        type: 'object',
        properties: {
          x: { type: 'integer', minimum: -9, maximum: 9 },
          y: { type: 'integer', minimum: -9, maximum: 9 },
        },
        required: ['x', 'y'],
      },
    },
    ['to'],
  ),
];
const question: ChatMessage[] = [{ role: 'user', content: 'Do something with these tools.' }];

let engine: Engine;
beforeAll(async () => {
  engine = await createEngine({
    model: await withChatTemplate('models/kjv-target', TEMPLATE, 'kjv-target+chatml'),
    device: 'cpu',
    quant: 'f16',
    contextLength: 256,
  });
}, 60_000);
afterAll(() => engine.unload());

describe('forced tool calls on the demo target', () => {
  it("20 seeded cases (tool_choice 'required' over 2-3 tools, and named): every reply is one call valid under its tool's schema", {
    timeout: 300_000,
  }, async () => {
    const ajv = new Ajv({ strict: false });
    const names: string[] = [];
    for (let i = 0; i < 20; i++) {
      // Cases in runs of the same tools, so each run's prompt prefix is reused from the cache.
      const group = Math.floor(i / 5);
      const tools = TOOLS.slice(group % 2, (group % 2) + 2 + (group >> 1));
      const named = i % 5 === 4 ? tools[i % tools.length]!.function.name : undefined;
      const reply = await engine.chat.completions.create({
        messages: question,
        tools,
        tool_choice: named ? { type: 'function', function: { name: named } } : 'required',
        seed: i,
        max_tokens: 96,
      });
      const choice = reply.choices[0]!;
      const label = `case ${i} (${named ?? 'required'} of ${tools.map((t) => t.function.name)})`;
      expect(choice.finish_reason, label).toBe('tool_calls');
      expect(choice.message.tool_calls, label).toHaveLength(1);
      const call = choice.message.tool_calls![0]!.function;
      const offered = tools.find((t) => t.function.name === call.name);
      expect(offered, `${label}: called ${call.name}`).toBeDefined();
      if (named) expect(call.name, label).toBe(named);
      const validate = ajv.compile(schemaOf(offered!));
      const args: unknown = JSON.parse(call.arguments);
      expect(validate(args), `${label}: ${call.arguments}\n${ajv.errorsText(validate.errors)}`).toBe(true);
      names.push(call.name);
    }
    // The 'required' cases are not all the same tool: the grammar leaves the choice to the model.
    expect(new Set(names).size).toBeGreaterThan(1);
    console.log(`[tool-choice] calls: ${names.join(' ')}`);
  });

  it('the forced text is a Qwen <tool_call> block or a Llama 3.1 JSON call, as the parser reads them', async () => {
    const tools = TOOLS.slice(0, 2);
    const prompt = await engine.render(question, tools);
    const texts: string[] = [];
    for (const seed of [0, 1]) {
      let text = '';
      for await (const c of engine.generate(prompt, {
        structuralTag: forcedCallTag(tools),
        temperature: 1,
        seed,
        maxTokens: 96,
      }))
        text += c.text;
      texts.push(text);
      expect(text).toMatch(
        /^(<tool_call>\n\{"name": "(add|echo)", "arguments": \{.*\}\}\n<\/tool_call>|\{"name": "(add|echo)", "parameters": \{.*\}\})$/s,
      );
      expect(parseToolCalls(text).calls).toHaveLength(1);
    }
    console.log(`[tool-choice] forced texts: ${JSON.stringify(texts)}`);
  }, 60_000);

  it('refuses what cannot force a call: no tools, a named tool not offered, a bad schema, with response_format', async () => {
    await expect(
      engine.chat.completions.create({ messages: question, tool_choice: 'required' }),
    ).rejects.toThrow(InvalidInputError);
    await expect(
      engine.chat.completions.create({
        messages: question,
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'nope' } },
      }),
    ).rejects.toThrow(/not in tools/);
    await expect(
      engine.chat.completions.create({
        messages: question,
        tools: TOOLS,
        tool_choice: 'required',
        response_format: { type: 'json_object' },
      }),
    ).rejects.toThrow(/forces a tool call/);
    const bad = [tool('f', { x: { type: 'strnig' } }, ['x'])];
    await expect(
      engine.chat.completions.create({
        messages: question,
        tools: bad,
        tool_choice: 'required',
        max_tokens: 4,
      }),
    ).rejects.toThrow(GrammarError);
    // The engine serves the next request.
    const ok = await engine.chat.completions.create({
      messages: question,
      tools: TOOLS.slice(0, 1),
      tool_choice: 'required',
      max_tokens: 96,
    });
    expect(ok.choices[0]!.message.tool_calls?.[0]?.function.name).toBe('add');
  }, 60_000);
});
