// Typed reading of a config.json: the Fields accessor that names the file, key and value in every
// error, and the readers every family shares (RoPE scaling, the attention shape, the refusals).
import { ModelFormatError } from '../../formats/errors.js';
import type { LinearRopeScaling, Llama3RopeScaling } from './spec.js';

/** A parsed JSON object, as far as the readers below need to know. */
export type JsonObject = { readonly [key: string]: unknown };

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Typed access to the keys of one JSON object, throwing {@link ModelFormatError} that names the file
 * and the key for anything missing or ill-typed. `prefix` makes nested keys read `rope_scaling.factor`.
 */
export class Fields {
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

/**
 * Reads `rope_scaling` (or the object `key` names): absent, `default`, linear, or Llama 3's
 * frequency scaling; anything else is refused.
 */
export function readRopeScaling(
  f: Fields,
  key = 'rope_scaling',
): Llama3RopeScaling | LinearRopeScaling | undefined {
  const rs = f.object(key);
  if (rs === undefined) return undefined;
  return ropeScalingOf(rs);
}

/** The scaling an object with `rope_type` (or `type`) states. */
export function ropeScalingOf(rs: Fields): Llama3RopeScaling | LinearRopeScaling | undefined {
  // Transformers renamed `type` to `rope_type`; checkpoints carry either.
  const key = rs.has('rope_type') ? 'rope_type' : 'type';
  const kind = rs.string(key);
  if (kind === undefined || kind === 'default') return undefined;
  if (kind === 'linear') return { type: 'linear', factor: rs.positive('factor') };
  if (kind !== 'llama3')
    rs.refuse(key, 'unsupported RoPE scaling (weft supports "llama3", "linear" or none)');
  return {
    factor: rs.positive('factor'),
    lowFreqFactor: rs.positive('low_freq_factor'),
    highFreqFactor: rs.positive('high_freq_factor'),
    originalMaxPositions: rs.count('original_max_position_embeddings'),
  };
}

export function refusePrequantized(f: Fields): void {
  if (f.has('quantization_config')) {
    f.refuse(
      'quantization_config',
      'pre-quantized checkpoints (GPTQ, AWQ, bitsandbytes, ...) are not supported; use the unquantized model',
    );
  }
}

export function refuseActivation(f: Fields): void {
  const act = f.string('hidden_act') ?? 'silu';
  if (act !== 'silu') f.refuse('hidden_act', 'unsupported activation (only silu)');
}

/**
 * The sizes every family's config states the same way; `defaults` are a family's own where its
 * config class differs from Llama's (which takes `head_dim` = hidden / heads, KV heads = heads).
 */
export function readAttentionShape(
  f: Fields,
  defaults: { headDim?: number; kvHeads?: number; intermediate?: number } = {},
) {
  const hidden = f.count('hidden_size');
  const heads = f.count('num_attention_heads');
  const kvHeads = f.count('num_key_value_heads', defaults.kvHeads ?? heads);
  if (heads % kvHeads !== 0) f.refuse('num_key_value_heads', `must divide num_attention_heads (${heads})`);
  if (!f.has('head_dim') && defaults.headDim === undefined && hidden % heads !== 0) {
    f.refuse('hidden_size', `must be a multiple of num_attention_heads (${heads}) when head_dim is absent`);
  }
  const headDim = f.count('head_dim', defaults.headDim ?? hidden / heads);
  if (headDim % 2 !== 0) f.refuse('head_dim', 'must be even for RoPE');
  return {
    vocabSize: f.count('vocab_size'),
    hidden,
    intermediate: f.count('intermediate_size', defaults.intermediate),
    layers: f.count('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    rmsEps: f.positive('rms_norm_eps'),
  };
}
