// Loads a real-size checkpoint (its folder URL and the quant in the query) the way an app would,
// generates greedily from fixed ids, and puts the ids, the load time, the loader's peak transient
// bytes and decode speed on the page as JSON for the scale test to read (and, while it runs, the
// phase it is in as `data-phase`). Without a model in the
// query it only loads weft's code and says `idle` (the empty page the test measures beside it).
import { createEngine } from '../../../src/engine/create.js';
import type { Quant } from '../../../src/quant/pack.js';

const status = document.querySelector<HTMLElement>('[data-testid="status"]')!;
const QUANTS: readonly Quant[] = ['f32', 'f16', 'int8', 'int4', 'int2'];

async function main(): Promise<void> {
  const q = new URLSearchParams(location.search);
  const model = q.get('model');
  if (model === null) {
    status.textContent = 'idle';
    return;
  }
  const quant = QUANTS.find((x) => x === q.get('quant'));
  if (!quant) throw new Error(`bad quant ${q.get('quant')}`);
  const prompt = q.get('prompt')!.split(',').map(Number);
  const tokens = Number(q.get('tokens'));
  const t0 = performance.now();
  let peakTransientBytes = 0;
  const engine = await createEngine({
    model,
    quant,
    contextLength: 64,
    onProgress: (e) => {
      if (e.phase === 'weights') peakTransientBytes = e.peakTransientBytes ?? peakTransientBytes;
      status.dataset.phase = e.phase === 'warning' ? status.dataset.phase : `${e.phase} ${e.done}/${e.total}`;
    },
  });
  const loadMs = performance.now() - t0;
  status.dataset.phase = 'generating';
  const ids: number[] = [];
  for await (const c of engine.generate(prompt, { maxTokens: tokens })) ids.push(...c.ids);
  const stats = engine.lastStats!;
  await engine.unload();
  status.dataset.result = JSON.stringify({
    ids,
    loadMs,
    peakTransientBytes,
    prefillTokS: stats.prefill_tok_s,
    decodeTokS: stats.decode_tok_s,
  });
  status.textContent = 'done';
}

main().catch((e: unknown) => {
  status.textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
});
