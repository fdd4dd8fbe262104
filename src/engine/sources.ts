// A model choice a page can send to the engine worker as plain data, and what the worker does with
// it: remote models go through the weights cache (download with progress, then read from IndexedDB),
// the bundled model and picked files are read in place.

import { InvalidInputError } from '../errors.js';
import { ModelFormatError } from '../formats/errors.js';
import { openGguf } from '../formats/gguf.js';
import { ggufTokenizer } from '../formats/gguf-tokenizer.js';
import { ggufName, type ModelFiles, readJson, urlModelFiles } from '../model/files.js';
import { ggufFileOf, WEFT_WEIGHTS } from '../model/load.js';
import { type DownloadProgress, downloadModel } from '../store/download.js';
import { openStoredFile } from '../store/reader.js';
import {
  fileUrl,
  hubModel,
  type LocalSource,
  localFilesModel,
  type ModelKey,
  modelKey,
  type RemoteSource,
  urlModel,
} from '../store/source.js';
import { WeightStore } from '../store/store.js';
import { type CreateEngineOptions, createEngine, type LoadProgress } from './create.js';
import type { Engine } from './engine.js';

/**
 * A model as plain, structured-cloneable data (it crosses `postMessage`):
 * - `url`: a Hugging Face-layout folder, or one `.gguf` file, at an absolute URL; `cache: false`
 *   reads it in place (the demo's bundled model, served with the page), `cache: true` downloads it
 *   into the weights cache.
 * - `hub`: a Hugging Face id at a revision, always through the weights cache; `file` picks one
 *   `.gguf` file of the repository (GGUF repositories hold several quantizations), and only that
 *   file is downloaded.
 * - `files`: `File`s the user picked (a folder or loose files), read in place, never copied.
 */
export type ModelChoice =
  | { readonly kind: 'url'; readonly url: string; readonly cache: boolean }
  | {
      readonly kind: 'hub';
      readonly id: string;
      readonly file?: string;
      readonly revision?: string;
      readonly hubBase?: string;
    }
  | { readonly kind: 'files'; readonly name: string; readonly files: readonly File[] };

/** Load options of {@link loadChoice}: a {@link ModelChoice} and the engine's own settings. */
export interface ChoiceLoadOptions
  extends Omit<CreateEngineOptions, 'model' | 'draft' | 'onProgress' | 'gpu' | 'hubBase'> {
  readonly choice: ModelChoice;
  /** A separate draft model for speculative decoding (it must share the target's tokenizer). */
  readonly draft?: ModelChoice;
}

/**
 * Events of {@link loadChoice}, in order: `download` while remote files are fetched into the cache
 * (`role` says whether they are the target's or the draft's), `load` while weights are placed on
 * the device, and one `model` when the engine is ready (`chat`: the tokenizer has a chat template,
 * so prompts are conversations; otherwise the model continues plain text).
 */
export type ChoiceLoadEvent =
  | { readonly kind: 'download'; readonly role: 'target' | 'draft'; readonly progress: DownloadProgress }
  | { readonly kind: 'load'; readonly progress: LoadProgress }
  | { readonly kind: 'model'; readonly name: string; readonly chat: boolean };

/** Options of {@link openChoice}. */
export interface OpenChoiceOptions {
  /** The weights cache; default a {@link WeightStore} on IndexedDB. */
  store?: WeightStore;
  fetch?: typeof fetch;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
}

/**
 * The files of a chosen model. A remote choice found complete in the cache is opened without any
 * network access; otherwise its file list is discovered (see {@link remoteFileList}; a GGUF choice
 * is its one file), downloaded into the cache with progress, and then read from the cache. GGUF
 * files of one repository or folder share its cache entry, which grows by each file asked for.
 */
export async function openChoice(choice: ModelChoice, options: OpenChoiceOptions = {}): Promise<ModelFiles> {
  const fetchFn = options.fetch ?? ((...a: Parameters<typeof fetch>) => fetch(...a));
  if (choice.kind === 'files') return localModelFiles(localFilesModel(choice.files, choice.name));
  if (choice.kind === 'url' && !choice.cache) return urlModelFiles(choice.url, fetchFn);
  const gguf = choice.kind === 'hub' ? choice.file : ggufName(choice.url);
  if (gguf !== undefined && !/\.gguf$/i.test(gguf))
    throw new InvalidInputError(
      `hub model file must be a .gguf file of the repository, got ${JSON.stringify(gguf)}`,
    );
  const source: RemoteSource =
    choice.kind === 'hub'
      ? hubModel(choice.id, {
          ...(choice.revision ? { revision: choice.revision } : {}),
          ...(choice.hubBase ? { baseUrl: choice.hubBase } : {}),
        })
      : urlModel(gguf === undefined ? choice.url : choice.url.slice(0, choice.url.lastIndexOf(gguf)));
  const store = options.store ?? new WeightStore();
  const key = modelKey(source);
  const cached = await store.manifest(key);
  const files =
    gguf !== undefined
      ? [gguf]
      : cached?.files.some((f) => f.name === 'config.json')
        ? cached.files.map((f) => f.name)
        : await remoteFileList(source, fetchFn);
  await downloadModel(store, source, files, {
    fetch: fetchFn,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  });
  const name =
    choice.kind === 'hub'
      ? `${choice.id}${gguf === undefined ? '' : `/${gguf}`}@${key.revision}`
      : choice.url;
  return storedModelFiles(store, key, name, fetchFn, gguf);
}

