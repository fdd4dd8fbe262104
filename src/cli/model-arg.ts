import { existsSync, statSync } from 'node:fs';
import { modelFiles } from '../engine/create.js';
import { InvalidInputError } from '../errors.js';
import type { ModelFiles } from '../model/files.js';
import { dirModelFiles } from '../model/node-files.js';

/** The files of a `--model` argument: a local folder, else a URL or hub id. */
export function modelFilesFor(model: string): ModelFiles {
  if (existsSync(model) && statSync(model).isDirectory()) return dirModelFiles(model);
  if (/^(\/|\.\.?\/|~)/.test(model) || existsSync(model))
    throw new InvalidInputError(`--model: "${model}" is not a model folder (a directory with config.json)`);
  return modelFiles(model, process.env.WEFT_HUB ?? 'https://huggingface.co');
}
