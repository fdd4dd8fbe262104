// The cache manager: models downloaded into this browser's storage (the bundled ones too), their
// sizes, delete one or all, how much storage the browser lets this site use, and which loaded model
// could not be kept for offline use.
import { keyString, type StoredModel, type WeightStore } from '../../src/index.js';
import { formatBytes } from '../format.js';
import { byId, h } from './dom.js';

const list = byId('cache-list', HTMLUListElement);
const storage = byId('storage', HTMLParagraphElement);
const clearAll = byId('cache-clear', HTMLButtonElement);
const offlineNote = byId('offline-note', HTMLParagraphElement);

/** The cache panel over one {@link WeightStore}; `onError` shows what went wrong. */
export class CachePanel {
  /**
   * @param names what to call models the page knows by another name (the bundled ones), by
   *   {@link keyString}; others are shown as `source @ revision`.
   */
  constructor(
    private readonly store: WeightStore,
    private readonly names: ReadonlyMap<string, string>,
    private readonly onError: (err: unknown) => void,
  ) {
    clearAll.addEventListener('click', () => void this.run(() => this.store.clear()));
  }

  /**
   * Says that `label` (the model just loaded) could not be kept for offline use, or, given
   * undefined, clears that. Also drops what the failed download had written: the space is needed.
   */
  async notKept(label: string | undefined): Promise<void> {
    offlineNote.hidden = label === undefined;
    offlineNote.textContent =
      label === undefined
        ? ''
        : `${label} could not be kept for offline use: this browser’s storage for the page is full. It was read from the network, and will be again next time; delete downloaded models to make room.`;
    if (label !== undefined) await this.store.evictIncomplete();
  }

  /** Re-reads the stored models and the storage estimate. */
  async refresh(): Promise<void> {
    const models = await this.store.list();
    list.replaceChildren(
      ...(models.length === 0
        ? [h('li', { class: 'note' }, 'Nothing downloaded yet.')]
        : models.map((m) => {
            const del = h('button', { type: 'button', 'aria-label': `Delete ${this.label(m)}` }, 'Delete');
            del.addEventListener('click', () => void this.run(() => this.store.delete(m.key)));
            return h(
              'li',
              { 'data-model': this.label(m) },
              h('span', { class: 'name' }, this.label(m)),
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

  private label(m: StoredModel): string {
    const known = this.names.get(keyString(m.key));
    if (known !== undefined) return known;
    return m.key.revision ? `${m.key.source} @ ${m.key.revision}` : m.key.source;
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
