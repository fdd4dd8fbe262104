// The context a request runs in, through the public API: a prompt that cannot fit is refused with
// ContextLengthError, a completion that reaches the context ends with finish reason 'length', and
// chat with truncate: 'oldest' drops the oldest turns but keeps the system message and the latest.
import { describe, expect, it } from 'vitest';
import {
  type ChatMessage,
  ContextLengthError,
  createEngine,
  Engine,
  InvalidInputError,
  memoryModelFiles,
  type TextCodec,
} from '../../src/index.js';
import { fixtureFiles } from '../fixtures/write.js';
import { ToyRunner, toyCodec } from '../helpers/toy-model.js';

/** The toy model's greedy continuation of `prompt`, computed without the engine. */
function expectedIds(prompt: readonly number[], n: number): number[] {
  const r = new ToyRunner();
  let last = prompt.at(-1)!;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    last = r.next(last, 0);
    out.push(last);
  }
  return out;
}

/** A toy runner that also checks every forward stays inside its KV cache. */
class BoundedRunner extends ToyRunner {
  override async forward(...args: Parameters<ToyRunner['forward']>): Promise<Int32Array> {
    const [input] = args;
    if (this.kvLength + input.tokens.length > this.capacity)
      throw new Error(`forward past the cache: ${this.kvLength} + ${input.tokens.length} > ${this.capacity}`);
    return super.forward(...args);
  }
}

/** The toy codec with a chat template: one line per message, opened by the role's initial. */
const chatCodec: TextCodec = {
  ...toyCodec,
  applyChatTemplate: (messages, o) =>
    messages.map((m) => `${m.role[0]} ${m.content}\n`).join('') + (o.addGenerationPrompt ? 'a ' : ''),
};

const rendered = (messages: readonly ChatMessage[]) =>
  chatCodec.encode(chatCodec.applyChatTemplate!(messages, { addGenerationPrompt: true }));

async function drain(it: AsyncIterable<{ ids: number[]; finishReason?: string }>) {
  const ids: number[] = [];
  let finish: string | undefined;
  for await (const c of it) {
    ids.push(...c.ids);
    finish = c.finishReason ?? finish;
  }
  return { ids, finish };
}

