// Opening a model source: the one way from where a model is (a `ModelSource`) to the `ModelFiles`
// the loader reads, in place or through the weights cache.

import { ModelFormatError } from '../formats/errors.js';
import { type ModelFiles, modelFilePath, urlModelFiles } from '../formats/io/files.js';
import { checkResponse, isHtmlAnswer, readBody, request } from '../formats/io/http.js';
import { CHAT_TEMPLATE_FILE, WEFT_WEIGHTS } from '../model/load.js';
import { type DownloadProgress, downloadModel } from '../store/download.js';
import { openStoredFile } from '../store/reader.js';
import {
  fileUrl,
  type ModelKey,
  type ModelSource,
  modelKey,
  type RemoteSource,
  sourceName,
} from '../store/source.js';
import { WeightStore } from '../store/store.js';

/** Options of {@link openModelSource}. */
export interface OpenSourceOptions {
  /**
   * Whether a remote source goes through the weights cache (download once, then read from
   * IndexedDB) instead of being read in place with Range requests. Local files are always read in
   * place. Default false.
   */
  cache?: boolean;
  /** The weights cache; default a {@link WeightStore} on IndexedDB. */
  store?: WeightStore;
  fetch?: typeof fetch;
  signal?: AbortSignal;
  /** Download progress of a cached source. */
  onProgress?: (p: DownloadProgress) => void;
}

/**
 * The files of a model source, named by {@link sourceName}. Local files and, without `cache`,
 * remote ones are read in place. With `cache`, a remote source found complete in the cache is
 * opened without any network access; otherwise its file list is discovered (see
 * {@link remoteFileList}; a GGUF source is its one file), downloaded into the cache with progress,
 * and then read from the cache. GGUF files of one repository or folder share its cache entry,
 * which grows by each file asked for.
 */
export async function openModelSource(
  source: ModelSource,
  options: OpenSourceOptions = {},
): Promise<ModelFiles> {
  if (source.kind === 'local') return source.files;
  const fetchFn = options.fetch ?? ((...a: Parameters<typeof fetch>) => fetch(...a));
  const name = sourceName(source);
  if (!options.cache) return { ...urlModelFiles(fileUrl(source, source.file), fetchFn), name };
  const store = options.store ?? new WeightStore();
  const key = modelKey(source);
  const cached = await store.manifest(key);
  const files =
    source.file !== undefined
      ? [source.file]
      : cached?.files.some((f) => f.name === 'config.json')
        ? cached.files.map((f) => f.name)
        : await remoteFileList(source, fetchFn);
  await downloadModel(store, source, files, {
    fetch: fetchFn,
    signal: options.signal,
    onProgress: options.onProgress,
  });
  return storedModelFiles(store, key, name, fetchFn, source.file);
}

/**
 * The files a Hugging Face-layout model needs: config.json and tokenizer.json, the optional
 * generation and tokenizer configs and chat_template.jinja when the server has them, and the weights (a weft-q
 * `model.weft.safetensors` written by `weft convert` when present, else model.safetensors, or the
 * sharded index and every shard it names). Probed with HEAD (an error status or an HTML page: not
 * there); the index is fetched. A request the network cannot complete throws `DownloadError`
 * naming its URL.
 */
export async function remoteFileList(source: RemoteSource, fetchFn: typeof fetch): Promise<string[]> {
  const has = async (file: string) => {
    const url = fileUrl(source, file);
    const res = await request(url, fetchFn, { method: 'HEAD' });
    return res.ok && !isHtmlAnswer(url, res);
  };
  const files = ['config.json', 'tokenizer.json'];
  for (const optional of ['generation_config.json', 'tokenizer_config.json', CHAT_TEMPLATE_FILE])
    if (await has(optional)) files.push(optional);
  if (await has(WEFT_WEIGHTS)) return [...files, WEFT_WEIGHTS];
  const index = 'model.safetensors.index.json';
  if (!(await has(index))) return [...files, 'model.safetensors'];
  const url = fileUrl(source, index);
  const res = await request(url, fetchFn);
  checkResponse(url, res);
  const text = await readBody(url, () => res.text());
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    throw new ModelFormatError(url, '(json)', text.slice(0, 40), `is not valid JSON: ${cause}`, { cause });
  }
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
    if (!present.has(file))
      throw new ModelFormatError(modelFilePath(name, file), '(file)', file, 'is missing');
    return openStoredFile(store, key, file, fetchFn ? { fetch: fetchFn } : {});
  };
  return {
    name,
    gguf,
    exists: async (file) => present.has(file),
    text: async (file) => {
      const f = await open(file);
      return new TextDecoder().decode(await f.read(0, f.size));
    },
    open,
  };
}
