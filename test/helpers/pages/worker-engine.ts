// Drives weft's engine worker the way a web app would, on a real (tiny, random-weight) model
// whose folder URL comes in the query: stream into the DOM, abort one request mid-stream, then
// run another through the OpenAI-style API. The test reads the results from the page.
import OpenAI from 'openai';
import { createOpenAIFetch } from '../../../src/engine/openai-fetch.js';
import { createWorkerEngine } from '../../../src/engine/worker-client.js';
import { AbortError, ContextLengthError } from '../../../src/errors.js';
import { GrammarError } from '../../../src/grammar/errors.js';

const el = (id: string) => document.querySelector<HTMLElement>(`[data-testid="${id}"]`)!;
const PROMPT = [5, 17, 99, 3, 250, 11, 42];

async function main(): Promise<void> {
  const model = new URLSearchParams(location.search).get('model')!;
  const worker = new Worker(new URL('../../../workers/engine.worker.ts', import.meta.url), {
    type: 'module',
  });
  const engine = await createWorkerEngine(worker, { model, quant: 'f32', contextLength: 128 });

  const first = el('first');
  const ids: number[] = [];
  let n = 0;
  for await (const c of engine.generate(PROMPT, { maxTokens: 24 })) {
    first.textContent += c.text;
    ids.push(...c.ids);
    first.dataset.chunks = String(++n);
  }
  first.dataset.ids = ids.join(',');

  const second = el('second');
  const ac = new AbortController();
  let m = 0;
  try {
    for await (const c of engine.generate(PROMPT, {
      maxTokens: 100,
      signal: ac.signal,
      temperature: 1,
      seed: 9,
    })) {
      second.textContent += c.text;
      if (++m === 5) ac.abort();
    }
    second.dataset.error = 'none';
  } catch (e) {
    second.dataset.error = e instanceof AbortError ? 'AbortError' : String(e);
  }
  second.dataset.chunks = String(m);

  const again: number[] = [];
  for await (const c of engine.generate(PROMPT, { maxTokens: 24 })) again.push(...c.ids);
  el('third').dataset.ids = again.join(',');

  // The context (128 tokens): a completion that reaches it ends with 'length'; a prompt that
  // cannot fit arrives as ContextLengthError with its fields.
  const context = el('context');
  context.dataset.length = String(engine.contextLength);
  let generated = 0;
  let finish = '';
  for await (const c of engine.generate(PROMPT, { maxTokens: 1000 })) {
    generated += c.ids.length;
    finish = c.finishReason ?? finish;
  }
  context.dataset.generated = String(generated);
  context.dataset.finish = finish;
  try {
    for await (const _ of engine.generate(Array.from({ length: 200 }, (_, i) => 3 + i))) {
    }
    context.dataset.error = 'none';
  } catch (e) {
    context.dataset.error =
      e instanceof ContextLengthError ? `ContextLengthError ${e.promptTokens} ${e.contextLength}` : String(e);
  }
  // Constrained decoding in the worker: the grammar engine's WASM loads there, and its errors cross.
  const constrained = el('constrained');
  for await (const c of engine.generate(PROMPT, { regex: '[a-z]{2,5}-[0-9]', maxTokens: 12 }))
    constrained.textContent += c.text;
  try {
    for await (const _ of engine.generate(PROMPT, { grammar: 'root ::= "a" |', maxTokens: 4 })) break;
    constrained.dataset.error = 'none';
  } catch (e) {
    constrained.dataset.error = e instanceof GrammarError ? `${e.name} ${e.kind}` : String(e);
  }
  // The OpenAI client, unchanged, over the worker engine: its streamed text is the engine's own
  // (the greedy continuation of the first request; a chat reply), and a request the engine refuses
  // is the client's BadRequestError.
  const openai = el('openai');
  const client = new OpenAI({
    baseURL: 'https://weft.local/v1',
    apiKey: 'unused',
    fetch: createOpenAIFetch(engine),
    dangerouslyAllowBrowser: true,
  });
  const completion = await client.completions.create({
    model: engine.modelId,
    prompt: PROMPT,
    max_tokens: 24,
    temperature: 0,
    stream: true,
  });
  openai.dataset.completion = '';
  for await (const c of completion) openai.dataset.completion += c.choices[0]?.text ?? '';
  const request = { messages: [{ role: 'user' as const, content: 'Hello' }], max_tokens: 8, seed: 3 };
  const stream = await client.chat.completions.create({ ...request, model: engine.modelId, stream: true });
  for await (const c of stream) openai.textContent += c.choices[0]?.delta.content ?? '';
  openai.dataset.direct = (await engine.chat.completions.create(request)).choices[0]?.message.content;
  try {
    await client.chat.completions.create({ ...request, model: engine.modelId, temperature: -1 });
    openai.dataset.error = 'none';
  } catch (e) {
    openai.dataset.error = e instanceof OpenAI.BadRequestError ? `BadRequestError ${e.message}` : String(e);
  }
  el('status').textContent = 'done';
}

main().catch((e: unknown) => {
  el('status').textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
});