describe('context length', () => {
  it('a completion that reaches the context ends with finish reason length, inside the cache', async () => {
    const engine = new Engine({ id: 'toy', runner: new BoundedRunner(16), codec: toyCodec });
    expect(engine.contextLength).toBe(16);
    const prompt = toyCodec.encode('abcdef');
    // 6 prompt tokens + 10 generated = the 16 of the context, whatever max_tokens asked.
    const got = await drain(engine.generate(prompt, { maxTokens: 100 }));
    expect(got).toEqual({ ids: expectedIds(prompt, 10), finish: 'length' });
    expect(engine.lastStats).toMatchObject({ prompt_tokens: 6, completion_tokens: 10 });
    // With n-gram speculation as well: the drafts are cut to the cache, the result is the same.
    const spec = await drain(engine.generate(prompt, { maxTokens: 100, drafter: 'ngram' }));
    expect(spec).toEqual(got);
    // Its drafts are accepted (1.67 tokens per pass measured; all rejected would be exactly 1).
    expect(engine.lastStats!.tokens_per_pass).toBeGreaterThan(1.3);
    // max_tokens below the room still rules.
    expect(await drain(engine.generate(prompt, { maxTokens: 4 }))).toEqual({
      ids: expectedIds(prompt, 4),
      finish: 'length',
    });
  });

  it('chat.completions reports finish_reason length at the context, streamed or not', async () => {
    const engine = new Engine({ id: 'toy', runner: new BoundedRunner(20), codec: chatCodec });
    const messages: ChatMessage[] = [{ role: 'user', content: 'abc' }];
    const promptLength = rendered(messages).length; // 'u abc\na ' = 8
    const res = await engine.chat.completions.create({ messages, max_tokens: 500, temperature: 0 });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({ prompt_tokens: promptLength, completion_tokens: 20 - promptLength });
    const stream = await engine.chat.completions.create({
      messages,
      max_tokens: 500,
      temperature: 0,
      stream: true,
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(20 - promptLength);
  });

  it('a prompt that cannot fit is refused with ContextLengthError naming its figures', async () => {
    const runner = new BoundedRunner(16);
    const engine = new Engine({ id: 'toy', runner, codec: toyCodec });
    const err = await drain(engine.generate('abcdefghijklmnop')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ContextLengthError);
    expect(err).toMatchObject({ promptTokens: 16, contextLength: 16, modelContext: 4096 });
    expect(String(err)).toMatch(
      /prompt of 16 tokens does not fit the context of 16 tokens.*at most 15.*4096/,
    );
    expect(runner.calls).toEqual([]); // refused before any forward
    // 15 tokens leave room for one.
    expect(await drain(engine.generate('abcdefghijklmno'))).toMatchObject({ finish: 'length' });
    expect(engine.lastStats!.completion_tokens).toBe(1);
  });

  it("truncate: 'oldest' drops the oldest turns, keeping the system message and the latest turns", async () => {
    const runner = new BoundedRunner(48);
    const engine = new Engine({ id: 'toy', runner, codec: chatCodec });
    const system: ChatMessage = { role: 'system', content: 'be brief' };
    const turns: ChatMessage[] = [
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'first answer' },
      { role: 'user', content: 'second' },
      { role: 'assistant', content: 'reply' },
      { role: 'user', content: 'latest' },
    ];
    const messages = [system, ...turns];
    // Without truncation the conversation does not fit.
    expect(rendered(messages).length).toBeGreaterThan(48);
    await expect(engine.chat.completions.create({ messages, max_tokens: 4 })).rejects.toThrow(
      ContextLengthError,
    );
    // With it, the first exchange goes and the rest stays, in order.
    const kept = [system, ...turns.slice(2)];
    expect(rendered(kept).length + 4).toBeLessThanOrEqual(48);
    runner.calls.length = 0;
    const res = await engine.chat.completions.create({
      messages,
      max_tokens: 4,
      truncate: 'oldest',
      temperature: 0,
    });
    expect(res.usage.prompt_tokens).toBe(rendered(kept).length);
    expect(runner.calls.flatMap((c) => c.tokens).slice(0, rendered(kept).length)).toEqual(rendered(kept));
    expect(res.choices[0]!.message.content).toBe(toyCodec.decode(expectedIds(rendered(kept), 4)));
    // A larger max_tokens needs more room: the next exchange goes too, the latest turn stays.
    const latest = [system, turns[4]!];
    expect(rendered(kept).length + 12).toBeGreaterThan(48);
    const roomy = await engine.chat.completions.create({ messages, max_tokens: 12, truncate: 'oldest' });
    expect(roomy.usage.prompt_tokens).toBe(rendered(latest).length);
    // When even the system message and the latest message cannot fit, the error says so.
    const long: ChatMessage[] = [system, ...turns, { role: 'user', content: 'x'.repeat(60) }];
    await expect(
      engine.chat.completions.create({ messages: long, max_tokens: 4, truncate: 'oldest' }),
    ).rejects.toThrow(ContextLengthError);
    await expect(
      // @ts-expect-error: not a truncation mode
      engine.chat.completions.create({ messages, truncate: 'middle' }),
    ).rejects.toThrow(InvalidInputError);
  });

  it('createEngine allocates the context asked for, up to the model', async () => {
    const { files } = fixtureFiles('llama', 'f32', 7); // max_position_embeddings 256
    const model = () => memoryModelFiles('llama', files);
    const byDefault = await createEngine({ model: model(), device: 'cpu' });
    expect(byDefault.contextLength).toBe(256); // min(model's, 2048)
    await byDefault.unload();
    const small = await createEngine({ model: model(), device: 'cpu', contextLength: 12 });
    expect(small.contextLength).toBe(12);
    const got = await drain(small.generate([5, 17, 99, 3], { maxTokens: 50 }));
    expect(got.ids).toHaveLength(8);
    expect(got.finish).toBe('length');
    await expect(drain(small.generate(Array.from({ length: 12 }, (_, i) => i + 3)))).rejects.toThrow(
      ContextLengthError,
    );
    await small.unload();
    await expect(createEngine({ model: model(), device: 'cpu', contextLength: 257 })).rejects.toThrow(
      /contextLength 257 exceeds the model's context of 256/,
    );
  });
});