/**
 * The files a Hugging Face-layout model needs: config.json and tokenizer.json, the optional
 * generation and tokenizer configs when the server has them, and the weights (a weft-q
 * `model.weft.safetensors` written by `weft convert` when present, else model.safetensors, or the
 * sharded index and every shard it names). Probed with HEAD; the index is fetched.
 */
export async function remoteFileList(source: RemoteSource, fetchFn: typeof fetch): Promise<string[]> {
  const has = async (file: string) => (await fetchFn(fileUrl(source, file), { method: 'HEAD' })).ok;
  const files = ['config.json', 'tokenizer.json'];
  for (const optional of ['generation_config.json', 'tokenizer_config.json'])
    if (await has(optional)) files.push(optional);
  if (await has(WEFT_WEIGHTS)) return [...files, WEFT_WEIGHTS];
  const index = 'model.safetensors.index.json';
  if (!(await has(index))) return [...files, 'model.safetensors'];
  const res = await fetchFn(fileUrl(source, index));
  const parsed: unknown = res.ok ? await res.json() : undefined;
  const map =
    typeof parsed === 'object' && parsed !== null && 'weight_map' in parsed ? parsed.weight_map : undefined;
  if (typeof map !== 'object' || map === null)
    throw new ModelFormatError(index, 'weight_map', typeof map, 'is missing or not an object');
  const shards = new Set<string>();
  for (const v of Object.values(map)) if (typeof v === 'string') shards.add(v);
  return [...files, index, ...[...shards].sort()];
}

/**
 * {@link ModelFiles} over a complete model in the weights cache; every read is verified. `gguf` names
 * the stored GGUF file to load, for an entry that holds GGUF files.
 */
export async function storedModelFiles(
  store: WeightStore,
  key: ModelKey,
  name: string,
  fetchFn?: typeof fetch,
  gguf?: string,
): Promise<ModelFiles> {
  const manifest = await store.manifest(key);
  const present = new Set(manifest?.files.map((f) => f.name));
  const open = (file: string) => {
    if (!present.has(file)) throw new ModelFormatError(`${name}/${file}`, '(file)', file, 'is missing');
    return openStoredFile(store, key, file, fetchFn ? { fetch: fetchFn } : {});
  };
  return {
    name,
    ...(gguf === undefined ? {} : { gguf }),
    exists: async (file) => present.has(file),
    text: async (file) => {
      const f = await open(file);
      return new TextDecoder().decode(await f.read(0, f.size));
    },
    open,
  };
}

/** {@link ModelFiles} over a {@link LocalSource} (picked files), read in place. */
export function localModelFiles(source: LocalSource): ModelFiles {
  const open = (file: string) => {
    if (!source.files.includes(file))
      throw new ModelFormatError(`${source.name}/${file}`, '(file)', file, 'is missing');
    return source.open(file);
  };
  return {
    name: source.name,
    exists: async (file) => source.files.includes(file),
    text: async (file) => {
      const f = await open(file);
      return new TextDecoder().decode(await f.read(0, f.size));
    },
    open,
  };
}

/**
 * Whether the model's tokenizer config has a chat template (the rule `openModel` uses for `chat`);
 * for a GGUF model, whether its metadata carries one.
 */
export async function hasChatTemplate(files: ModelFiles): Promise<boolean> {
  const gguf = await ggufFileOf(files);
  if (gguf !== undefined)
    return 'chat_template' in ggufTokenizer(await openGguf(await files.open(gguf))).tokenizerConfig;
  if (!(await files.exists('tokenizer_config.json'))) return false;
  const config = await readJson(files, 'tokenizer_config.json');
  return typeof config === 'object' && config !== null && 'chat_template' in config;
}

/**
 * Loads a {@link ModelChoice} (and its draft model, if any) into an engine, reporting
 * {@link ChoiceLoadEvent}s. This is what the engine worker runs for the demo page.
 */
export async function loadChoice(
  options: ChoiceLoadOptions,
  onEvent: (e: ChoiceLoadEvent) => void,
  open: OpenChoiceOptions = {},
): Promise<Engine> {
  const { choice, draft, ...engineOptions } = options;
  const files = await openChoice(choice, {
    ...open,
    onProgress: (progress) => onEvent({ kind: 'download', role: 'target', progress }),
  });
  const draftFiles = draft
    ? await openChoice(draft, {
        ...open,
        onProgress: (progress) => onEvent({ kind: 'download', role: 'draft', progress }),
      })
    : undefined;
  const chat = await hasChatTemplate(files);
  const engine = await createEngine({
    ...engineOptions,
    model: files,
    ...(draftFiles ? { draft: { model: draftFiles } } : {}),
    onProgress: (progress) => onEvent({ kind: 'load', progress }),
  });
  onEvent({ kind: 'model', name: files.name, chat });
  return engine;
}
