/**
 * The {@link ModelSpec} of a GGUF file from its llama / qwen2 / qwen3 metadata, including Llama 3
 * RoPE scaling recovered from the stored `rope_freqs.weight` factors (and those factors computed
 * from the scaling, for the writer).
 */

import { ModelFormatError } from './errors.js';
import type { GgufFile, GgufValue } from './gguf-header.js';
import { readGgufTensorF32 } from './gguf-tensors.js';
import type { Llama3RopeScaling, ModelFamily, ModelSpec, RopeSpec } from './spec.js';

function meta(g: GgufFile, key: string): GgufValue | undefined {
  return g.metadata.get(key);
}

function metaCount(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ModelFormatError(
      g.source.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a positive integer',
    );
  }
  return v;
}

/**
 * The shortest decimal that rounds to the same f32 as `v`: GGUF stores `rms_norm_eps` and
 * `rope.freq_base` as f32, and the spec should read 1e-6, not 9.99999997e-7.
 */
function shortestF32(v: number): number {
  for (let p = 1; p < 9; p++) {
    const d = Number(v.toPrecision(p));
    if (Math.fround(d) === Math.fround(v)) return d;
  }
  return v;
}

function metaNumber(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) {
    throw new ModelFormatError(
      g.source.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a finite number > 0',
    );
  }
  return shortestF32(v);
}

const ARCHES: Readonly<Record<string, ModelFamily>> = { llama: 'llama', qwen2: 'qwen2', qwen3: 'qwen3' };

/**
 * The per-frequency RoPE divisors of Llama 3 scaling, as llama.cpp's converter stores them in
 * `rope_freqs.weight` (`[head_dim / 2]`): 1 for short wavelengths, `factor` for long ones, and a
 * smooth blend between `original / high` and `original / low`.
 */
export function llama3RopeFactors(theta: number, headDim: number, s: Llama3RopeScaling): Float32Array {
  const out = new Float32Array(headDim / 2);
  const lowWavelen = s.originalMaxPositions / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositions / s.highFreqFactor;
  for (let i = 0; i < out.length; i++) {
    const wavelen = (2 * Math.PI) / theta ** -((2 * i) / headDim);
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = s.factor;
    else {
      const smooth =
        (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}

/**
 * Recovers Llama 3 RoPE scaling from the `rope_freqs.weight` factors llama.cpp stores instead of
 * the config's parameters: assumes the published (low 1, high 4, original 8192) with factor = the
 * largest stored factor, and accepts it only if it reproduces every factor within 1e-3.
 */
function ropeFromFreqs(g: GgufFile, theta: number, headDim: number, freqs: Float32Array): RopeSpec {
  if (freqs.length !== headDim / 2) {
    throw new ModelFormatError(
      g.source.name,
      'rope_freqs.weight',
      freqs.length,
      `expected ${headDim / 2} factors`,
    );
  }
  const factor = freqs.reduce((a, b) => Math.max(a, b), 0);
  const scaling = { factor, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 };
  const expected = llama3RopeFactors(theta, headDim, scaling);
  if (!(factor > 0) || expected.some((e, i) => !(Math.abs(e - freqs[i]!) <= 1e-3 * e))) {
    throw new ModelFormatError(
      g.source.name,
      'rope_freqs.weight',
      [...freqs].slice(0, 8),
      'RoPE factors are not Llama 3 scaling with (low 1, high 4, original 8192)',
    );
  }
  return { theta, layout: 'half', scaling };
}

/**
 * Builds a {@link ModelSpec} from GGUF metadata for `general.architecture` llama (also Mistral
 * GGUFs), qwen2 or qwen3. Keys are `<arch>.embedding_length`, `.block_count`,
 * `.feed_forward_length`, `.attention.head_count(_kv)`, `.attention.key_length` (head dim),
 * `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`, `.context_length`; the vocab size comes
 * from `token_embd.weight`; the head is tied when `output.weight` is absent. Llama 3 RoPE scaling
 * is recovered from `rope_freqs.weight` (hence async). RoPE layout is always `'half'`: weft
 * un-permutes llama Q/K rows at load (see `openGgufCheckpoint` in gguf.ts).
 */
export async function ggufSpec(g: GgufFile): Promise<ModelSpec> {
  const file = g.source.name;
  const arch = meta(g, 'general.architecture');
  const family = typeof arch === 'string' ? ARCHES[arch] : undefined;
  if (family === undefined) {
    throw new ModelFormatError(
      file,
      'general.architecture',
      arch,
      'unsupported architecture (llama, qwen2, qwen3)',
    );
  }
  const k = (key: string) => `${arch}.${key}`;
  const hidden = metaCount(g, k('embedding_length'));
  const heads = metaCount(g, k('attention.head_count'));
  const kvHeads = metaCount(g, k('attention.head_count_kv'), heads);
  if (heads % kvHeads !== 0)
    throw new ModelFormatError(file, k('attention.head_count_kv'), kvHeads, 'must divide head_count');
  const headDim = metaCount(g, k('attention.key_length'), hidden / heads);
  if (headDim % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length'), headDim, 'must be even for RoPE');
  const theta = metaNumber(g, k('rope.freq_base'), 10000);
  const scalingType = meta(g, k('rope.scaling.type'));
  if (scalingType !== undefined && scalingType !== 'none') {
    throw new ModelFormatError(file, k('rope.scaling.type'), scalingType, 'unsupported RoPE scaling');
  }
  const embd = g.tensors.get('token_embd.weight');
  if (embd === undefined) throw new ModelFormatError(file, 'token_embd.weight', undefined, 'missing tensor');
  const freqs = g.tensors.get('rope_freqs.weight');
  const rope: RopeSpec = freqs
    ? ropeFromFreqs(g, theta, headDim, await readGgufTensorF32(freqs))
    : { theta, layout: 'half' };
  const ids = (key: string) => {
    const v = meta(g, key);
    return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
  };
  const eos = [
    ids('tokenizer.ggml.eos_token_id'),
    ids('tokenizer.ggml.eot_token_id'),
    ids('tokenizer.ggml.eom_token_id'),
  ];
  return {
    family,
    vocabSize: embd.ne[1] ?? 0,
    hidden,
    intermediate: metaCount(g, k('feed_forward_length')),
    layers: metaCount(g, k('block_count')),
    heads,
    kvHeads,
    headDim,
    rmsEps: metaNumber(g, k('attention.layer_norm_rms_epsilon')),
    rope,
    maxPositions: metaCount(g, k('context_length')),
    tiedEmbeddings: !g.tensors.has('output.weight'),
    qkvBias: g.tensors.has('blk.0.attn_q.bias'),
    qkNorm: family === 'qwen3',
    bosId: ids('tokenizer.ggml.bos_token_id'),
    eosIds: [...new Set(eos.filter((x): x is number => x !== undefined))],
  };
}
