// What the README shows: a Vite app streams tokens from weft's engine worker into the page.
import { createWorkerEngine, type GenerationChunk } from 'weft';

const out = document.querySelector<HTMLPreElement>('#out')!;
const worker = new Worker(new URL('./worker.ts', import.meta.url), { type: 'module' });
const engine = await createWorkerEngine(worker, { model: '/models/kjv-target/', quant: 'f16' });
for await (const chunk of engine.generate('And God said', {
  maxTokens: 64,
}) as AsyncIterable<GenerationChunk>) {
  out.textContent += chunk.text;
}
