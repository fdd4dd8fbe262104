// A checkpoint's generation_config.json merged into its spec: where instruct models keep their
// end-of-turn tokens.
import { ModelFormatError } from '../../formats/errors.js';
import { Fields, isObject } from './fields.js';
import type { ModelSpec } from './spec.js';

/**
 * Merges a `generation_config.json` (already parsed) into a spec: its `eos_token_id` (a number or
 * a list, e.g. Llama 3 Instruct's `[128001, 128008, 128009]`) is added to the spec's EOS set, in
 * order and without duplicates, and its `bos_token_id` fills a missing BOS. The generation config
 * is where instruct models keep their end-of-turn tokens, so engines should always merge it.
 */
export function withGenerationConfig(
  spec: ModelSpec,
  json: unknown,
  file = 'generation_config.json',
): ModelSpec {
  if (!isObject(json)) throw new ModelFormatError(file, '(root)', json, 'must be a JSON object');
  const f: Fields = new Fields(json, file);
  const eosIds = [...spec.eosIds];
  for (const id of f.ids('eos_token_id')) if (!eosIds.includes(id)) eosIds.push(id);
  return { ...spec, bosId: spec.bosId ?? f.ids('bos_token_id')[0], eosIds };
}
