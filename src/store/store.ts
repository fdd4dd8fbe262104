import { createStore, promisifyRequest, type UseStore } from 'idb-keyval';
import { QuotaError } from './errors.js';
import { keyString, type ModelKey } from './source.js';

/**
 * Version of the on-disk layout. It is part of the IndexedDB database name, so a weft that changes
 * the layout starts a fresh database instead of misreading an old one.
 */
export const STORAGE_VERSION = 1;

/**
 * Keys in the store, one namespace per record kind. Arrays sort element by element in IndexedDB, so
 * every chunk of a model (or of one file) is one key range.
 * - `['manifest', model]`: a complete model ({@link Manifest}); written last.
 * - `['partial', model]`: a download in progress ({@link PartialRecord}).
 * - `['chunk', model, file, index]`: the bytes of one chunk ({@link ChunkRecord}).
 */
export type StoreKey =
  | readonly ['manifest', string]
  | readonly ['partial', string]
  | readonly ['chunk', string, string, number];

/** One stored chunk: its bytes and their SHA-256 (lowercase hex) computed when it was written. */
export interface ChunkRecord {
  readonly bytes: Uint8Array;
  readonly sha256: string;
}

/** What the server said about a file when its download started; a resume must see the same. */
export interface RemoteFile {
  readonly name: string;
  readonly url: string;
  readonly size: number;
  /** The HTTP ETag, or null when the server sent none. */
  readonly etag: string | null;
  /** The whole-file SHA-256 the server announced (hub LFS `X-Linked-Etag`), or null. */
  readonly sha256: string | null;
  readonly chunkSize: number;
}

/** A file of a complete model: the remote facts plus the hash of every chunk, in order. */
export interface ManifestFile extends RemoteFile {
  readonly chunks: readonly string[];
  /** The SHA-256 of the whole file as stored (checked against `sha256` when that is known). */
  readonly storedSha256: string;
}

/** A complete cached model. Its presence is what makes the model visible. */
export interface Manifest {
  readonly version: number;
  readonly key: ModelKey;
  readonly files: readonly ManifestFile[];
  readonly bytes: number;
  readonly createdAt: number;
}

/** A download that has started and not finished: enough to resume it or to evict its chunks. */
export interface PartialRecord {
  readonly version: number;
  readonly key: ModelKey;
  readonly files: readonly RemoteFile[];
  readonly startedAt: number;
}

/** A row of {@link WeightStore.list}: a complete model and its size in bytes. */
export interface StoredModel {
  readonly key: ModelKey;
  readonly bytes: number;
  readonly files: readonly string[];
  readonly createdAt: number;
}

/**
 * The few operations the store needs from a key-value database. {@link idbBackend} is the real one
 * (IndexedDB through idb-keyval); {@link memoryBackend} serves Node tests and hosts without IndexedDB.
 */
export interface StoreBackend {
  get<T>(key: StoreKey): Promise<T | undefined>;
  set(key: StoreKey, value: unknown): Promise<void>;
  delete(keys: readonly StoreKey[]): Promise<void>;
  /** Keys that start with `prefix`, in key order. */
  keys(prefix: readonly (string | number)[]): Promise<StoreKey[]>;
  clear(): Promise<void>;
}

/** `navigator.storage.estimate()`'s shape, injectable so tests can simulate a full disk. */
export type EstimateFn = () => Promise<{ quota?: number; usage?: number }>;

/** Options of {@link WeightStore}. */
export interface WeightStoreOptions {
  /** The database; default IndexedDB (`weft-v<STORAGE_VERSION>`). */
  backend?: StoreBackend;
  /** Free-space estimate; default `navigator.storage.estimate` when it exists, else no check. */
  estimate?: EstimateFn;
  /** Asks the browser not to evict the data; default `navigator.storage.persist` when it exists. */
  persist?: () => Promise<boolean>;
}

/**
 * The weights cache: chunks, partial-download records and manifests behind a {@link StoreBackend}.
 * A model is listed only once its manifest exists, and the manifest is written after every chunk is
 * stored and verified, so a model is complete or invisible. Chunk bytes are verified against the
 * manifest's hashes by the reader (`reader.ts`), not here; this class only moves records.
 */
export class WeightStore {
  readonly backend: StoreBackend;
  private readonly estimateFn: EstimateFn | undefined;
  private readonly persistFn: (() => Promise<boolean>) | undefined;

