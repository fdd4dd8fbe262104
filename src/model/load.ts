import {
  openSafetensors,
  openShardedSafetensors,
  type SafetensorsCheckpoint,
} from '../formats/safetensors.js';
import { loadTokenizer, type WeftTokenizer } from '../tokenizer/tokenizer.js';
import { specFromConfig, withGenerationConfig } from './config.js';
import { type ModelFiles, readJson } from './files.js';
import type { ModelSpec } from './spec.js';

/** A model's metadata and tokenizer, and its weights opened (not read). */
export interface OpenedModel {
  readonly spec: ModelSpec;
  readonly tokenizer: WeftTokenizer;
  readonly weights: SafetensorsCheckpoint;
  /** The tokenizer config has a chat template (an instruct model). */
  readonly chat: boolean;
}

/**
 * Opens a Hugging Face-layout model: config.json (+ generation_config.json), tokenizer.json
 * (+ tokenizer_config.json), and model.safetensors or the sharded index. Only headers are read;
 * tensors are read one at a time by the loader that places them.
 */
export async function openModel(files: ModelFiles): Promise<OpenedModel> {
  let spec = specFromConfig(await readJson(files, 'config.json'), `${files.name}/config.json`);
  if (await files.exists('generation_config.json')) {
    spec = withGenerationConfig(spec, await readJson(files, 'generation_config.json'));
  }
  const tokenizerConfig = (await files.exists('tokenizer_config.json'))
    ? await readJson(files, 'tokenizer_config.json')
    : {};
  const tokenizer = loadTokenizer(await readJson(files, 'tokenizer.json'), tokenizerConfig, spec.eosIds);
  const weights = (await files.exists('model.safetensors.index.json'))
    ? await openShardedSafetensors(await readJson(files, 'model.safetensors.index.json'), (f) =>
        files.open(f),
      )
    : await openSafetensors(await files.open('model.safetensors'));
  const chat =
    typeof tokenizerConfig === 'object' && tokenizerConfig !== null && 'chat_template' in tokenizerConfig;
  return { spec, tokenizer, weights, chat };
}
