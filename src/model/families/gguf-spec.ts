/**
 * The {@link ModelSpec} of a GGUF file from its llama / qwen2 / qwen3 / qwen35 / gemma3 / smollm3 /
 * lfm2 / phi3 metadata, including Llama 3 RoPE scaling recovered from the stored `rope_freqs.weight` factors
 * (and those factors computed from the scaling, for the writer), linear RoPE scaling, Qwen3.5's
 * layer kinds, DeltaNet sizes and partial rotary (and the RoPE sections llama.cpp wants, for the
 * writer), Gemma 3's sliding layers and softmax scale as llama.cpp's loader fixes them, and
 * SmolLM3's layers without RoPE.
 */

import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaNumber } from '../../formats/gguf/meta.js';
import { readGgufTensorF32 } from '../../formats/gguf/tensors.js';
import {
  type Llama3RopeScaling,
  type ModelFamily,
  type ModelSpec,
  type RopeSpec,
  type YarnRopeScaling,
  yarnAttentionFactor,
} from '../spec/spec.js';
import {
  gemma3Fields,
  lfm2Fields,
  lfm2Layers,
  ministral3Fields,
  phi3Fields,
  qwen35Fields,
  smollm3Fields,
} from './gguf-families.js';

/** `general.architecture` → family: llama.cpp names Qwen3.5 (dense) `qwen35`. */
const ARCHES: Readonly<Record<string, ModelFamily>> = {
  llama: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen35: 'qwen3_5',
  gemma3: 'gemma3',
  smollm3: 'smollm3',
  lfm2: 'lfm2',
  phi3: 'phi3',
  mistral3: 'ministral3',
};

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
 * GGUFs), qwen2, qwen3, qwen35 (Qwen3.5, see {@link qwen35Fields}), gemma3 (Gemma 3's language
 * model, see {@link gemma3Fields}), smollm3 (see {@link smollm3Fields}), lfm2 (LFM2 and LFM2.5,
 * see {@link lfm2Fields}) or phi3 (Phi-3, Phi-3.5, Phi-4-mini, see {@link phi3Fields}). Keys are
 * `<arch>.embedding_length`, `.block_count`, `.feed_forward_length`, `.attention.head_count(_kv)`,
 * `.attention.key_length` (head dim), `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`,
 * `.context_length`; the vocab size comes from `token_embd.weight`; the head is tied when
 * `output.weight` is absent. RoPE scaling: linear from `.rope.scaling.factor` (see
 * {@link ggufRope}), Llama 3's recovered from `rope_freqs.weight` (hence async). RoPE layout is
 * always `'half'`: weft un-permutes llama and smollm3 Q/K rows at load (see `openGgufCheckpoint`
 * in gguf.ts).
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
      'unsupported architecture (llama, qwen2, qwen3, qwen35, gemma3, smollm3, lfm2, phi3, mistral3)',
    );
  }
  const k = (key: string) => `${arch}.${key}`;
  const hidden = metaCount(g, k('embedding_length'));
  const heads = metaCount(g, k('attention.head_count'));
  // LFM2 lists KV heads per layer (0 for a short-convolution layer).
  const kvHeads =
    family === 'lfm2' ? lfm2Layers(g, heads).kvHeads : metaCount(g, k('attention.head_count_kv'), heads);
  if (heads % kvHeads !== 0)
    throw new ModelFormatError(file, k('attention.head_count_kv'), kvHeads, 'must divide head_count');
  const headDim = metaCount(g, k('attention.key_length'), hidden / heads);
  if (headDim % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length'), headDim, 'must be even for RoPE');
  const theta = metaNumber(g, k('rope.freq_base'), 10000);
  const embd = g.tensors.get('token_embd.weight');
  if (embd === undefined) throw new ModelFormatError(file, 'token_embd.weight', undefined, 'missing tensor');
  const rope = await ggufRope(g, k, family, theta, headDim);
  const ids = (key: string) => {
    const v = meta(g, key);
    return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
  };
  const eos = [
    ids('tokenizer.ggml.eos_token_id'),
    ids('tokenizer.ggml.eot_token_id'),
    ids('tokenizer.ggml.eom_token_id'),
  ];
  const spec: ModelSpec = {
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
  if (family === 'qwen3_5') return { ...spec, ...qwen35Fields(g, spec) };
  if (family === 'gemma3') return { ...spec, ...gemma3Fields(g, spec) };
  if (family === 'smollm3') return { ...spec, ...smollm3Fields(spec) };
  if (family === 'lfm2') return { ...spec, ...lfm2Fields(g, spec) };
  if (family === 'phi3') return { ...spec, ...(await phi3Fields(g, spec)) };
  if (family === 'ministral3') return { ...spec, ...ministral3Fields(g, spec) };
  return spec;
}

/**
 * The global RoPE of a file whose `<arch>.` keys `k` names, as llama.cpp's loader reads it
 * (`llama_model::load_hparams`, src/llama-model.cpp): `rope.scaling.type` defaults to linear, and
 * `rope.scaling.factor` (or the older `rope.scale_linear`), when present and not 0, divides every
 * frequency unless the type is `none`; Llama 3 scaling comes from `rope_freqs.weight` (not for
 * qwen35, gemma3, lfm2 and phi3, whose loaders read no such tensor). A file with both is refused: the spec
 * holds one scaling.
 */
async function ggufRope(
  g: GgufFile,
  k: (key: string) => string,
  family: ModelFamily,
  theta: number,
  headDim: number,
): Promise<RopeSpec> {
  const file = g.source.name;
  const typeKey = k('rope.scaling.type');
  const type = meta(g, typeKey) ?? 'linear';
  if (type === 'yarn' && family === 'ministral3') return { theta, layout: 'half', scaling: ggufYarn(g, k) };
  if (type !== 'none' && type !== 'linear')
    throw new ModelFormatError(
      file,
      typeKey,
      type,
      `unsupported RoPE scaling (linear or none${family === 'ministral3' ? ', or yarn' : ''})`,
    );
  const factorKey = [k('rope.scaling.factor'), k('rope.scale_linear')].find(
    (key) => meta(g, key) !== undefined,
  );
  const freqs =
    family === 'qwen3_5' || family === 'gemma3' || family === 'lfm2' || family === 'phi3'
      ? undefined
      : g.tensors.get('rope_freqs.weight');
  if (type === 'linear' && factorKey !== undefined && meta(g, factorKey) !== 0) {
    const factor = metaNumber(g, factorKey);
    if (freqs !== undefined)
      throw new ModelFormatError(file, factorKey, factor, 'linear RoPE scaling beside rope_freqs.weight');
    return { theta, layout: 'half', scaling: { type: 'linear', factor } };
  }
  return freqs ? ropeFromFreqs(g, theta, headDim, await readGgufTensorF32(freqs)) : { theta, layout: 'half' };
}

/**
 * YaRN as llama.cpp's loader reads it: `rope.scaling.factor`, `rope.scaling.original_context_length`
 * (default `context_length`), `rope.scaling.yarn_beta_fast` and `_slow` (default 32 and 1), and the
 * attention factor it derives (llama_context's constructor): mscale(factor, 1) /
 * mscale(factor, yarn_log_multiplier) where the multiplier is not 0, else mscale(factor, 1); the
 * range is always truncated.
 */
function ggufYarn(g: GgufFile, k: (key: string) => string): YarnRopeScaling {
  const factor = metaNumber(g, k('rope.scaling.factor'));
  const logKey = k('rope.scaling.yarn_log_multiplier');
  const logMul = meta(g, logKey) === undefined || meta(g, logKey) === 0 ? 0 : metaNumber(g, logKey);
  return {
    type: 'yarn',
    factor,
    originalMaxPositions: metaCount(
      g,
      k('rope.scaling.original_context_length'),
      metaCount(g, k('context_length')),
    ),
    betaFast: metaNumber(g, k('rope.scaling.yarn_beta_fast'), 32),
    betaSlow: metaNumber(g, k('rope.scaling.yarn_beta_slow'), 1),
    truncate: true,
    ...(logMul === 0 ? {} : { mscale: 1, mscaleAllDim: logMul }),
    attentionFactor: llamaCppYarnFactor(factor, logMul),
  };
}

/**
 * The YaRN attention factor llama.cpp derives (llama_context's constructor, which takes mscale as
 * 1): mscale(factor, 1) / mscale(factor, logMul) for a log multiplier (`mscale_all_dim`) other than
 * 0, else mscale(factor, 1).
 */
export function llamaCppYarnFactor(factor: number, logMul: number): number {
  return logMul === 0 ? yarnAttentionFactor(factor) : yarnAttentionFactor(factor, 1, logMul);
}
