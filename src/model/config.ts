import { ModelFormatError } from '../formats/errors.js';
import type { LayerKind, Llama3RopeScaling, ModelFamily, ModelSpec } from '../formats/spec.js';

/** A parsed JSON object, as far as the readers below need to know. */
type JsonObject = { readonly [key: string]: unknown };

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Typed access to the keys of one JSON object, throwing {@link ModelFormatError} that names the file
 * and the key for anything missing or ill-typed. `prefix` makes nested keys read `rope_scaling.factor`.
 */
class Fields {
  constructor(
    readonly obj: JsonObject,
    readonly file: string,
    readonly prefix = '',
  ) {}

  private fail(key: string, problem: string): never {
    throw new ModelFormatError(this.file, this.prefix + key, this.obj[key], problem);
  }

  has(key: string): boolean {
    return this.obj[key] !== undefined && this.obj[key] !== null;
  }

  /** A finite number; `fallback` is used when the key is absent or null. */
  number(key: string, fallback?: number): number {
    const v = this.obj[key];
    if (v === undefined || v === null) {
      if (fallback !== undefined) return fallback;
      this.fail(key, 'missing (a number is required)');
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) this.fail(key, 'must be a finite number');
    return v;
  }

  /** A positive safe integer. */
  count(key: string, fallback?: number): number {
    const v = this.number(key, fallback);
    if (!Number.isSafeInteger(v) || v <= 0) this.fail(key, 'must be a positive integer');
    return v;
  }

  positive(key: string, fallback?: number): number {
    const v = this.number(key, fallback);
    if (!(v > 0)) this.fail(key, 'must be > 0');
    return v;
  }

  boolean(key: string, fallback: boolean): boolean {
    const v = this.obj[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'boolean') this.fail(key, 'must be true or false');
    return v;
  }

  string(key: string): string | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') this.fail(key, 'must be a string');
    return v;
  }

  /** A token id or a list of them (`eos_token_id` is either in Hugging Face configs). */
  ids(key: string): number[] {
    const v = this.obj[key];
    if (v === undefined || v === null) return [];
    const list = Array.isArray(v) ? v : [v];
    for (const id of list) {
      if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
        this.fail(key, 'must be a non-negative integer or a list of them');
      }
    }
    return list;
  }

  object(key: string): Fields | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (!isObject(v)) this.fail(key, 'must be an object');
    return new Fields(v, this.file, `${this.prefix}${key}.`);
  }

  refuse(key: string, problem: string): never {
    this.fail(key, problem);
  }
}

const FAMILIES: Readonly<Record<string, ModelFamily>> = {
  llama: 'llama',
  mistral: 'mistral',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
};

/** Reads `rope_scaling`: absent, `default`, or Llama 3's frequency scaling; anything else is refused. */
function readRopeScaling(f: Fields): Llama3RopeScaling | undefined {
  const rs = f.object('rope_scaling');
  if (rs === undefined) return undefined;
  // Transformers renamed `type` to `rope_type`; checkpoints carry either.
  const key = rs.has('rope_type') ? 'rope_type' : 'type';
  const kind = rs.string(key);
  if (kind === undefined || kind === 'default') return undefined;
  if (kind !== 'llama3') rs.refuse(key, 'unsupported RoPE scaling (weft supports "llama3" or none)');
  return {
    factor: rs.positive('factor'),
    lowFreqFactor: rs.positive('low_freq_factor'),
    highFreqFactor: rs.positive('high_freq_factor'),
    originalMaxPositions: rs.count('original_max_position_embeddings'),
  };
}

