import { AbortError, DownloadError } from '../errors.js';
import { checkResponse, readBody, request } from '../formats/io/http.js';
import { IntegrityError } from './errors.js';
import { Sha256, sha256Hex } from './sha256.js';
import { fileUrl, type ModelKey, modelKey, type RemoteSource } from './source.js';
import {
  type Manifest,
  type ManifestFile,
  type RemoteFile,
  STORAGE_VERSION,
  type WeightStore,
} from './store.js';

/** Default chunk size: 16 MiB (one IndexedDB record and one Range request each). */
const DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024;

/** One chunk of a file: its index and byte range `[offset, offset + length)`. */
export interface Chunk {
  readonly index: number;
  readonly offset: number;
  readonly length: number;
}

/**
 * Splits a file of `size` bytes into chunks of `chunkSize` (the last one shorter). An empty file has
 * no chunks. Chunk `i` always starts at `i * chunkSize`, which is what lets a resume trust an index.
 */
export function planChunks(size: number, chunkSize: number): Chunk[] {
  if (!Number.isSafeInteger(size) || size < 0)
    throw new RangeError(`file size must be a whole number, got ${size}`);
  if (!Number.isSafeInteger(chunkSize) || chunkSize <= 0)
    throw new RangeError(`chunk size must be > 0, got ${chunkSize}`);
  const out: Chunk[] = [];
  for (let offset = 0, index = 0; offset < size; offset += chunkSize, index++) {
    out.push({ index, offset, length: Math.min(chunkSize, size - offset) });
  }
  return out;
}

/** Retry policy: at most `retries` retries after the first try, waiting `baseMs·2^n` (capped) between. */
export interface RetryPolicy {
  readonly retries: number;
  readonly baseMs: number;
  readonly maxMs: number;
}

/** Default retry policy: 5 retries, 0.5 s doubling to at most 8 s. */
export const DEFAULT_RETRY: RetryPolicy = { retries: 5, baseMs: 500, maxMs: 8000 };

/**
 * The wait before retry number `attempt` (0 for the first retry): `baseMs · 2^attempt`, capped at
 * `maxMs`, scaled by `jitter` in [0.5, 1] so that parallel chunks that failed together do not retry
 * together. Pass `jitter = 1` for the deterministic upper bound.
 */
export function backoffDelay(attempt: number, policy: RetryPolicy, jitter = 0.5 + Math.random() / 2): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** attempt) * jitter;
}

/**
 * Runs `task` until it succeeds, retrying failures that {@link isRetryable} accepts after
 * {@link backoffDelay}, at most `policy.retries` times. An abort of `signal` stops at once with
 * {@link AbortError}; a non-retryable error or the last failure is rethrown as is. `onRetry` sees each
 * failure that will be retried (for logs and for undoing progress).
 */
export async function withRetry<T>(
  task: (attempt: number) => Promise<T>,
  policy: RetryPolicy,
  options: { signal?: AbortSignal; onRetry?: (error: unknown, attempt: number) => void; sleep?: Sleep } = {},
): Promise<T> {
  const sleep = options.sleep ?? abortableSleep;
  for (let attempt = 0; ; attempt++) {
    throwIfAborted(options.signal);
    try {
      return await task(attempt);
    } catch (e) {
      if (options.signal?.aborted) throw new AbortError('download cancelled', { cause: e });
      if (attempt >= policy.retries || !isRetryable(e)) throw e;
      options.onRetry?.(e, attempt);
      await sleep(backoffDelay(attempt, policy), options.signal);
    }
  }
}

/** A wait that an AbortSignal can cut short (rejecting with {@link AbortError}). */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

/**
 * Worth retrying: network failures ({@link DownloadError} with status 0, or fetch's own `TypeError`),
 * 408, 429 and 5xx. Not: other statuses, integrity and quota errors, aborts, anything else.
 */
export function isRetryable(e: unknown): boolean {
  if (e instanceof DownloadError)
    return e.status === 0 || e.status === 408 || e.status === 429 || e.status >= 500;
  return e instanceof TypeError;
}

