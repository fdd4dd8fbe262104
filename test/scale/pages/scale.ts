// Loads a real-size checkpoint (its folder URL and the quant in the query) the way an app would,
// generates greedily from fixed ids, and puts the ids, the load time and decode speed on the page
// as JSON for the scale test to read.
import { createEngine } from '../../../src/engine/create.js';
import type { Quant } from '../../../src/quant/pack.js';

const status = document.querySelector<HTMLElement>('[data-testid="status"]')!;
const QUANTS: readonly Quant[] = ['f32', 'f16', 'int8', 'int4', 'int2'];

async function main(): Promise<void> {
  const q = new URLSearchParams(location.search);
  const model = q.get('model')!;
  const quant = QUANTS.find((x) => x === q.get('quant'));
  if (!quant) throw new Error(`bad quant ${q.get('quant')}`);
  const prompt = q.get('prompt')!.split(',').map(Number);
  const tokens = Number(q.get('tokens'));
  const t0 = performance.now();
  const engine = await createEngine({ model, quant, contextLength: 64 });
  const loadMs = performance.now() - t0;
  const ids: number[] = [];
  for await (const c of engine.generate(prompt, { maxTokens: tokens })) ids.push(...c.ids);
  const stats = engine.lastStats!;
  await engine.unload();
  status.dataset.result = JSON.stringify({
    ids,
    loadMs,
    prefillTokS: stats.prefill_tok_s,
    decodeTokS: stats.decode_tok_s,
  });
  status.textContent = 'done';
}

main().catch((e: unknown) => {
  status.textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
});
