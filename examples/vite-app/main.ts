// Streaming chat with weft's engine in a Web Worker: Send streams a reply, Stop cancels it.
import { AbortError, createWorkerEngine } from 'weft';

const form = document.querySelector<HTMLFormElement>('#chat')!;
const prompt = document.querySelector<HTMLInputElement>('#prompt')!;
const send = document.querySelector<HTMLButtonElement>('#send')!;
const stop = document.querySelector<HTMLButtonElement>('#stop')!;
const status = document.querySelector<HTMLElement>('#status')!;
const out = document.querySelector<HTMLElement>('#out')!;

const worker = new Worker(new URL('./worker.ts', import.meta.url), { type: 'module' });
// `npm run model` copies weft's bundled model into public/, which serves it at /models/kjv-target/.
const engine = await createWorkerEngine(worker, { model: '/models/kjv-target/', quant: 'f16' }).catch(
  (err: unknown) => {
    status.textContent = String(err); // e.g. "DownloadError: <the URL>: HTTP 404 …"
    throw err;
  },
);
status.textContent = 'ready';
send.disabled = false;

let request: AbortController | undefined;
stop.onclick = () => request?.abort();
form.onsubmit = async (event) => {
  event.preventDefault();
  request = new AbortController();
  send.disabled = true;
  stop.disabled = false;
  status.textContent = 'generating';
  out.textContent = '';
  try {
    const stream = await engine.chat.completions.create({
      messages: [{ role: 'user', content: prompt.value }],
      stream: true,
      max_tokens: 64,
      signal: request.signal,
    });
    for await (const chunk of stream) out.textContent += chunk.choices[0]?.delta.content ?? '';
    status.textContent = 'done';
  } catch (err) {
    // Stop aborts the request with an AbortError; the engine stays ready for the next one.
    status.textContent = err instanceof AbortError ? 'stopped' : String(err);
  } finally {
    send.disabled = false;
    stop.disabled = true;
  }
};
