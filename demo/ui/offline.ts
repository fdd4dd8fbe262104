// The offline shell, seen from the page: registers the service worker (demo/sw.ts) in the
// production build only (the dev server serves sources that change on every edit, so it never
// gets one), says whether the page opens offline, and switches to a newer build when one is waiting.
import { byId } from './dom.js';

const line = byId('offline-status', HTMLParagraphElement);
const text = byId('offline-text', HTMLSpanElement);
const update = byId('update-button', HTMLButtonElement);

type ShellState = 'saving' | 'ready' | 'update' | 'unavailable';

function show(state: ShellState, message: string): void {
  line.hidden = false;
  line.dataset.state = state;
  text.textContent = message;
  update.hidden = state !== 'update';
}

/**
 * Registers sw.js and keeps the status line current. A build waiting to take over when the page
 * starts is activated at once and the page reloads into it (nothing has happened yet, so nothing
 * is lost); one that arrives while the page is in use waits for the visitor's "Reload". Either way
 * the page reloads on the switch, so it never runs files of two builds.
 */
export async function startOfflineShell(): Promise<void> {
  // The mode, not PROD: a build run from a test runner (NODE_ENV=test) is still the production build.
  if (import.meta.env.MODE !== 'production') return;
  if (!('serviceWorker' in navigator)) {
    show('unavailable', 'This browser cannot keep the page for offline use.');
    return;
  }
  const container = navigator.serviceWorker;
  let switching = false;
  const activate = (worker: ServiceWorker | null): void => {
    if (!worker) return;
    switching = true;
    worker.postMessage('activate');
  };
  container.addEventListener('controllerchange', () => {
    if (switching) location.reload();
  });

  let reg: ServiceWorkerRegistration;
  try {
    reg = await container.register('sw.js');
  } catch (err) {
    show(
      'unavailable',
      `This page cannot be kept for offline use here (service workers need https or localhost): ${err instanceof Error ? err.message : String(err)}`,
    );
    return;
  }
  update.addEventListener('click', () => activate(reg.waiting));
  if (reg.waiting && container.controller) {
    activate(reg.waiting);
    return;
  }
  // A build that installs while this page is in use waits for the visitor.
  const watch = (worker: ServiceWorker | null): void => {
    worker?.addEventListener('statechange', () => {
      if (worker.state === 'installed' && container.controller)
        show('update', 'A new version of this page is ready.');
    });
  };
  watch(reg.installing);
  reg.addEventListener('updatefound', () => watch(reg.installing));
  if (!reg.active) show('saving', 'Saving this page for offline use…');
  await container.ready;
  if (!reg.waiting) show('ready', 'This page opens offline.');
}
