import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import { TextStream } from '../../src/engine/text-stream.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { AbortError, EngineClosedError, InvalidInputError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import type { DecodeSession, SamplerSpec } from '../../src/model/runner.js';
import { fixtureFiles } from '../fixtures/write.js';
import { TOY_EOS, TOY_VOCAB, ToyRunner, toyCodec } from '../helpers/toy-model.js';

const toyEngine = (runner = new ToyRunner()) => ({
  runner,
  engine: new Engine({ id: 'toy', runner, codec: toyCodec }),
});

/** What the toy model generates greedily after `prompt`, computed independently of the engine. */
function expectedToy(prompt: string, n: number): string {
  const r = new ToyRunner();
  let last = toyCodec.encode(prompt).at(-1)!;
  let out = '';
  for (let i = 0; i < n; i++) {
    last = r.next(last, 0);
    out += TOY_VOCAB[last];
  }
  return out;
}

async function collect(it: AsyncIterable<{ text: string }>): Promise<string> {
  let s = '';
  for await (const c of it) s += c.text;
  return s;
}

describe('Engine.generate', () => {
  it('streams one token per chunk and stops at max tokens', async () => {
    const { engine } = toyEngine();
    const chunks = [];
    for await (const c of engine.generate('abc', { maxTokens: 10 })) chunks.push(c);
    expect(chunks).toHaveLength(10);
    expect(chunks.map((c) => c.text).join('')).toBe(expectedToy('abc', 10));
    expect(chunks.at(-1)!.finishReason).toBe('length');
    expect(engine.lastStats).toMatchObject({ prompt_tokens: 3, completion_tokens: 10, target_passes: 10 });
  });

  it('reports no GPU figures off the GPU (undefined, not zeros)', async () => {
    const { engine } = toyEngine();
    for await (const _ of engine.generate('abc', { maxTokens: 4 })) {
    }
    const { files } = fixtureFiles('llama', 'f32', 7);
    const cpu = await createEngine({
      model: memoryModelFiles('llama', files),
      device: 'cpu',
      contextLength: 32,
    });
    for await (const _ of cpu.generate([5, 17, 99], { maxTokens: 4 })) {
    }
    for (const s of [engine.lastStats!, cpu.lastStats!]) {
      expect(s.completion_tokens).toBe(4);
      for (const key of [
        'dispatches_per_token',
        'writes_per_token',
        'readbacks_per_pass',
        'readback_bytes_per_pass',
        'weight_bytes_per_pass',
        'decode_counts',
      ] as const)
        expect(key in s, key).toBe(false);
    }
    await cpu.unload();
  });

  it('prefills in chunks and stops on EOS', async () => {
    const runner = new ToyRunner(512, 12);
    const { engine } = toyEngine(runner);
    const chunks = [];
    for await (const c of engine.generate('abcdefgh', { maxTokens: 50, prefillChunk: 3 })) chunks.push(c);
    expect(runner.calls.slice(0, 3).map((c) => c.tokens.length)).toEqual([3, 3, 2]);
    // Positions 9..11 produce tokens, position 12 produces EOS.
    expect(chunks.flatMap((c) => c.ids)).toHaveLength(4);
    expect(chunks.at(-1)!.finishReason).toBe('stop');
  });

  it('stops on any EOS id: the second of two as well as the first', async () => {
    // Two EOS ids, as a generation_config.json's `eos_token_id: [a, b]` gives the codec: '#', '.'.
    const second = TOY_VOCAB.indexOf('.');
    const codec = { ...toyCodec, eosIds: [TOY_EOS, second] };
    const before = expectedToy('abcdefgh', 4);
    expect(before).not.toMatch(/[#.]/); // neither id comes up before position 12 on its own
    for (const eos of [TOY_EOS, second]) {
      const runner = new ToyRunner(512, 12, eos);
      const engine = new Engine({ id: 'toy', runner, codec });
      const chunks = [];
      for await (const c of engine.generate('abcdefgh', { maxTokens: 50 })) chunks.push(c);
      expect(chunks.flatMap((c) => c.ids)).toEqual(toyCodec.encode(before));
      expect(chunks.map((c) => c.text).join('')).toBe(before);
      expect(chunks.at(-1)!.finishReason).toBe('stop');
    }
    // With only the first id, the second is ordinary text and generation runs on past it.
    const engine = new Engine({ id: 'toy', runner: new ToyRunner(512, 12, second), codec: toyCodec });
    const chunks = [];
    for await (const c of engine.generate('abcdefgh', { maxTokens: 6 })) chunks.push(c);
    expect(chunks.map((c) => c.text).join('')).toBe(`${before}..`);
    expect(chunks.at(-1)!.finishReason).toBe('length');
  });

  it('cuts the text before a stop string, even across tokens', async () => {
    const { engine } = toyEngine();
    const full = expectedToy('a', 30);
    const stop = full.slice(5, 8);
    const text = await collect(engine.generate('a', { maxTokens: 30, stop }));
    expect(text).toBe(full.slice(0, full.indexOf(stop)));
  });

  it('reuses the KV cache for a shared prompt prefix', async () => {
    const runner = new ToyRunner();
    const { engine } = toyEngine(runner);
    await collect(engine.generate('hello world', { maxTokens: 3 }));
    runner.calls.length = 0;
    await collect(engine.generate('hello worms', { maxTokens: 3 }));
    expect(runner.calls[0]).toEqual({ tokens: toyCodec.encode('ms'), kvLength: 9 });
    expect(engine.lastStats!.cached_prompt_tokens).toBe(9);
  });

  it('queues concurrent requests and runs them in order', async () => {
    const { engine } = toyEngine();
    const order: string[] = [];
    const run = async (name: string, prompt: string) => {
      for await (const _ of engine.generate(prompt, { maxTokens: 3 })) order.push(name);
    };
    await Promise.all([run('a', 'ab'), run('b', 'cd'), run('c', 'ef')]);
    expect(order).toEqual(['a', 'a', 'a', 'b', 'b', 'b', 'c', 'c', 'c']);
  });

  it('aborts promptly and stays usable', async () => {
    const runner = new ToyRunner();
    runner.delayMs = 5;
    const { engine } = toyEngine(runner);
    const ac = new AbortController();
    let n = 0;
    const err = await (async () => {
      for await (const _ of engine.generate('abc', { maxTokens: 100, signal: ac.signal })) {
        if (++n === 3) ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortError);
    expect(n).toBe(3);
    expect(await collect(engine.generate('abc', { maxTokens: 4 }))).toBe(expectedToy('abc', 4));
  });

  it('rejects bad options with typed errors', async () => {
    const { engine } = toyEngine();
    await expect(collect(engine.generate('a', { temperature: -1 }))).rejects.toThrow(InvalidInputError);
    await expect(collect(engine.generate('a', { maxTokens: 0 }))).rejects.toThrow(/max_tokens/);
  });

  it('refuses requests after unload', async () => {
    const { engine, runner } = toyEngine();
    await engine.unload();
    expect(runner.disposed).toBe(true);
    await expect(collect(engine.generate('a'))).rejects.toThrow(EngineClosedError);
  });
});

describe('engine.chat.completions.create', () => {
  it('returns an OpenAI-shaped completion with usage', async () => {
    const { engine } = toyEngine();
    const res = await engine.chat.completions.create({
      messages: [{ role: 'user', content: 'abc' }],
      max_tokens: 5,
      temperature: 0,
    });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0]!.message).toEqual({ role: 'assistant', content: expectedToy('abc', 5) });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
  });

  it('streams chunks: role first, content deltas, finish_reason and usage last', async () => {
    const { engine } = toyEngine();
    const stream = await engine.chat.completions.create({
      messages: [{ role: 'user', content: 'abc' }],
      max_tokens: 4,
      temperature: 0,
      stream: true,
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant' });
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks.map((c) => c.choices[0]!.delta.content ?? '').join('')).toBe(expectedToy('abc', 4));
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(4);
  });

  it('validates messages', async () => {
    const { engine } = toyEngine();
    await expect(engine.chat.completions.create({ messages: [] })).rejects.toThrow(InvalidInputError);
  });
});

describe('TextStream', () => {
  it('holds back incomplete characters and stop-string prefixes', () => {
    const parts = ['a', '\uFFFD', 'é', 'x', 'S', 'T', 'b'];
    let i = 0;
    const decoded: string[] = [];
    const s = new TextStream(
      (ids) => {
        // ids index into parts; a replacement char followed by 'é' stands for one split char.
        const t = ids.map((k) => parts[k]).join('');
        return t.replace('\uFFFDé', 'é');
      },
      ['STOP'],
    );
    for (; i < parts.length; i++) decoded.push(s.push([i]));
    expect(decoded).toEqual(['a', '', 'é', 'x', '', '', 'STb']);
    expect(s.flush()).toBe('');
  });
});

/** The toy model with a decode loop of its own (forward + commit per step), counting its sessions. */
class LoopToy extends ToyRunner {
  sessions: { steps: number; closed: boolean }[] = [];

  decode(first: number, sampler: SamplerSpec, steps: number): DecodeSession {
    const s = { steps, closed: false };
    this.sessions.push(s);
    let last = first;
    return {
      next: async () => {
        if (s.closed) throw new Error('closed');
        last = (await this.forward({ tokens: [last] }, sampler, 'last'))[0]!;
        this.commit([0]);
        return last;
      },
      close: () => {
        s.closed = true;
      },
    };
  }
}

describe('Engine.generate, plain decoding on a runner with a decode loop', () => {
  it('drives the loop (one session per request, closed at the end), unless decodeLoop is "host"', async () => {
    const runner = new LoopToy();
    const engine = new Engine({ id: 'toy', runner, codec: toyCodec });
    expect(await collect(engine.generate('abc', { maxTokens: 10 }))).toBe(expectedToy('abc', 10));
    // The first token comes from prefill; the session runs the 9 after it.
    expect(runner.sessions).toEqual([{ steps: 9, closed: true }]);
    expect(await collect(engine.generate('abc', { maxTokens: 10, decodeLoop: 'host' }))).toBe(
      expectedToy('abc', 10),
    );
    expect(runner.sessions).toHaveLength(1);
    // Breaking out of the stream closes the session too.
    let chunks = 0;
    for await (const _ of engine.generate('abf', { maxTokens: 10 })) if (++chunks === 3) break;
    expect(runner.sessions.every((s) => s.closed)).toBe(true);
    expect(runner.sessions).toHaveLength(2);
    // From an untyped caller (a worker message, JSON).
    const bad: GenerateOptions = JSON.parse('{ "decodeLoop": "gpu" }');
    await expect(collect(engine.generate('abc', bad))).rejects.toThrow(
      /decodeLoop must be "device" or "host"/,
    );
  });
});