/** Progress of a download, sent after every piece of body that arrives and after every file. */
export interface DownloadProgress {
  /** Bytes stored or in flight, including chunks already stored before this download started. */
  readonly bytesDone: number;
  readonly bytesTotal: number;
  readonly filesDone: number;
  readonly filesTotal: number;
  /** Bytes per second fetched by this download (stored chunks it skipped do not count). */
  readonly rate: number;
  /** Seconds left at `rate`; `Infinity` before anything arrived. */
  readonly etaSeconds: number;
  /** The file the latest bytes belong to. */
  readonly file: string;
}

/** Options of {@link downloadModel}. */
export interface DownloadOptions {
  /** Bytes per chunk (default {@link DEFAULT_CHUNK_SIZE}); a resume keeps the size it started with. */
  chunkSize?: number;
  /** Range requests in flight at once (default 4). */
  concurrency?: number;
  retry?: RetryPolicy;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
  fetch?: typeof fetch;
  sleep?: Sleep;
}

/**
 * Downloads `files` of a remote model into `store` and returns its manifest. A model already complete
 * in the store is returned without touching the network. Otherwise: each file is probed (HEAD) for
 * size, ETag and, when the server gives one, its SHA-256; chunks already stored by an earlier,
 * interrupted download of the same file version are kept and the rest are fetched with Range
 * requests, `concurrency` at a time, each retried with backoff, hashed and written as one record.
 * The quota is checked against the bytes still missing before anything is written. When a file's
 * chunks are all stored, it is re-read in order and hashed as a whole; a mismatch with the server's
 * SHA-256 (or size) deletes the file's chunks and throws {@link IntegrityError}. The manifest is
 * written last. Cancel with `signal` ({@link AbortError}; stored chunks stay for a resume).
 */
