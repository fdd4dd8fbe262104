// The adapter line in the header and the GPU self-test panel (run when the panel is opened), both
// through the self-test worker.
import * as Comlink from 'comlink';
import type { SelftestWorkerApi } from '../../workers/selftest.worker.js';
import { byId, h } from './dom.js';

const N = 256;

/** Reports the adapter, and runs the self-test the first time its panel opens. */
export async function startSelftest(): Promise<void> {
  const status = byId('gpu-status', HTMLParagraphElement);
  const panel = byId('selftest', HTMLDetailsElement);
  const testStatus = panel.querySelector('[data-testid="selftest-status"]');
  const list = byId('selftest-result', HTMLOListElement);
  const worker = new Worker(new URL('../../workers/selftest.worker.ts', import.meta.url), { type: 'module' });
  const api = Comlink.wrap<SelftestWorkerApi>(worker);
  let started = false;
  panel.addEventListener('toggle', async () => {
    if (!panel.open || started || !testStatus) return;
    started = true;
    testStatus.textContent = 'running…';
    try {
      const y = await api.selftest(N);
      list.replaceChildren(...Array.from(y, (v, i) => h('li', { 'data-index': String(i) }, String(v))));
      testStatus.textContent = `done: ${y.length} values`;
    } catch (err) {
      testStatus.textContent = `failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  });
  try {
    status.textContent = `WebGPU adapter: ${await api.adapter()}`;
  } catch (err) {
    status.className = 'error';
    status.textContent = `WebGPU failed: ${err instanceof Error ? err.message : String(err)}`;
  }
}
