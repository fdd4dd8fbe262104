// Ministral 3 (`ministral3`, the language model inside Mistral's `mistral3` vision-language
// wrapper as published, or `Ministral3ForCausalLM` alone): a Llama with an explicit `head_dim`,
// YaRN RoPE and Llama 4's query temperature. llama.cpp's `mistral3` architecture, whose converter
// (a LlamaModel) permutes Q and K for interleaved RoPE.
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaNumber } from '../../formats/gguf/meta.js';
import type { YarnRopeScaling } from '../../kernels/rope/rope.js';
import {
  type Fields,
  readAttentionShape,
  refuseActivation,
  refusePrequantized,
  ropeScalingOf,
} from '../spec/fields.js';
import { type ModelSpec, yarnAttentionFactor } from '../spec/spec.js';
import { baseConfig, decoderBlocks, wrapped } from './decoder.js';
import type { Family, GgufEntries } from './family.js';
import {
  DECODER_LAYER_NAMES,
  decoderMetadata,
  GLOBAL_NAMES,
  ggufBaseSpec,
  llamaCppYarnFactor,
  refuseExport,
} from './gguf-base.js';
import { interleavedQk } from './stored.js';

/**
 * Ministral 3 (`ministral3`, the language model inside Mistral's `mistral3` wrapper, or
 * `Ministral3ForCausalLM` alone): a Llama with an explicit `head_dim`, YaRN RoPE and Llama 4's
 * query temperature, both read from Transformers 5's `rope_parameters` (or the older `rope_scaling`
 * with `rope_theta` and a top-level `llama_4_scaling_beta`). The temperature's floor scale is
 * YaRN's `original_max_position_embeddings`, as Transformers and llama.cpp take it. A
 * `sliding_window` applies to every layer, as Mistral's. `outer` is the file's root (the
 * wrapper's `tie_word_embeddings` applies when the text config has none).
 */
function ministral3Spec(f: Fields, outer: Fields): ModelSpec {
  refusePrequantized(f);
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'ministral3 attention has no biases');
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  const shape = readAttentionShape(f);
  const rp = f.object('rope_parameters') ?? f.object('rope_scaling');
  const theta = (rp?.has('rope_theta') ? rp : f).positive('rope_theta', 1_000_000);
  const kind = rp?.string(rp.has('rope_type') ? 'rope_type' : 'type');
  let scaling: ModelSpec['rope']['scaling'];
  if (rp && kind === 'yarn') scaling = yarnOf(rp, f.count('max_position_embeddings'));
  else if (rp) scaling = ropeScalingOf(rp);
  const betaAt = rp?.has('llama_4_scaling_beta') ? rp : f;
  const beta = betaAt.number('llama_4_scaling_beta', 0);
  let queryTemperature: ModelSpec['queryTemperature'];
  if (beta !== 0) {
    const floorScale = rp?.has('original_max_position_embeddings')
      ? rp.count('original_max_position_embeddings')
      : betaAt.refuse(
          'llama_4_scaling_beta',
          'needs rope_parameters.original_max_position_embeddings (its floor scale)',
        );
    queryTemperature = { beta, floorScale };
  }
  const tied = f.has('tie_word_embeddings') ? f : outer;
  const window = f.has('sliding_window') ? f.count('sliding_window') : undefined;
  return {
    family: 'ministral3',
    ...shape,
    rope: scaling ? { theta, scaling, layout: 'half' } : { theta, layout: 'half' },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: false,
    bosId: (f.has('bos_token_id') ? f : outer).ids('bos_token_id')[0],
    eosIds: (f.has('eos_token_id') ? f : outer).ids('eos_token_id'),
    ...(queryTemperature ? { queryTemperature } : {}),
    ...(window === undefined ? {} : { slidingWindow: window }),
  };
}

/**
 * YaRN's fields (`_compute_yarn_parameters`): `factor`; `original_max_position_embeddings`
 * (default the model's `max_position_embeddings`); `beta_fast` 32 and `beta_slow` 1 by default;
 * `truncate` true by default; the attention factor from `attention_factor`, or `mscale` and
 * `mscale_all_dim` (see yarnAttentionFactor).
 */