/**
 * Builds a {@link ModelSpec} from a Hugging Face `config.json` (already JSON-parsed) for the families
 * weft runs: `llama` (Llama 1/2/3, SmolLM2, TinyLlama), `mistral`, `qwen2` (q/k/v biases) and `qwen3`
 * (per-head QK RMSNorm, explicit `head_dim`). Defaults follow the Transformers config classes
 * (`num_key_value_heads` = heads, `head_dim` = hidden / heads, `rope_theta` 10000, untied head).
 * A sliding window (Mistral v0.1, Qwen2 with `use_sliding_window`) is honoured by capping
 * `maxPositions` at the window, where full attention and windowed attention agree. Unknown
 * families, activations other than SiLU, RoPE scalings other than `llama3`, MLP biases, partial
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
  const family = modelType === undefined ? undefined : FAMILIES[modelType];
  if (family === undefined) {
    f.refuse('model_type', 'unsupported architecture (weft runs llama, mistral, qwen2, qwen3, qwen3_5)');
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
  const shape = readAttentionShape(f);
  let maxPositions = f.count('max_position_embeddings');
  const windowed = family === 'mistral' || f.boolean('use_sliding_window', false);
  if (windowed && f.has('sliding_window')) maxPositions = Math.min(maxPositions, f.count('sliding_window'));
  const bos = f.ids('bos_token_id');
  const scaling = readRopeScaling(f);
  const theta = f.positive('rope_theta', 10000);
  return {
    family,
    ...shape,
    rope: scaling ? { theta, scaling, layout: 'half' } : { theta, layout: 'half' },
    maxPositions,
    tiedEmbeddings: f.boolean('tie_word_embeddings', false),
    qkvBias: family === 'qwen2',
    qkNorm: family === 'qwen3',
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
  };
}

function refusePrequantized(f: Fields): void {
  if (f.has('quantization_config')) {
    f.refuse(
      'quantization_config',
      'pre-quantized checkpoints (GPTQ, AWQ, bitsandbytes, ...) are not supported; use the unquantized model',
    );
  }
}

function refuseActivation(f: Fields): void {
  const act = f.string('hidden_act') ?? 'silu';
  if (act !== 'silu') f.refuse('hidden_act', 'unsupported activation (only silu)');
}

/** The sizes every family's config states the same way. */
function readAttentionShape(f: Fields) {
  const hidden = f.count('hidden_size');
  const heads = f.count('num_attention_heads');
  const kvHeads = f.count('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) f.refuse('num_key_value_heads', `must divide num_attention_heads (${heads})`);
  if (!f.has('head_dim') && hidden % heads !== 0) {
    f.refuse('hidden_size', `must be a multiple of num_attention_heads (${heads}) when head_dim is absent`);
  }
  const headDim = f.count('head_dim', hidden / heads);
  if (headDim % 2 !== 0) f.refuse('head_dim', 'must be even for RoPE');
  return {
    vocabSize: f.count('vocab_size'),
    hidden,
    intermediate: f.count('intermediate_size'),
    layers: f.count('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    rmsEps: f.positive('rms_norm_eps'),
  };
}

/**
 * Qwen3.5's language model (`Qwen3_5TextConfig`, a Qwen3-Next without experts): Gated DeltaNet
 * layers (`linear_*` sizes) beside gated full-attention layers (`layer_types`, or every
 * `full_attention_interval`-th layer), QK-norm, partial rotary (`partial_rotary_factor`, in
 * `rope_parameters` or at the top level), zero-centred norms. `f` is the text config and `outer` the
 * file's root (the wrapper's `tie_word_embeddings` applies when the text config has none). Its
 * multimodal RoPE sections reduce to plain RoPE for text, where the three position ids agree.
 */
function qwen35Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'qwen3_5 attention has no biases');
  const shape = readAttentionShape(f);
  const rp = f.object('rope_parameters') ?? f;
  const ropeType = rp.string('rope_type') ?? 'default';
  if (ropeType !== 'default') rp.refuse('rope_type', 'unsupported RoPE type for qwen3_5 (only "default")');
  const theta = rp.positive('rope_theta', 10000);
  const factor = rp.number('partial_rotary_factor', 0.25);
  const rotaryDim = Math.trunc(shape.headDim * factor);
  if (!(factor > 0 && factor <= 1) || rotaryDim % 2 !== 0 || rotaryDim < 2) {
    rp.refuse(
      'partial_rotary_factor',
      `must give an even rotary width in (0, head_dim]: head_dim ${shape.headDim}`,
    );
  }
  const linearAttention = {
    keyHeads: f.count('linear_num_key_heads', 16),
    valueHeads: f.count('linear_num_value_heads', 32),
    keyDim: f.count('linear_key_head_dim', 128),
    valueDim: f.count('linear_value_head_dim', 128),
    convKernel: f.count('linear_conv_kernel_dim', 4),
  };
  if (linearAttention.valueHeads % linearAttention.keyHeads !== 0) {
    f.refuse(
      'linear_num_value_heads',
      `must be a multiple of linear_num_key_heads (${linearAttention.keyHeads})`,
    );
  }
  for (const key of ['linear_key_head_dim', 'linear_value_head_dim'] as const) {
    if (f.count(key, 128) > 256) f.refuse(key, 'must be at most 256');
  }
  if (linearAttention.convKernel < 2) f.refuse('linear_conv_kernel_dim', 'must be at least 2');
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_word_embeddings') ? f : outer;
  return {
    family: 'qwen3_5',
    ...shape,
    rope: { theta, layout: 'half', rotaryDim },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    layerKinds: readLayerKinds(f, shape.layers),
    linearAttention,
    outputGate: true,
    zeroCentredNorms: true,
  };
}

/** `layer_types` ("linear_attention" / "full_attention"), or every `full_attention_interval`-th layer full. */
function readLayerKinds(f: Fields, layers: number): LayerKind[] {
  const types = f.obj.layer_types;
  if (types === undefined || types === null) {
    const interval = f.count('full_attention_interval', 4);
    return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'linear'));
  }
  if (!Array.isArray(types) || types.length !== layers) {
    f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
  }
  return types.map((t) => {
    if (t === 'linear_attention') return 'linear';
    if (t === 'full_attention') return 'attention';
    return f.refuse(
      'layer_types',
      `unknown layer type ${JSON.stringify(t)} (linear_attention or full_attention)`,
    );
  });
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
