// The model picker: the bundled demo model, Hugging Face ids, or files on this computer, turned into
// a serializable `ModelChoice` for the engine worker (checked here with the same `resolveModel` the
// worker runs, so a bad id is reported before anything loads).
import {
  keyString,
  type ModelChoice,
  type ModelSource,
  modelKey,
  probe,
  resolveModel,
  type WeightStore,
} from '../../src/index.js';
import { byId } from './dom.js';

/** Where the bundled models are served, relative to the page; `?bundled=` and `?draft=` override. */
const params = new URLSearchParams(location.search);
const BUNDLED = new URL(params.get('bundled') ?? 'models/kjv-target/', location.href).href;
const BUNDLED_DRAFT = new URL(params.get('draft') ?? 'models/kjv-draft/', location.href).href;

/** The names the page shows for the bundled models in the weights cache, by their store key. */
export const BUNDLED_NAMES: ReadonlyMap<string, string> = new Map([
  [bundledKey(BUNDLED), 'KJV demo model (bundled)'],
  [bundledKey(BUNDLED_DRAFT), 'KJV draft model (bundled)'],
]);

function bundledKey(folder: string): string {
  const source = resolveModel(folder);
  return source.kind === 'url' ? keyString(modelKey(source)) : folder;
}

/**
 * What the picker asks the worker to load, or why it cannot yet. `cache`: whether remote models
 * go through the weights cache (the bundled and hub models do; picked files are read in place).
 */
export type PickResult =
  | {
      readonly ok: true;
      readonly choice: ModelChoice;
      readonly draft?: ModelChoice;
      readonly cache: boolean;
      readonly label: string;
      /** The bundled model (served with the page), which a new build may replace. */
      readonly bundled: boolean;
    }
  | { readonly ok: false; readonly reason: string };

/** Whether the bundled model in `folder` can load: the server has it, or the weights cache does. */
async function available(folder: string, store: WeightStore): Promise<boolean> {
  const res = await fetch(new URL('config.json', folder), { method: 'HEAD' }).catch(() => undefined);
  if (res?.ok) return true;
  const source = resolveModel(folder);
  if (source.kind !== 'url') return false;
  return (await store.manifest(modelKey(source)).catch(() => undefined)) !== undefined;
}

/** The picker's controls, and its reading of them. */
export class ModelPicker {
  private readonly select = byId('model-select', HTMLSelectElement);
  private readonly hubId = byId('hub-id', HTMLInputElement);
  private readonly hubBase = byId('hub-base', HTMLInputElement);
  private readonly folder = byId('local-folder', HTMLInputElement);
  private readonly files = byId('local-files', HTMLInputElement);
  private readonly draftBox = byId('draft-model', HTMLInputElement);
  private readonly note = byId('model-note', HTMLParagraphElement);
  private bundled = { target: false, draft: false };

  constructor(
    private readonly store: WeightStore,
    onChange: () => void,
  ) {
    if (params.get('hub')) this.hubBase.value = params.get('hub') ?? '';
    this.select.addEventListener('change', () => {
      this.sync();
      onChange();
    });
    for (const input of [this.hubId, this.folder, this.files]) input.addEventListener('change', onChange);
    this.sync();
  }

  /** Checks which bundled models this build serves or this browser keeps, and says so. */
  async probe(): Promise<void> {
    const [target, draft] = await Promise.all([
      available(BUNDLED, this.store),
      available(BUNDLED_DRAFT, this.store),
    ]);
    this.bundled = { target, draft };
    this.draftBox.checked = draft;
    this.sync();
  }

  /**
   * Forgets a kept bundled model whose files the server now serves in another version (a new
   * build brought a new model: another size or ETag), so that loading downloads it again. Files
   * the server does not answer for (offline) count as unchanged.
   */
  async forgetChanged(): Promise<void> {
    for (const folder of [BUNDLED, BUNDLED_DRAFT]) {
      const source = resolveModel(folder);
      if (source.kind !== 'url') continue;
      const key = modelKey(source);
      const manifest = await this.store.manifest(key);
      for (const file of manifest?.files ?? []) {
        const now = await probe(file.url, fetch).catch(() => undefined);
        if (now && (now.size !== file.size || now.etag !== file.etag)) {
          await this.store.delete(key);
          break;
        }
      }
    }
  }

  /** Shows the fields the selected kind of model needs. */
  private sync(): void {
    const v = this.select.value;
    byId('hub-custom', HTMLDivElement).hidden = v !== 'hub-custom';
    byId('local-pick', HTMLDivElement).hidden = v !== 'local';
    byId('draft-model-row', HTMLLabelElement).hidden = v !== 'bundled' || !this.bundled.draft;
    this.note.textContent =
      v === 'bundled'
        ? this.bundled.target
          ? 'A small model trained on the King James Bible; it continues the text you give it. Kept in this browser’s storage once loaded, so it also loads offline.'
          : 'The bundled model is not in this build (models/kjv-target/ is missing). Pick a Hugging Face model or files on this computer.'
        : v === 'local'
          ? 'Files are read where they are; nothing is uploaded or copied.'
          : 'Downloaded once into this browser’s storage, then loaded from there (also offline).';
  }

  /** The current choice. */
  pick(): PickResult {
    const v = this.select.value;
    if (v === 'bundled') {
      if (!this.bundled.target) return { ok: false, reason: 'the bundled model is not in this build' };
      const draft = this.bundled.draft && this.draftBox.checked;
      return {
        ok: true,
        choice: BUNDLED,
        ...(draft ? { draft: BUNDLED_DRAFT } : {}),
        cache: true,
        label: 'KJV demo model',
        bundled: true,
      };
    }
    if (v === 'local') {
      const picked = [...(this.folder.files ?? []), ...(this.files.files ?? [])];
      if (picked.length === 0) return { ok: false, reason: 'choose a model folder or its files first' };
      const name = picked[0]?.webkitRelativePath.split('/')[0] || 'local files';
      return {
        ok: true,
        choice: { kind: 'files', name, files: picked },
        cache: false,
        label: name,
        bundled: false,
      };
    }
    const text = v === 'hub-custom' ? this.hubId.value.trim() : v.replace(/^hub:/, '');
    const hubBase = this.hubBase.value.trim();
    let source: ModelSource | undefined;
    try {
      source = resolveModel(text, hubBase ? { hubBase } : {});
    } catch {
      source = undefined;
    }
    if (source?.kind !== 'hub')
      return {
        ok: false,
        reason: `a Hugging Face id looks like "org/name" (or "org/name/file.gguf"), got "${text}"`,
      };
    return { ok: true, choice: source, cache: true, label: text, bundled: false };
  }
}
