import { access, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ModelFormatError } from '../formats/errors.js';
import { fileSource } from '../formats/node-file.js';
import type { ModelFiles } from './files.js';

/** Node only: the model files in local directory `dir`. */
export function dirModelFiles(dir: string): ModelFiles {
  const opened: { close(): Promise<void> }[] = [];
  return {
    name: dir,
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