export async function downloadModel(
  store: WeightStore,
  source: RemoteSource,
  files: readonly string[],
  options: DownloadOptions = {},
): Promise<Manifest> {
  const key = modelKey(source);
  const existing = await store.manifest(key);
  if (existing && files.every((f) => existing.files.some((e) => e.name === f))) return existing;

  const fetchFn = options.fetch ?? fetch;
  const retry = options.retry ?? DEFAULT_RETRY;
  const signal = options.signal;
  const concurrency = Math.max(1, options.concurrency ?? 4);
  const partial = await store.partial(key);
  // Asking for more files of a complete model downloads the union and rewrites its manifest.
  const names = [...new Set([...(existing?.files.map((f) => f.name) ?? []), ...files])];

  // 1. What the server has now. A file seen before (in an unfinished download or the manifest) at the
  // same size and ETag keeps its chunk size, so its stored chunk indices stay valid; any other file
  // starts from nothing (stray chunks of an older version are deleted).
  const remote: RemoteFile[] = [];
  for (const name of names) {
    const url = fileUrl(source, name);
    const info = await withRetry(() => probe(url, fetchFn, signal), retry, { signal, sleep: options.sleep });
    const before =
      partial?.files.find((f) => f.name === name) ?? existing?.files.find((f) => f.name === name);
    const same = before !== undefined && before.size === info.size && before.etag === info.etag;
    if (!same) await store.deleteFile(key, name);
    const chunkSize = same ? before.chunkSize : (options.chunkSize ?? DEFAULT_CHUNK_SIZE);
    remote.push({ name, url, size: info.size, etag: info.etag, sha256: info.sha256, chunkSize });
  }

  // 2. What is missing; reserve room for it before writing a byte.
  const missing: { file: RemoteFile; chunk: Chunk }[] = [];
  let bytesTotal = 0;
  let bytesDone = 0;
  for (const file of remote) {
    const have = await store.chunkIndices(key, file.name);
    for (const chunk of planChunks(file.size, file.chunkSize)) {
      if (have.has(chunk.index)) bytesDone += chunk.length;
      else missing.push({ file, chunk });
    }
    bytesTotal += file.size;
  }
  await store.reserve(bytesTotal - bytesDone);
  await store.setPartial({ version: STORAGE_VERSION, key, files: remote, startedAt: Date.now() });

  // 3. Fetch the missing chunks; progress counts body bytes as they arrive.
  const started = Date.now();
  let fetched = 0;
  let filesDone = 0;
  const left = new Map(remote.map((f) => [f.name, 0]));
  for (const m of missing) left.set(m.file.name, (left.get(m.file.name) ?? 0) + 1);
  const report = (file: string): void => {
    const rate = fetched / Math.max((Date.now() - started) / 1000, 1e-3);
    const eta = rate > 0 ? (bytesTotal - bytesDone) / rate : Number.POSITIVE_INFINITY;
    options.onProgress?.({
      bytesDone,
      bytesTotal,
      filesDone,
      filesTotal: remote.length,
      rate,
      etaSeconds: eta,
      file,
    });
  };
  const finished: ManifestFile[] = [];
  const finishFile = async (file: RemoteFile): Promise<void> => {
    finished.push(await verifyFile(store, key, file));
    filesDone++;
    report(file.name);
  };
  // Files with nothing missing are verified up front; the others when their last chunk lands.
  for (const file of remote) if (left.get(file.name) === 0) await finishFile(file);

  const fetchOne = async ({ file, chunk }: { file: RemoteFile; chunk: Chunk }): Promise<void> => {
    let inFlight = 0;
    const bytes = await withRetry(
      () =>
        fetchRange(file.url, chunk, fetchFn, signal, (n) => {
          inFlight += n;
          bytesDone += n;
          fetched += n;
          report(file.name);
        }),
      retry,
      {
        signal,
        sleep: options.sleep,
        // A failed attempt's partial body is thrown away: take its bytes back out of the progress.
        onRetry: () => {
          bytesDone -= inFlight;
          inFlight = 0;
        },
      },
    );
    await store.putChunk(key, file.name, chunk.index, { bytes, sha256: await sha256Hex(bytes) });
    const remaining = (left.get(file.name) ?? 1) - 1;
    left.set(file.name, remaining);
    if (remaining === 0) await finishFile(file);
  };
  await runPool(missing, concurrency, fetchOne);

  // 4. Every file verified: the manifest makes the model visible.
  const byName = new Map(finished.map((f) => [f.name, f]));
  const all = remote.map((f) => byName.get(f.name)!);
  const manifest: Manifest = {
    version: STORAGE_VERSION,
    key,
    files: all,
    bytes: bytesTotal,
    createdAt: Date.now(),
  };
  await store.commit(manifest);
  return manifest;
}

