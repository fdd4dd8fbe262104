import { existsSync, statSync } from 'node:fs';
import { openModelSource } from '../engine/open.js';
import { InvalidInputError } from '../errors.js';
import { ggufName, type ModelFiles } from '../formats/io/files.js';
import { resolveNodeModel } from '../store/node-source.js';

/** Whether `model` is a local model: a folder, or a `.gguf` file. */
export function isLocalModel(model: string): boolean {
  if (!existsSync(model)) return false;
  const st = statSync(model);
  return st.isDirectory() || (st.isFile() && ggufName(model) !== undefined);
}

/**
 * The files of a `--model` argument: a local folder or `.gguf` file, else a URL or hub id (against
 * `$WEFT_HUB` when set), read in place.
 */
export async function modelFilesFor(model: string): Promise<ModelFiles> {
  if (!isLocalModel(model) && (/^(\/|\.\.?\/|~)/.test(model) || existsSync(model)))
    throw new InvalidInputError(
      `--model: "${model}" is not a model folder (a directory with config.json) or a .gguf file`,
    );
  const hub = process.env.WEFT_HUB;
  return openModelSource(await resolveNodeModel(model, hub === undefined ? {} : { hubBase: hub }));
}
