import type { ByteSource } from '../formats/source.js';
import { type DownloadOptions, downloadModel } from './download.js';
import { openStoredFile, type ReadOptions } from './reader.js';
import { type ModelSource, modelKey } from './source.js';
import { WeightStore } from './store.js';

/**
 * The one call a loader needs: `files` of a model as {@link ByteSource}s, wherever the model lives.
 * A local source is read in place. A remote one is downloaded into the cache first (or found there,
 * with no network access at all) and then read from the cache, chunk by verified chunk. `store`
 * defaults to a {@link WeightStore} on IndexedDB.
 */
export async function openModelFiles(
  source: ModelSource,
  files: readonly string[],
  options: DownloadOptions & ReadOptions & { store?: WeightStore } = {},
): Promise<Map<string, ByteSource>> {
  const out = new Map<string, ByteSource>();
  if (source.kind === 'local') {
    for (const f of files) out.set(f, await source.open(f));
    return out;
  }
  const store = options.store ?? new WeightStore();
  await downloadModel(store, source, files, options);
  for (const f of files) out.set(f, await openStoredFile(store, modelKey(source), f, options));
  return out;
}