/** Size, ETag and (when announced) SHA-256 of a remote file, from a HEAD request. */
export interface ProbeResult {
  readonly size: number;
  readonly etag: string | null;
  readonly sha256: string | null;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * HEADs `url`. The size is the hub's `X-Linked-Size` when present (the LFS object behind a redirect),
 * else `Content-Length`. The whole-file SHA-256 is the hub's `X-Linked-Etag`, or the ETag itself
 * when it is 64 hex digits (the hub's ETag of an LFS file is its SHA-256); quotes and a weak `W/`
 * prefix are stripped. Other ETags are kept only to notice a changed file on resume.
 */
export async function probe(url: string, fetchFn: typeof fetch, signal?: AbortSignal): Promise<ProbeResult> {
  const res = await request(url, fetchFn, { method: 'HEAD', signal });
  checkResponse(url, res);
  const size = Number(res.headers.get('x-linked-size') ?? res.headers.get('content-length'));
  if (!Number.isSafeInteger(size) || size < 0)
    throw new DownloadError(url, res.status, 'server did not report the file size');
  const etag = unquote(res.headers.get('etag'));
  const linked = unquote(res.headers.get('x-linked-etag'));
  const candidate = linked ?? etag;
  const sha256 = candidate !== null && SHA256_HEX.test(candidate) ? candidate : null;
  return { size, etag, sha256 };
}

function unquote(etag: string | null): string | null {
  return etag === null ? null : etag.replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
}

/**
 * GETs `chunk`'s byte range of `url` and returns exactly its bytes, calling `onBytes` with the size
 * of each piece of body as it arrives. Refuses a response other than 206 (a server ignoring Range
 * would send the whole file) and a body of the wrong length; a connection cut mid-body rejects.
 */
export async function fetchRange(
  url: string,
  chunk: Chunk,
  fetchFn: typeof fetch,
  signal?: AbortSignal,
  onBytes?: (n: number) => void,
): Promise<Uint8Array> {
  const res = await request(url, fetchFn, {
    headers: { Range: `bytes=${chunk.offset}-${chunk.offset + chunk.length - 1}` },
    signal,
  });
  if (res.status !== 206) {
    await res.body?.cancel().catch(() => undefined);
    checkResponse(url, res);
    throw new DownloadError(url, res.status, `expected HTTP 206 for a range request, got ${res.status}`);
  }
  if (!res.body) throw new DownloadError(url, res.status, 'response has no body');
  // Read into one preallocated buffer of the chunk's size; no more than that is ever held.
  const out = new Uint8Array(chunk.length);
  let filled = 0;
  const reader = res.body.getReader();
  for (;;) {
    // A connection cut mid-body is a network failure too (DownloadError, status 0: retryable).
    const { done, value } = await readBody(url, () => reader.read(), signal);
    if (done) break;
    if (filled + value.byteLength > chunk.length) {
      await reader.cancel().catch(() => undefined);
      throw new DownloadError(url, 0, `server sent more than the ${chunk.length} bytes asked for`);
    }
    out.set(value, filled);
    filled += value.byteLength;
    onBytes?.(value.byteLength);
  }
  if (filled !== chunk.length) {
    throw new DownloadError(url, 0, `connection closed after ${filled} of ${chunk.length} bytes`);
  }
  return out;
}

/**
 * Re-reads every chunk of `file` in order, checks each against its stored hash and feeds it to an
 * incremental SHA-256, then compares the whole against the server's hash when there is one. On any
 * mismatch the file's chunks are deleted (a resume fetches them again) and {@link IntegrityError}
 * is thrown.
 */
async function verifyFile(store: WeightStore, key: ModelKey, file: RemoteFile): Promise<ManifestFile> {
  const hash = new Sha256();
  const chunks: string[] = [];
  let size = 0;
  try {
    for (const chunk of planChunks(file.size, file.chunkSize)) {
      const rec = await store.getChunk(key, file.name, chunk.index);
      if (!rec) throw new IntegrityError(file.name, `chunk ${chunk.index}`, 'stored', 'missing');
      const actual = await sha256Hex(rec.bytes);
      if (actual !== rec.sha256)
        throw new IntegrityError(file.name, `chunk ${chunk.index}`, rec.sha256, actual);
      if (rec.bytes.byteLength !== chunk.length) {
        throw new IntegrityError(
          file.name,
          `chunk ${chunk.index} size`,
          String(chunk.length),
          String(rec.bytes.byteLength),
        );
      }
      hash.update(rec.bytes);
      chunks.push(rec.sha256);
      size += rec.bytes.byteLength;
    }
    const storedSha256 = hash.hex();
    if (size !== file.size) throw new IntegrityError(file.name, 'size', String(file.size), String(size));
    if (file.sha256 !== null && storedSha256 !== file.sha256) {
      throw new IntegrityError(file.name, 'sha256', file.sha256, storedSha256);
    }
    return { ...file, chunks, storedSha256 };
  } catch (e) {
    await store.deleteFile(key, file.name);
    throw e;
  }
}

/**
 * Runs `work` over `items` with at most `limit` in flight. The first failure stops new items from
 * starting, waits for those in flight, and is rethrown.
 */
export async function runPool<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | undefined;
  const lane = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const item = items[next++]!;
      try {
        await work(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if (failure) throw failure.error;
}

function throwIfAborted(signal?: AbortSignal): void {
  if (signal?.aborted) throw new AbortError('download cancelled', { cause: signal.reason });
}

const abortableSleep: Sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortError('download cancelled', { cause: signal.reason }));
    const done = (): void => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new AbortError('download cancelled', { cause: signal?.reason }));
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
