import { access, readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { ModelFormatError } from '../formats/errors.js';
import { fileSource } from '../formats/node-file.js';
import { ggufName, type ModelFiles } from './files.js';

/**
 * Node only: the model files in local directory `path`, or the one GGUF file `path` when it ends
 * in `.gguf` (read from its folder, with `gguf` naming it).
 */
export function dirModelFiles(path: string): ModelFiles {
  const gguf = ggufName(path) === undefined ? undefined : basename(path);
  const dir = gguf === undefined ? path : dirname(path);
  const opened: { close(): Promise<void> }[] = [];
  return {
    name: path,
    ...(gguf === undefined ? {} : { gguf }),
    async exists(file) {
      return access(join(dir, file)).then(
        () => true,
        () => false,
      );
    },
    async text(file) {
      try {
        return await readFile(join(dir, file), 'utf8');
      } catch (cause) {
        throw new ModelFormatError(join(dir, file), '(file)', file, 'could not be read', { cause });
      }
    },
    async open(file) {
      const source = await fileSource(join(dir, file));
      opened.push(source);
      return source;
    },
    async close() {
      await Promise.all(opened.splice(0).map((s) => s.close()));
    },
  };
}
