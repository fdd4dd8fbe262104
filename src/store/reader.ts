import type { FileBytes } from '../formats/io/bytes.js';
import { checkRange } from '../formats/io/bytes.js';
import { DEFAULT_RETRY, fetchRange, planChunks, type RetryPolicy, withRetry } from './download.js';
import { IntegrityError } from './errors.js';
import { sha256Hex } from './sha256.js';
import type { ModelKey } from './source.js';
import type { ManifestFile, WeightStore } from './store.js';

/**
 * A file of a cached model, read from the store: random access (`read`, the {@link FileBytes} the
 * format parsers take) and a chunk-by-chunk iterator (`chunks()`, for streaming into GPU buffers).
 * Only one chunk is in memory at a time. Every chunk is hashed when read and compared with the hash
 * in the manifest; a chunk that does not match is fetched again from the file's URL, checked, written
 * back and only then returned. If it cannot be fetched (offline) or the fetched bytes do not match
 * either, {@link IntegrityError} is thrown: bad bytes are never returned.
 */
export interface StoredFile extends FileBytes {
  /** The file's chunks in order, each verified; `chunkSize` bytes each except the last. */
  chunks(): AsyncIterableIterator<Uint8Array>;
  /** How many chunks were re-fetched because the stored copy was corrupt (for logs and tests). */
  readonly repaired: number;
}

/** Options of {@link openStoredFile}. */
export interface ReadOptions {
  /** Used to re-fetch a corrupt chunk; default the global `fetch`. */
  fetch?: typeof fetch;
  retry?: RetryPolicy;
}

/**
 * Opens `file` of the complete model `key`. Throws {@link IntegrityError} when the model or the file
 * is not in the store (there is no manifest, so it is not complete).
 */
export async function openStoredFile(
  store: WeightStore,
  key: ModelKey,
  file: string,
  options: ReadOptions = {},
): Promise<StoredFile> {
  const manifest = await store.manifest(key);
  const entry = manifest?.files.find((f) => f.name === file);
  if (!entry) throw new IntegrityError(file, 'presence', 'a complete cached model with this file', 'none');
  return new CachedFile(store, key, entry, options);
}

class CachedFile implements StoredFile {
  readonly name: string;
  readonly size: number;
  repaired = 0;
  // The last chunk read, so small sequential reads (headers, one tensor after another) hash each
  // chunk once rather than once per read.
  private last: { index: number; bytes: Uint8Array } | undefined;

  constructor(
    private readonly store: WeightStore,
    private readonly key: ModelKey,
    private readonly entry: ManifestFile,
    private readonly options: ReadOptions,
  ) {
    this.name = entry.name;
    this.size = entry.size;
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    checkRange(this, offset, length);
    const cs = this.entry.chunkSize;
    const first = Math.floor(offset / cs);
    const last = Math.floor((offset + Math.max(length, 1) - 1) / cs);
    // Within one chunk: a view of it, no copy. Across chunks: copy each overlapping part.
    if (first === last || length === 0) {
      const bytes = await this.chunk(first);
      return bytes.subarray(offset - first * cs, offset - first * cs + length);
    }
    const out = new Uint8Array(length);
    for (let i = first; i <= last; i++) {
      const bytes = await this.chunk(i);
      const from = Math.max(offset, i * cs);
      const to = Math.min(offset + length, i * cs + bytes.byteLength);
      out.set(bytes.subarray(from - i * cs, to - i * cs), from - offset);
    }
    return out;
  }

  async *chunks(): AsyncIterableIterator<Uint8Array> {
    for (const c of planChunks(this.size, this.entry.chunkSize)) yield await this.chunk(c.index);
  }

  private async chunk(index: number): Promise<Uint8Array> {
    if (this.last?.index === index) return this.last.bytes;
    const expected = this.entry.chunks[index];
    if (expected === undefined)
      throw new IntegrityError(this.name, `chunk ${index}`, 'in manifest', 'missing');
    const rec = await this.store.getChunk(this.key, this.name, index);
    let bytes = rec?.bytes;
    // The record's own hash is not trusted: the manifest's, written after verification, is.
    if (!bytes || (await sha256Hex(bytes)) !== expected) bytes = await this.refetch(index, expected);
    this.last = { index, bytes };
    return bytes;
  }

  private async refetch(index: number, expected: string): Promise<Uint8Array> {
    const chunk = planChunks(this.size, this.entry.chunkSize)[index]!;
    let bytes: Uint8Array;
    try {
      bytes = await withRetry(
        () => fetchRange(this.entry.url, chunk, this.options.fetch ?? fetch),
        this.options.retry ?? DEFAULT_RETRY,
      );
    } catch (cause) {
      throw new IntegrityError(
        this.name,
        `chunk ${index}`,
        expected,
        'corrupt in store, and re-fetching failed',
        {
          cause,
        },
      );
    }
    const actual = await sha256Hex(bytes);
    if (actual !== expected)
      throw new IntegrityError(this.name, `chunk ${index} (re-fetched)`, expected, actual);
    await this.store.putChunk(this.key, this.name, index, { bytes, sha256: actual });
    this.repaired++;
    return bytes;
  }
}