  constructor(options: WeightStoreOptions = {}) {
    this.backend = options.backend ?? idbBackend();
    const storage = typeof navigator === 'undefined' ? undefined : navigator.storage;
    this.estimateFn = options.estimate ?? (storage?.estimate ? () => storage.estimate() : undefined);
    this.persistFn = options.persist ?? (storage?.persist ? () => storage.persist() : undefined);
  }

  /** The manifest of a complete model, or undefined. */
  manifest(key: ModelKey): Promise<Manifest | undefined> {
    return this.backend.get<Manifest>(['manifest', keyString(key)]);
  }

  /** Complete models with their sizes, in key order. Partial downloads are not listed. */
  async list(): Promise<StoredModel[]> {
    const out: StoredModel[] = [];
    for (const k of await this.backend.keys(['manifest'])) {
      const m = await this.backend.get<Manifest>(k);
      if (m)
        out.push({ key: m.key, bytes: m.bytes, files: m.files.map((f) => f.name), createdAt: m.createdAt });
    }
    return out;
  }

  /** Deletes a model (complete or partial). The manifest goes first, so it vanishes at once. */
  async delete(key: ModelKey): Promise<void> {
    const id = keyString(key);
    await this.backend.delete([
      ['manifest', id],
      ['partial', id],
    ]);
    await this.backend.delete(await this.backend.keys(['chunk', id]));
  }

  /** Deletes every model, complete or not. */
  clear(): Promise<void> {
    return this.backend.clear();
  }

  /**
   * Deletes everything of every model that has no manifest: started-and-abandoned downloads and stray
   * chunks. Returns the keys (as strings) of the models evicted. Call it instead of resuming.
   */
  async evictIncomplete(): Promise<string[]> {
    const complete = new Set((await this.backend.keys(['manifest'])).map((k) => k[1]));
    const doomed = new Set<string>();
    for (const k of await this.backend.keys(['partial'])) if (!complete.has(k[1])) doomed.add(k[1]);
    for (const k of await this.backend.keys(['chunk'])) if (!complete.has(k[1])) doomed.add(k[1]);
    for (const id of doomed) {
      await this.backend.delete([['partial', id]]);
      await this.backend.delete(await this.backend.keys(['chunk', id]));
    }
    return [...doomed];
  }

  /** The record of an unfinished download of `key`, if any. */
  partial(key: ModelKey): Promise<PartialRecord | undefined> {
    return this.backend.get<PartialRecord>(['partial', keyString(key)]);
  }

  /** Records (or replaces) the unfinished download of `key`. */
  setPartial(record: PartialRecord): Promise<void> {
    return this.write(['partial', keyString(record.key)], record);
  }

  /** Marks `manifest.key` complete and drops its partial record (in that order). */
  async commit(manifest: Manifest): Promise<void> {
    const id = keyString(manifest.key);
    await this.write(['manifest', id], manifest);
    await this.backend.delete([['partial', id]]);
  }

  /** The indices of the chunks of `file` already stored for `key`. */
  async chunkIndices(key: ModelKey, file: string): Promise<Set<number>> {
    const keys = await this.backend.keys(['chunk', keyString(key), file]);
    return new Set(keys.map((k) => (k[0] === 'chunk' ? k[3] : -1)));
  }

  /** One chunk record, or undefined when it was never written (or was evicted). */
  getChunk(key: ModelKey, file: string, index: number): Promise<ChunkRecord | undefined> {
    return this.backend.get<ChunkRecord>(['chunk', keyString(key), file, index]);
  }

  /** Writes one chunk and its hash (one atomic IndexedDB put). */
  putChunk(key: ModelKey, file: string, index: number, record: ChunkRecord): Promise<void> {
    return this.write(['chunk', keyString(key), file, index], record);
  }

  /** Deletes every chunk of one file (its server-side version changed, or its hash was wrong). */
  async deleteFile(key: ModelKey, file: string): Promise<void> {
    await this.backend.delete(await this.backend.keys(['chunk', keyString(key), file]));
  }

