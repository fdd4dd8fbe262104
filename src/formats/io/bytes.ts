import { ModelFormatError } from '../errors.js';
import { checkResponse, readBody, request } from './http.js';

/**
 * Random access to the bytes of one file, wherever it lives: a `Blob`/`File` from a file picker, a
 * URL served with HTTP Range requests, a Node path (`formats/node-file.ts`) or bytes in memory.
 * Loaders read headers and then one tensor (or one ≤ 64 MB chunk) at a time through it, so a
 * multi-gigabyte checkpoint never has to sit in a single `ArrayBuffer`. `name` is what errors
 * report as the file.
 */
export interface FileBytes {
  readonly name: string;
  /** Total size in bytes. */
  readonly size: number;
  /**
   * The bytes `[offset, offset + length)`. Throws {@link ModelFormatError} when the range is not
   * inside the file (callers check ranges against `size` first; this is the last line).
   */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** Throws unless `[offset, offset + length)` lies inside a source of `size` bytes. */
export function checkRange(source: { name: string; size: number }, offset: number, length: number): void {
  if (
    !Number.isSafeInteger(offset) ||
    !Number.isSafeInteger(length) ||
    offset < 0 ||
    length < 0 ||
    offset + length > source.size
  ) {
    throw new ModelFormatError(
      source.name,
      'read',
      [offset, length],
      `range past the end (${source.size} bytes)`,
    );
  }
}

/** A {@link FileBytes} over bytes already in memory (tests, small files, fetched wholes). */
export function memoryBytes(bytes: Uint8Array, name: string): FileBytes {
  const size = bytes.byteLength;
  return {
    name,
    size,
    read(offset, length) {
      checkRange({ name, size }, offset, length);
      return Promise.resolve(bytes.subarray(offset, offset + length));
    },
  };
}

/** A {@link FileBytes} over a `Blob` or `File`: each read is a `slice().arrayBuffer()`. */
export function blobBytes(blob: Blob, name = blob instanceof File ? blob.name : 'blob'): FileBytes {
  const size = blob.size;
  return {
    name,
    size,
    async read(offset, length) {
      checkRange({ name, size }, offset, length);
      return new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
    },
  };
}

/**
 * A {@link FileBytes} over a URL, reading with HTTP `Range` requests (one per read). The size comes
 * from a `HEAD` request's `Content-Length` (or a 1-byte range's `Content-Range` when HEAD is not
 * allowed). A server that ignores ranges (status 200 for a partial request) is refused, rather
 * than downloading the whole file on every read. `fetchFn` defaults to the global `fetch`. A
 * failed request (the network, an error status, an HTML page) throws `DownloadError` naming `url`.
 */
export async function urlBytes(url: string, fetchFn: typeof fetch = fetch): Promise<FileBytes> {
  const name = url.split('/').pop() || url;
  let size = Number.NaN;
  const head = await request(url, fetchFn, { method: 'HEAD' });
  if (head.ok) {
    checkResponse(url, head);
    size = Number(head.headers.get('content-length'));
  }
  if (!Number.isSafeInteger(size)) {
    const probe = await request(url, fetchFn, { headers: { Range: 'bytes=0-0' } });
    await probe.body?.cancel();
    checkResponse(url, probe);
    const total = probe.headers.get('content-range')?.split('/')[1];
    size = Number(total);
  }
  if (!Number.isSafeInteger(size) || size < 0) {
    throw new ModelFormatError(name, 'content-length', size, 'server did not report the file size');
  }
  return {
    name,
    size,
    async read(offset, length) {
      checkRange({ name, size }, offset, length);
      if (length === 0) return new Uint8Array(0);
      const res = await request(url, fetchFn, {
        headers: { Range: `bytes=${offset}-${offset + length - 1}` },
      });
      if (res.status !== 206) {
        await res.body?.cancel();
        checkResponse(url, res);
        throw new ModelFormatError(name, 'range', [offset, length], `expected HTTP 206, got ${res.status}`);
      }
      const bytes = new Uint8Array(await readBody(url, () => res.arrayBuffer()));
      if (bytes.byteLength !== length) {
        throw new ModelFormatError(name, 'range', [offset, length], `server sent ${bytes.byteLength} bytes`);
      }
      return bytes;
    },
  };
}
