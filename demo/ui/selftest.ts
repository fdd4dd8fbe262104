// The adapter line in the header (the adapter, whether it is software, the features in use) and the
// GPU self-test panel (run when the panel is opened), both through the self-test worker.
import * as Comlink from 'comlink';
import type { AdapterReport, SelftestWorkerApi } from '../../workers/selftest.worker.js';
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
    showAdapter(status, await api.adapter());
  } catch (err) {
    status.className = 'error';
    status.textContent = `WebGPU failed: ${err instanceof Error ? err.message : String(err)}`;
  }
}

/** What a software adapter means for speed, in one sentence. */
const SOFTWARE =
  'This is a software adapter: WebGPU runs on the CPU, so the model decodes many times slower than on a real GPU.';

/** The adapter line: its name, whether it is software, and the optional features the device enabled. */
function showAdapter(status: HTMLElement, a: AdapterReport): void {
  const on = (name: string, yes: boolean) =>
    h('span', { 'data-feature': name }, `${name} ${yes ? 'on' : 'off'}`);
  status.dataset.software = String(a.software);
  status.dataset.f16 = String(a.f16);
  status.dataset.subgroups = String(a.subgroups);
  status.replaceChildren(
    `WebGPU adapter: ${a.line}. `,
    h(
      'span',
      { 'data-testid': 'adapter-kind' },
      a.software ? SOFTWARE : 'A hardware GPU: the model runs at the GPU’s speed.',
    ),
    ' ',
    h(
      'span',
      { 'data-testid': 'adapter-features' },
      'Features in use: ',
      on('shader-f16', a.f16),
      ', ',
      on('subgroups', a.subgroups),
      ` (${a.kernels === 'serial' ? 'serial kernels, for a CPU' : 'GPU kernels'}).`,
    ),
  );
}
