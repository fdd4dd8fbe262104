import { open } from 'node:fs/promises';
import { basename } from 'node:path';
import { type ByteSource, checkRange } from './source.js';

/**
 * Node only: a {@link ByteSource} over a local file path, reading with positioned `read`s on one
 * file handle. Call `close()` when done. Kept apart from the rest of `formats/` so browser bundles
 * never import `node:fs`.
 */
export async function fileSource(path: string): Promise<ByteSource & { close(): Promise<void> }> {
  const handle = await open(path, 'r');
  const { size } = await handle.stat();
  const name = basename(path);
  return {
    name,
    size,
    async read(offset, length) {
      checkRange({ name, size }, offset, length);
      const out = new Uint8Array(length);
      let done = 0;
      // A positioned read may return fewer bytes than asked; loop until the range is filled.
      while (done < length) {
        const { bytesRead } = await handle.read(out, done, length - done, offset + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return out.subarray(0, done);
    },
    close: () => handle.close(),
  };
}
