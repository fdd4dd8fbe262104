// weft's engine worker in Firefox (WebGPU on wgpu): the bundled trained model at f16 and int4 in
// the GPU kernel forms, greedy, plain and with the bundled draft model speculating; the ids of each
// run (and its tokens per target pass) go to the page as JSON for test/engine/firefox.browser.test.ts to compare.
import { createWorkerEngine } from '../../../src/engine/worker-client.js';

const el = (id: string) => document.querySelector<HTMLElement>(`[data-testid="${id}"]`)!;
const PROMPT = 'And God said unto Moses,';

async function main(): Promise<void> {
  const adapter = await navigator.gpu?.requestAdapter();
  el('adapter').textContent = adapter ? [...adapter.features].sort().join(',') : 'none';
  const runs: Record<string, number[]> = {};
  const perPass: Record<string, number> = {};
  for (const quant of ['f16', 'int4'] as const) {
    const worker = new Worker(new URL('../../../workers/engine.worker.ts', import.meta.url), {
      type: 'module',
    });
    const engine = await createWorkerEngine(worker, {
      model: '/models/kjv-target/',
      quant,
      kernels: 'gpu',
      contextLength: 256,
      draft: { model: '/models/kjv-draft/' },
    });
    for (const drafter of ['none', 'draft'] as const) {
      const ids: number[] = [];
      for await (const c of engine.generate(PROMPT, {
        maxTokens: 24,
        temperature: 0,
        drafter,
        treeBudget: 8,
      }))
        ids.push(...c.ids);
      runs[`${quant} ${drafter}`] = ids;
      perPass[`${quant} ${drafter}`] = engine.lastStats?.tokens_per_pass ?? 0;
    }
    await engine.unload();
  }
  el('runs').textContent = JSON.stringify(runs);
  el('runs').dataset.perPass = JSON.stringify(perPass);
}

main().then(
  () => {
    el('status').textContent = 'done';
  },
  (e: unknown) => {
    el('status').textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
  },
);
