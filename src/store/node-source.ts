import { readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { InvalidInputError } from '../errors.js';
import { fileSource } from '../formats/node-file.js';
import type { LocalSource } from './source.js';

/**
 * Node only: a {@link LocalSource} over a model folder on disk (what the CLI, tests and benchmarks
 * load from). Files are listed recursively once; each `open` is a positioned-read file handle from
 * `formats/node-file.ts`, so nothing is read until asked. Kept out of `source.ts` so browser bundles
 * never import `node:fs`.
 */
export async function pathModel(dir: string): Promise<LocalSource> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const files = entries
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)).split(sep).join('/'))
    .sort();
  const known = new Set(files);
  return {
    kind: 'local',
    name: dir,
    files,
    open(file) {
      if (!known.has(file))
        return Promise.reject(new InvalidInputError(`${dir}: no file ${JSON.stringify(file)}`));
      return fileSource(join(dir, ...file.split('/')));
    },
  };
}