function yarnOf(rs: Fields, maxPositions: number): YarnRopeScaling {
  const factor = rs.positive('factor');
  const mscale = rs.has('mscale') ? rs.number('mscale') : undefined;
  const mscaleAllDim = rs.has('mscale_all_dim') ? rs.number('mscale_all_dim') : undefined;
  const explicit = rs.has('attention_factor') ? rs.positive('attention_factor') : undefined;
  return {
    type: 'yarn',
    factor,
    originalMaxPositions: rs.count('original_max_position_embeddings', maxPositions),
    betaFast: rs.positive('beta_fast', 32),
    betaSlow: rs.positive('beta_slow', 1),
    truncate: rs.boolean('truncate', true),
    ...(mscale === undefined ? {} : { mscale }),
    ...(mscaleAllDim === undefined ? {} : { mscaleAllDim }),
    attentionFactor: yarnAttentionFactor(factor, mscale, mscaleAllDim, explicit),
  };
}

/**
 * Ministral 3's query temperature (`mistral3.attention.temperature_scale`, 0 or absent: none), its
 * floor scale YaRN's original context as llama.cpp's mistral3 loader takes it (`n_ctx_orig_yarn`);
 * a file with a temperature and no YaRN is refused, as llama.cpp refuses it.
 */
function ministral3Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const key = 'mistral3.attention.temperature_scale';
  if (meta(g, key) === undefined || meta(g, key) === 0) return {};
  const beta = metaNumber(g, key);
  const s = base.rope.scaling;
  if (s?.type !== 'yarn')
    throw new ModelFormatError(g.bytes.name, key, beta, 'a query temperature needs YaRN RoPE scaling');
  return { queryTemperature: { beta, floorScale: s.originalMaxPositions } };
}

/**
 * The `mistral3.*` metadata, refusing what llama.cpp's mistral3 loader and graph (src/models/mistral3.cpp) cannot state: a sliding
 * window (its graph attends to the whole context), RoPE scalings other than YaRN, linear or none,
 * a YaRN attention factor other than the one it derives (mscale taken as 1: mscale(s, 1) /
 * mscale(s, mscale_all_dim), or mscale(s, 1) without a log multiplier), truncation turned off, and
 * a query temperature whose floor scale is not YaRN's original context.
 */
function metadata(spec: ModelSpec): GgufEntries {
  const refuse = (what: string, value: unknown, why: string) => refuseExport(spec, what, value, why);
  const s = spec.rope.scaling;
  if (spec.slidingWindow !== undefined)
    refuse('sliding_window', spec.slidingWindow, 'llama.cpp’s mistral3 graph has no sliding window');
  if (s && s.type !== 'yarn' && s.type !== 'linear')
    refuse('rope_scaling', s, 'llama.cpp’s mistral3 loader takes YaRN or linear scaling here');
  if (s?.type === 'yarn') {
    if (!s.truncate) refuse('rope_parameters.truncate', false, 'llama.cpp always truncates the YaRN range');
    const derived = llamaCppYarnFactor(s.factor, s.mscaleAllDim ?? 0);
    if (Math.fround(derived) !== Math.fround(s.attentionFactor))
      refuse(
        'rope_parameters.attention_factor',
        s.attentionFactor,
        `llama.cpp derives ${derived} from the factor and mscale_all_dim (it takes mscale as 1)`,
      );
  }
  const qt = spec.queryTemperature;
  if (qt && (s?.type !== 'yarn' || qt.floorScale !== s.originalMaxPositions))
    refuse(
      'llama_4_scaling_beta',
      qt,
      'llama.cpp scales queries by floors of YaRN’s original context only (no key of its own)',
    );
  return decoderMetadata(spec, 'mistral3');
}

export const ministral3: Family = {
  configTypes: {
    ministral3: ministral3Spec,
    mistral3: wrapped('mistral3', ministral3Spec, ['ministral3']),
  },
  config: (spec) => baseConfig(spec, 'Ministral3ForCausalLM', 'ministral3'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'mistral3',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, {
        family: 'ministral3',
        arch: 'mistral3',
        ropeFreqs: true,
        yarn: true,
      });
      return { ...base, ...ministral3Fields(g, base) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: DECODER_LAYER_NAMES },
    squeezed: [],
    storedForm: interleavedQk,
  },
};
