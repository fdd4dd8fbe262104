// The cache manager: models downloaded into this browser's storage, their sizes, delete one or all,
// and how much storage the browser lets this site use.
import { type StoredModel, WeightStore } from '../../src/index.js';
import { formatBytes } from '../format.js';
import { byId, h } from './dom.js';

const list = byId('cache-list', HTMLUListElement);
const storage = byId('storage', HTMLParagraphElement);
const clearAll = byId('cache-clear', HTMLButtonElement);

function label(m: StoredModel): string {
  return m.key.revision ? `${m.key.source} @ ${m.key.revision}` : m.key.source;
}

/** The cache panel over one {@link WeightStore}; `onError` shows what went wrong. */
export class CachePanel {
  private readonly store = new WeightStore();

  constructor(private readonly onError: (err: unknown) => void) {
    clearAll.addEventListener('click', () => void this.run(() => this.store.clear()));
  }

  /** Re-reads the stored models and the storage estimate. */
  async refresh(): Promise<void> {
    const models = await this.store.list();
    list.replaceChildren(
      ...(models.length === 0
        ? [h('li', { class: 'note' }, 'Nothing downloaded yet.')]
        : models.map((m) => {
            const del = h('button', { type: 'button', 'aria-label': `Delete ${label(m)}` }, 'Delete');
            del.addEventListener('click', () => void this.run(() => this.store.delete(m.key)));
            return h(
              'li',
              { 'data-model': label(m) },
              h('span', { class: 'name' }, label(m)),
              h('span', { class: 'size' }, formatBytes(m.bytes)),
              del,
            );
          })),
    );
    clearAll.disabled = models.length === 0;
    const est = await navigator.storage?.estimate?.().catch(() => undefined);
    storage.textContent =
      est?.quota !== undefined
        ? `Using ${formatBytes(est.usage ?? 0)}; ${formatBytes(est.quota - (est.usage ?? 0))} available.`
        : 'This browser does not report its storage quota.';
  }

  private async run(action: () => Promise<void>): Promise<void> {
    try {
      await action();
    } catch (err) {
      this.onError(err);
    }
    await this.refresh().catch(this.onError);
  }
}