  /**
   * Asks for persistent storage, then throws {@link QuotaError} when the free space reported by the
   * estimate is below `needed` bytes. Without an estimate function there is nothing to check; the
   * writes themselves still turn `QuotaExceededError` into {@link QuotaError}.
   */
  async reserve(needed: number): Promise<{ persisted: boolean }> {
    const persisted = this.persistFn ? await this.persistFn().catch(() => false) : false;
    if (this.estimateFn && needed > 0) {
      const { quota, usage } = await this.estimateFn();
      if (quota !== undefined) {
        const available = quota - (usage ?? 0);
        if (available < needed) throw new QuotaError(needed, available);
      }
    }
    return { persisted };
  }

  private async write(key: StoreKey, value: unknown): Promise<void> {
    try {
      await this.backend.set(key, value);
    } catch (e) {
      if (e instanceof DOMException && e.name === 'QuotaExceededError')
        throw new QuotaError(0, Number.NaN, { cause: e });
      throw e;
    }
  }
}

/**
 * The IndexedDB backend: one object store `entries` in the database `weft-v<STORAGE_VERSION>`
 * (idb-keyval's `createStore`), keyed by {@link StoreKey} arrays. Prefix scans use a key range from
 * the prefix to the prefix followed by `[]` (an array sorts after every number and string).
 */
export function idbBackend(dbName = `weft-v${STORAGE_VERSION}`): StoreBackend {
  const store: UseStore = createStore(dbName, 'entries');
  const range = (prefix: readonly (string | number)[]): IDBKeyRange =>
    prefix.length === 0 ? IDBKeyRange.lowerBound([]) : IDBKeyRange.bound([...prefix], [...prefix, []]);
  return {
    get: <T>(key: StoreKey) => store('readonly', (s) => promisifyRequest<T | undefined>(s.get([...key]))),
    set: (key, value) =>
      store('readwrite', (s) => {
        s.put(value, [...key]);
        return promisifyRequest(s.transaction);
      }),
    delete: (keys) =>
      keys.length === 0
        ? Promise.resolve()
        : store('readwrite', (s) => {
            for (const k of keys) s.delete([...k]);
            return promisifyRequest(s.transaction);
          }),
    keys: async (prefix) => {
      const raw = await store('readonly', (s) => promisifyRequest(s.getAllKeys(range(prefix))));
      const out: StoreKey[] = [];
      for (const k of raw) {
        const typed = toStoreKey(k);
        if (typed) out.push(typed);
      }
      return out;
    },
    clear: () =>
      store('readwrite', (s) => {
        s.clear();
        return promisifyRequest(s.transaction);
      }),
  };
}

/**
 * An in-memory backend with the same semantics as {@link idbBackend} (values copied on write, keys
 * in IndexedDB order for the shapes weft uses). For Node and unit tests; nothing survives the process.
 */
export function memoryBackend(): StoreBackend {
  const map = new Map<string, { key: StoreKey; value: unknown }>();
  const id = (key: StoreKey): string => JSON.stringify(key);
  return {
    // Values are whatever this module wrote under the key (as with IndexedDB), hence the cast.
    get: <T>(key: StoreKey) => Promise.resolve(map.get(id(key))?.value as T | undefined),
    set: (key, value) => {
      map.set(id(key), { key, value: structuredClone(value) });
      return Promise.resolve();
    },
    delete: (keys) => {
      for (const k of keys) map.delete(id(k));
      return Promise.resolve();
    },
    keys: (prefix) =>
      Promise.resolve(
        [...map.values()]
          .map((e) => e.key)
          .filter((k) => prefix.every((p, i) => k[i] === p))
          .sort(compareKeys),
      ),
    clear: () => {
      map.clear();
      return Promise.resolve();
    },
  };
}

// IndexedDB order restricted to weft's keys: numbers before strings, element by element.
function compareKeys(a: StoreKey, b: StoreKey): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    if (typeof x !== typeof y) return typeof x === 'number' ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

// Rebuilds a typed key from what IndexedDB returns; keys of any other shape are skipped.
function toStoreKey(key: IDBValidKey): StoreKey | undefined {
  if (!Array.isArray(key)) return undefined;
  const [kind, model, file, index] = key;
  if (typeof model !== 'string') return undefined;
  if (key.length === 2 && (kind === 'manifest' || kind === 'partial')) return [kind, model];
  if (key.length === 4 && kind === 'chunk' && typeof file === 'string' && typeof index === 'number') {
    return [kind, model, file, index];
  }
  return undefined;
}
