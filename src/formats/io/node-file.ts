import { open, readdir, stat } from 'node:fs/promises';
import { basename, dirname, join, relative, sep } from 'node:path';
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../errors.js';
import { checkRange, type FileBytes } from './bytes.js';
import { ggufName, type LocalFiles } from './files.js';

/**
 * Node only: a {@link FileBytes} over a local file path, reading with positioned `read`s on one
 * file handle. Call `close()` when done. Kept apart from the rest of `formats/` so browser bundles
 * never import `node:fs`.
 */
export async function pathBytes(path: string): Promise<FileBytes & { close(): Promise<void> }> {
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

/**
 * Node only: the model at `path`, read in place: a model folder (its files listed recursively once)
 * or one `.gguf` file (then the only file, and `gguf` names it). Each `open` is a {@link pathBytes},
 * so nothing is read until asked; `close()` releases every handle opened. Throws
 * {@link InvalidInputError} when `path` is neither a folder nor a `.gguf` file.
 */
export async function pathModel(path: string): Promise<LocalFiles> {
  const st = await stat(path).catch(() => undefined);
  const gguf = st?.isFile() ? ggufName(path) : undefined;
  if (!st?.isDirectory() && gguf === undefined)
    throw new InvalidInputError(
      `"${path}" is not a model folder (a directory with config.json) or a .gguf file`,
    );
  const dir = gguf === undefined ? path : dirname(path);
  const files =
    gguf !== undefined
      ? [gguf]
      : (await readdir(dir, { recursive: true, withFileTypes: true }))
          .filter((e) => e.isFile())
          .map((e) => relative(dir, join(e.parentPath, e.name)).split(sep).join('/'))
          .sort();
  const known = new Set(files);
  const opened: { close(): Promise<void> }[] = [];
  const openFile = async (file: string) => {
    if (!known.has(file)) throw new InvalidInputError(`${path}: no file ${JSON.stringify(file)}`);
    const source = await pathBytes(join(dir, ...file.split('/')));
    opened.push(source);
    return source;
  };
  return {
    name: path,
    ...(gguf === undefined ? {} : { gguf }),
    files,
    exists: async (file) => known.has(file),
    async text(file) {
      if (!known.has(file)) throw new ModelFormatError(`${path}/${file}`, '(file)', file, 'is missing');
      const source = await openFile(file);
      try {
        return new TextDecoder().decode(await source.read(0, source.size));
      } finally {
        opened.splice(opened.indexOf(source), 1);
        await source.close();
      }
    },
    open: openFile,
    async close() {
      await Promise.all(opened.splice(0).map((s) => s.close()));
    },
  };
}
