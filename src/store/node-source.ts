import { existsSync } from 'node:fs';
import { pathModel } from '../formats/io/node-file.js';
import { type ModelRef, type ModelSource, type ResolveOptions, resolveModel } from './source.js';

/**
 * Node only: {@link resolveModel} that also takes a filesystem path: a string that exists on disk
 * or starts with `/`, `./`, `../` or `~` is a local model folder or `.gguf` file (see `pathModel`,
 * which throws when it is neither); anything else resolves as in the browser. Kept out of
 * `source.ts` so browser bundles never import `node:fs`.
 */
export async function resolveNodeModel(model: ModelRef, options: ResolveOptions = {}): Promise<ModelSource> {
  if (typeof model === 'string' && (/^(\/|\.\.?\/|~)/.test(model) || existsSync(model)))
    return { kind: 'local', files: await pathModel(model) };
  return resolveModel(model, options);
}
