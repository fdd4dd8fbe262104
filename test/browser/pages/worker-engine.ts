// Drives a worker engine the way a web app would: stream into the DOM, abort one request
// mid-stream, then run another. The test reads the results from the page.
import { createWorkerEngine } from '../../../src/engine/worker-client.js';
import { AbortError } from '../../../src/errors.js';

const el = (id: string) => document.querySelector<HTMLElement>(`[data-testid="${id}"]`)!;

async function main(): Promise<void> {
  const worker = new Worker(new URL('./toy-engine.worker.ts', import.meta.url), { type: 'module' });
  const engine = await createWorkerEngine(worker, {});

  const first = el('first');
  let n = 0;
  for await (const c of engine.generate('abc', { maxTokens: 24 })) {
    first.textContent += c.text;
    first.dataset.chunks = String(++n);
  }

  const second = el('second');
  const ac = new AbortController();
  let m = 0;
  try {
    for await (const c of engine.generate('xyz', { maxTokens: 200, signal: ac.signal })) {
      second.textContent += c.text;
      if (++m === 5) ac.abort();
    }
    second.dataset.error = 'none';
  } catch (e) {
    second.dataset.error = e instanceof AbortError ? 'AbortError' : String(e);
  }
  second.dataset.chunks = String(m);

  const res = await engine.chat.completions.create({
    messages: [{ role: 'user', content: 'abc' }],
    max_tokens: 24,
  });
  el('third').textContent = res.choices[0]!.message.content;
  el('third').dataset.tokens = String(res.usage.completion_tokens);
  el('status').textContent = 'done';
}

main().catch((e: unknown) => {
  el('status').textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
});
