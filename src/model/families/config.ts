import { ModelFormatError } from '../../formats/errors.js';
import {
  Fields,
  isObject,
  readAttentionShape,
  readRopeScaling,
  refuseActivation,
  refusePrequantized,
  ropeScalingOf,
} from '../spec/fields.js';
import type { ModelFamily, ModelSpec } from '../spec/spec.js';
import { gemma3Spec, lfm2Spec, ministral3Spec, phi3Spec, qwen35Spec } from './config-families.js';

const FAMILIES: Readonly<Record<string, ModelFamily>> = {
  llama: 'llama',
  mistral: 'mistral',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  smollm3: 'smollm3',
};

/**
 * Builds a {@link ModelSpec} from a Hugging Face `config.json` (already JSON-parsed) for the families
 * weft runs: `llama` (Llama 1/2/3, SmolLM2, TinyLlama), `mistral` (its sliding window on every
 * layer), `qwen2` (q/k/v biases), `qwen3` (per-head QK RMSNorm, explicit `head_dim`), `smollm3`
 * (layers without RoPE), `qwen3_5` (see qwen35Spec), `gemma3` (see gemma3Spec), `lfm2` (see
 * lfm2Spec), `phi3` (Phi-3, Phi-3.5, Phi-4-mini: see phi3Spec) and `ministral3` (Ministral 3,
 * alone or in its `mistral3` wrapper: see ministral3Spec). Defaults follow
 * the Transformers config classes (`num_key_value_heads` = heads, `head_dim` = hidden / heads,
 * `rope_theta` 10000, untied head). Qwen2's `use_sliding_window` is honoured by capping
 * `maxPositions` at the window, where full attention and windowed attention agree. Unknown
 * families, activations other than SiLU, RoPE scalings other than `llama3` and `linear`, MLP biases, partial
 * RoPE, pre-quantized checkpoints (`quantization_config`) and missing or ill-typed fields throw
 * {@link ModelFormatError} naming `file`, the key and the value.
 */
export function specFromConfig(json: unknown, file = 'config.json'): ModelSpec {
  if (!isObject(json)) throw new ModelFormatError(file, '(root)', json, 'must be a JSON object');
  const f: Fields = new Fields(json, file);
  refusePrequantized(f);
  const modelType = f.string('model_type');
  if (modelType === 'qwen3_5') {
    // The published checkpoints wrap the language model in a vision-language config.
    const text = f.object('text_config');
    if (text === undefined)
      f.refuse('text_config', 'missing (a qwen3_5 config holds its language model there)');
    return qwen35Spec(text, f);
  }
  if (modelType === 'qwen3_5_text') return qwen35Spec(f, f);
  if (modelType === 'gemma3') {
    // The multimodal Gemma 3 (4B and up) wraps its language model as Qwen3.5 does.
    const text = f.object('text_config');
    if (text === undefined)
      f.refuse('text_config', 'missing (a gemma3 config holds its language model there)');
    return gemma3Spec(text, f);
  }
  if (modelType === 'gemma3_text') return gemma3Spec(f, f);
  if (modelType === 'mistral3') {
    // Mistral's vision-language wrapper (Ministral 3 as published).
    const text = f.object('text_config');
    if (text === undefined)
      f.refuse('text_config', 'missing (a mistral3 config holds its language model there)');
    if (text.string('model_type') !== 'ministral3')
      text.refuse('model_type', 'unsupported language model in a mistral3 wrapper (weft runs ministral3)');
    return ministral3Spec(text, f);
  }
  if (modelType === 'ministral3') return ministral3Spec(f, f);
  if (modelType === 'lfm2') return lfm2Spec(f);
  if (modelType === 'phi3') return phi3Spec(f);
  const family = modelType === undefined ? undefined : FAMILIES[modelType];
  if (family === undefined) {
    f.refuse(
      'model_type',
      'unsupported architecture (weft runs llama, mistral, ministral3, qwen2, qwen3, qwen3_5, gemma3, smollm3, lfm2, phi3)',
    );
  }
  refuseActivation(f);
  // Llama's `attention_bias` adds biases to q, k, v and o; weft's block has q/k/v biases only.
  if (family !== 'qwen2' && f.boolean('attention_bias', false)) {
    f.refuse('attention_bias', 'attention biases are only supported for qwen2');
  }
  // Each of these changes which tensors the checkpoint holds or what they mean; running it as a
  // plain block would give wrong outputs rather than an error.
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  if (f.number('partial_rotary_factor', 1) !== 1) {
    f.refuse('partial_rotary_factor', 'partial RoPE is not supported (only 1: every head dimension)');
  }
  // SmolLM3Config defaults to 4 KV heads.
  const shape = readAttentionShape(f, family === 'smollm3' ? { kvHeads: 4 } : {});
  let maxPositions = f.count('max_position_embeddings');
  // Mistral's window applies to every layer, as Gemma 3's sliding layers'. Qwen2's only past
  // `max_window_layers`: capped at the window there, where full and windowed attention agree.
  const window = family === 'mistral' && f.has('sliding_window') ? f.count('sliding_window') : undefined;
  if (family !== 'mistral' && f.boolean('use_sliding_window', false) && f.has('sliding_window'))
    maxPositions = Math.min(maxPositions, f.count('sliding_window'));
  const bos = f.ids('bos_token_id');
  // Transformers 5 writes `rope_parameters` ({ rope_theta, rope_type, ... }) in place of the two keys.
  const rp = f.object('rope_parameters');
  const scaling = rp ? ropeScalingOf(rp) : readRopeScaling(f);
  const theta = (rp ?? f).positive('rope_theta', family === 'smollm3' ? 2_000_000 : 10000);
  return {
    family,
    ...shape,
    rope: scaling ? { theta, scaling, layout: 'half' } : { theta, layout: 'half' },
    maxPositions,
    tiedEmbeddings: f.boolean('tie_word_embeddings', family === 'smollm3'),
    qkvBias: family === 'qwen2',
    qkNorm: family === 'qwen3',
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    ...(family === 'smollm3' ? { noRopeLayers: readNoRopeLayers(f, shape.layers) } : {}),
    ...(window === undefined ? {} : { slidingWindow: window }),
  };
}

/**
 * SmolLM3's `no_rope_layers`: per layer 1 where it uses RoPE, 0 where it has none; absent, every
 * `no_rope_layer_interval`-th layer (4) has none, as SmolLM3Config fills it.
 */
function readNoRopeLayers(f: Fields, layers: number): boolean[] {
  const list = f.obj.no_rope_layers;
  if (list === undefined || list === null) {
    const interval = f.count('no_rope_layer_interval', 4);
    return Array.from({ length: layers }, (_, i) => (i + 1) % interval === 0);
  }
  // Transformers reads entry i for layer i: a longer list is allowed.
  if (!Array.isArray(list) || list.length < layers || list.some((v) => v !== 0 && v !== 1))
    f.refuse('no_rope_layers', `must list 0 or 1 for each of the ${layers} layers`);
  return list.slice(0, layers).map((v) => v === 0);
}

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
