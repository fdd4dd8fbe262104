// Demo page entry. For now it reports the WebGPU adapter and runs the GPU self-test inside a Web
// Worker; the chat UI arrives with the engine.
import * as Comlink from 'comlink';
import type { SelftestWorkerApi } from '../workers/selftest.worker.js';

const N = 256;

function el(id: string): HTMLElement {
  const e = document.querySelector<HTMLElement>(`[data-testid="${id}"]`);
  if (!e) throw new Error(`missing element ${id}`);
  return e;
}

async function run(): Promise<void> {
  const status = el('gpu-status');
  if (!('gpu' in navigator)) {
    status.className = 'error';
    status.textContent =
      'WebGPU is not available in this browser. Use a recent Chrome or Edge (113 or newer) on a machine with a supported GPU, or enable chrome://flags/#enable-unsafe-webgpu.';
    el('selftest-status').textContent = 'skipped: no WebGPU';
    return;
  }
  const worker = new Worker(new URL('../workers/selftest.worker.ts', import.meta.url), { type: 'module' });
  const api = Comlink.wrap<SelftestWorkerApi>(worker);
  try {
    status.textContent = `WebGPU adapter: ${await api.adapter()}`;
    const y = await api.selftest(N);
    const list = el('selftest-result');
    list.replaceChildren(
      ...Array.from(y, (v, i) => {
        const li = document.createElement('li');
        li.dataset.index = String(i);
        li.textContent = String(v);
        return li;
      }),
    );
    el('selftest-status').textContent = `done: ${y.length} values`;
  } catch (err) {
    status.className = 'error';
    status.textContent = `WebGPU failed: ${err instanceof Error ? err.message : String(err)}`;
    el('selftest-status').textContent = 'failed';
  }
}

void run();
