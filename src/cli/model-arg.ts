import { existsSync, statSync } from 'node:fs';
import { modelFiles } from '../engine/create.js';
import { InvalidInputError } from '../errors.js';
import { ggufName, type ModelFiles } from '../model/files.js';
import { dirModelFiles } from '../model/node-files.js';

/** Whether `model` is a local model: a folder, or a `.gguf` file. */
export function isLocalModel(model: string): boolean {
  if (!existsSync(model)) return false;
  const st = statSync(model);
  return st.isDirectory() || (st.isFile() && ggufName(model) !== undefined);
}

/** The files of a `--model` argument: a local folder or `.gguf` file, else a URL or hub id. */
export function modelFilesFor(model: string): ModelFiles {
  if (isLocalModel(model)) return dirModelFiles(model);
  if (/^(\/|\.\.?\/|~)/.test(model) || existsSync(model))
    throw new InvalidInputError(
      `--model: "${model}" is not a model folder (a directory with config.json) or a .gguf file`,
    );
  return modelFiles(model, process.env.WEFT_HUB ?? 'https://huggingface.co');
}
