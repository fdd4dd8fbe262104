// What the families' GGUF sides share: the base spec every llama.cpp architecture states the same
// way (sizes, RoPE, special ids), the RoPE scalings llama.cpp stores (linear, Llama 3's factors in
// `rope_freqs.weight`, YaRN), the `<arch>.*` keys llama.cpp's converter writes for a Llama-shaped
// model, and the tensor names most architectures share. A family's file takes these with its own
// options.
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaNumber } from '../../formats/gguf/meta.js';
import type { GgufEntry } from '../../formats/gguf/write.js';
import type { YarnRopeScaling } from '../../kernels/rope/rope.js';
import {
  type Llama3RopeScaling,
  type ModelSpec,
  type MoeSpec,
  type RopeSpec,
  yarnAttentionFactor,
} from '../spec/spec.js';
import type { GgufEntries, NamePairs } from './family.js';

export const u32 = (value: number): GgufEntry => ({ type: 'u32', value });
export const f32 = (value: number): GgufEntry => ({ type: 'f32', value });

/** How an architecture's base spec is read (see {@link ggufBaseSpec}). */
export interface GgufBaseOptions {
  readonly family: ModelSpec['family'];
  /** The file's architecture: its keys are `<arch>.*`. */
  readonly arch: string;
  /** KV heads where the architecture states them its own way (LFM2: per layer); default `attention.head_count_kv`. */
  readonly kvHeads?: (heads: number) => number;
  /** Llama 3 scaling is read from `rope_freqs.weight` (llama.cpp's loader of the architecture reads it). */
  readonly ropeFreqs: boolean;
  /** YaRN may be `rope.scaling.type` (llama.cpp's mistral3 loader reads it). */
  readonly yarn?: boolean;
  /** RMSNorm on each head of q and k. */
  readonly qkNorm?: boolean;
  /**
   * The MLP width where the architecture may leave `feed_forward_length` out (a mixture on every
   * layer: qwen35moe); default `feed_forward_length`.
   */
  readonly intermediate?: (g: GgufFile) => number;
}

/**
 * The base {@link ModelSpec} of a GGUF file: `<arch>.embedding_length`, `.block_count`,
 * `.feed_forward_length`, `.attention.head_count(_kv)`, `.attention.key_length` (head dim),
 * `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`, `.context_length`; the vocab size from
 * `token_embd.weight`; the head tied when `output.weight` is absent; q/k/v biases when
 * `blk.0.attn_q.bias` is present; BOS and up to three stop ids (EOS, end of turn, end of message).
 * RoPE: {@link ggufRope} (hence async). The layout is always `'half'`: weft un-permutes Q/K rows
 * stored for interleaved RoPE at load (see a family's `storedForm`).
 */
export async function ggufBaseSpec(g: GgufFile, o: GgufBaseOptions): Promise<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `${o.arch}.${key}`;
  const hidden = metaCount(g, k('embedding_length'));
  const heads = metaCount(g, k('attention.head_count'));
  const kvHeads = o.kvHeads ? o.kvHeads(heads) : metaCount(g, k('attention.head_count_kv'), heads);
  if (heads % kvHeads !== 0)
    throw new ModelFormatError(file, k('attention.head_count_kv'), kvHeads, 'must divide head_count');
  const headDim = metaCount(g, k('attention.key_length'), hidden / heads);
  if (headDim % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length'), headDim, 'must be even for RoPE');
  const theta = metaNumber(g, k('rope.freq_base'), 10000);
  const embd = g.tensors.get('token_embd.weight');
  if (embd === undefined) throw new ModelFormatError(file, 'token_embd.weight', undefined, 'missing tensor');
  const rope = await ggufRope(g, o, theta, headDim);
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
    family: o.family,
    vocabSize: embd.ne[1] ?? 0,
    hidden,
    intermediate: o.intermediate ? o.intermediate(g) : metaCount(g, k('feed_forward_length')),
    layers: metaCount(g, k('block_count')),
    heads,
    kvHeads,
    headDim,
    rmsEps: metaNumber(g, k('attention.layer_norm_rms_epsilon')),
    rope,
    maxPositions: metaCount(g, k('context_length')),
    tiedEmbeddings: !g.tensors.has('output.weight'),
    qkvBias: g.tensors.has('blk.0.attn_q.bias'),
    qkNorm: o.qkNorm ?? false,
    bosId: ids('tokenizer.ggml.bos_token_id'),
    eosIds: [...new Set(eos.filter((x): x is number => x !== undefined))],
  };
}

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
      g.bytes.name,
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
      g.bytes.name,
      'rope_freqs.weight',
      [...freqs].slice(0, 8),
      'RoPE factors are not Llama 3 scaling with (low 1, high 4, original 8192)',
    );
  }
  return { theta, layout: 'half', scaling };
}

/**
 * The global RoPE of a file, as llama.cpp's loader reads it (`llama_model::load_hparams`,
 * src/llama-model.cpp): `rope.scaling.type` defaults to linear, and `rope.scaling.factor` (or the
 * older `rope.scale_linear`), when present and not 0, divides every frequency unless the type is
 * `none`; Llama 3 scaling comes from `rope_freqs.weight` where the architecture's loader reads it
 * (`o.ropeFreqs`); YaRN where it may be stated (`o.yarn`). A file with both linear scaling and
 * factors is refused: the spec holds one scaling.
 */
async function ggufRope(g: GgufFile, o: GgufBaseOptions, theta: number, headDim: number): Promise<RopeSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `${o.arch}.${key}`;
  const typeKey = k('rope.scaling.type');
  const type = meta(g, typeKey) ?? 'linear';
  if (type === 'yarn' && o.yarn) return { theta, layout: 'half', scaling: ggufYarn(g, k) };
  if (type !== 'none' && type !== 'linear')
    throw new ModelFormatError(
      file,
      typeKey,
      type,
      `unsupported RoPE scaling (linear or none${o.yarn ? ', or yarn' : ''})`,
    );
  const factorKey = [k('rope.scaling.factor'), k('rope.scale_linear')].find(
    (key) => meta(g, key) !== undefined,
  );
  const freqs = o.ropeFreqs ? g.tensors.get('rope_freqs.weight') : undefined;
  if (type === 'linear' && factorKey !== undefined && meta(g, factorKey) !== 0) {
    const factor = metaNumber(g, factorKey);
    if (freqs !== undefined)
      throw new ModelFormatError(file, factorKey, factor, 'linear RoPE scaling beside rope_freqs.weight');
    return { theta, layout: 'half', scaling: { type: 'linear', factor } };
  }
  if (!freqs) return { theta, layout: 'half' };
  return ropeFromFreqs(g, theta, headDim, await (await tensorReads()).readGgufTensorF32(freqs));
}

/**
 * GGUF's tensor reads, loaded when a file's spec needs a tensor (RoPE factors): they bring the GGML
 * block codecs, which a page that never opens a GGUF file does not load (the engine worker's
 * chunk stays without them; model/gguf.ts, loaded with a GGUF file, holds them).
 */
export function tensorReads(): Promise<typeof import('../../formats/gguf/tensors.js')> {
  return import('../../formats/gguf/tensors.js');
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

/**
 * The `<arch>.*` keys llama.cpp's converter writes for a Llama-shaped model (conversion/base.py
 * `TextModel.set_gguf_parameters`), with linear or YaRN RoPE scaling and a query temperature.
 */
export function decoderMetadata(spec: ModelSpec, arch: string): GgufEntries {
  const k = (key: string) => `${arch}.${key}`;
  return [
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('block_count'), u32(spec.layers)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    [k('attention.key_length'), u32(spec.headDim)],
    [k('attention.value_length'), u32(spec.headDim)],
    [k('rope.dimension_count'), u32(spec.headDim)],
    ...linearRopeScaling(spec, arch),
    ...yarnRopeScaling(spec, arch),
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
  ];
}

/** `rope.scaling.type` linear and its factor (conversion/base.py), for a spec with linear RoPE scaling. */
export function linearRopeScaling(spec: ModelSpec, arch: string): GgufEntries {
  const s = spec.rope.scaling;
  if (s?.type !== 'linear') return [];
  return [
    [`${arch}.rope.scaling.type`, { type: 'string', value: 'linear' }],
    [`${arch}.rope.scaling.factor`, f32(s.factor)],
  ];
}

/**
 * YaRN as llama.cpp's converter writes it (conversion/base.py, then conversion/mistral3.py for
 * Ministral 3): `rope.scaling.type` yarn, its factor, the original context, the two betas, and
 * `mscale_all_dim` as `rope.scaling.yarn_log_multiplier` (llama.cpp takes mscale as 1 and
 * derives the attention factor from these, as Transformers does); Llama 4's query temperature as
 * `attention.temperature_scale`.
 */
function yarnRopeScaling(spec: ModelSpec, arch: string): GgufEntries {
  const s = spec.rope.scaling;
  const qt = spec.queryTemperature;
  const temperature: GgufEntries = qt ? [[`${arch}.attention.temperature_scale`, f32(qt.beta)]] : [];
  if (s?.type !== 'yarn') return temperature;
  return [
    [`${arch}.rope.scaling.type`, { type: 'string', value: 'yarn' }],
    [`${arch}.rope.scaling.factor`, f32(s.factor)],
    [`${arch}.rope.scaling.original_context_length`, u32(s.originalMaxPositions)],
    [`${arch}.rope.scaling.yarn_beta_fast`, f32(s.betaFast)],
    [`${arch}.rope.scaling.yarn_beta_slow`, f32(s.betaSlow)],
    ...(s.mscaleAllDim
      ? ([[`${arch}.rope.scaling.yarn_log_multiplier`, f32(s.mscaleAllDim)]] as GgufEntries)
      : []),
    ...temperature,
  ];
}

/** A refusal of the GGUF exporter: `what` of a `family` spec is `value`, which llama.cpp cannot hold (`why`). */
export function refuseExport(spec: ModelSpec, what: string, value: unknown, why: string): never {
  throw new InvalidInputError(`exportGguf: ${spec.family} ${what} = ${JSON.stringify(value)}: ${why}`);
}

/** Refuses a RoPE scaling other than linear: an architecture whose loader reads no `rope_freqs.weight`. */
export function refuseRopeFreqs(spec: ModelSpec, arch: string): void {
  const scaling = spec.rope.scaling;
  if (scaling && scaling.type !== 'linear')
    refuseExport(
      spec,
      'rope_scaling',
      scaling,
      `llama.cpp's ${arch} loader reads no rope_freqs.weight (only linear scaling)`,
    );
}

/** Per-layer renames most architectures share: [GGUF suffix, Hugging Face suffix]. */
export const SHARED_LAYER_NAMES: NamePairs = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_q_norm.weight', 'self_attn.q_norm.weight'],
  ['attn_k_norm.weight', 'self_attn.k_norm.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_gate.weight', 'mlp.gate_proj.weight'],
  ['ffn_up.weight', 'mlp.up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];

/** The Llama naming's per-layer renames (Llama's and the architectures that keep its names). */
export const DECODER_LAYER_NAMES: NamePairs = [
  ...SHARED_LAYER_NAMES,
  ['attn_q.bias', 'self_attn.q_proj.bias'],
  ['attn_k.bias', 'self_attn.k_proj.bias'],
  ['attn_v.bias', 'self_attn.v_proj.bias'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
];

/** The whole-tensor renames most architectures share. */
export const GLOBAL_NAMES: NamePairs = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['output_norm.weight', 'model.norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

/**
 * A mixture's per-layer renames under the MLP's prefix `under` (`mlp`, LFM2's `feed_forward`), from
 * llama.cpp's gguf-py (constants.py, tensor_mapping.py): the router FFN_GATE_INP `ffn_gate_inp`,
 * the selection bias FFN_EXP_PROBS_B `exp_probs_b.bias`, the experts' stacks [E, R, C]
 * FFN_{GATE,UP,DOWN}_EXP `ffn_{gate,up,down}_exps` (under weft's stack names `experts.gate_proj`,
 * `experts.up_proj`, `experts.down_proj`, which the family's `fused` splits per expert), the shared
 * expert FFN_*_SHEXP and its gate FFN_GATE_INP_SHEXP.
 */
export function moeLayerNames(under: string): NamePairs {
  return [
    ['ffn_gate_inp.weight', `${under}.gate.weight`],
    ['exp_probs_b.bias', `${under}.expert_bias`],
    ['ffn_gate_exps.weight', `${under}.experts.gate_proj`],
    ['ffn_up_exps.weight', `${under}.experts.up_proj`],
    ['ffn_down_exps.weight', `${under}.experts.down_proj`],
    ['ffn_gate_shexp.weight', `${under}.shared_expert.gate_proj.weight`],
    ['ffn_up_shexp.weight', `${under}.shared_expert.up_proj.weight`],
    ['ffn_down_shexp.weight', `${under}.shared_expert.down_proj.weight`],
    ['ffn_gate_inp_shexp.weight', `${under}.shared_expert_gate.weight`],
  ];
}

/**
 * A mixture's `<arch>.expert_*` keys as llama.cpp's converters write them (conversion/base.py
 * `expert_count` and `expert_used_count`, then each family's `expert_feed_forward_length` and a
 * shared expert's `expert_shared_feed_forward_length`). A spec without a mixture has none.
 */
export function moeMetadata(spec: ModelSpec, arch: string): GgufEntries {
  const m = spec.moe;
  if (!m) return [];
  return [
    [`${arch}.expert_count`, u32(m.experts)],
    [`${arch}.expert_used_count`, u32(m.topK)],
    [`${arch}.expert_feed_forward_length`, u32(m.intermediate)],
    ...(m.sharedIntermediate === undefined
      ? []
      : ([[`${arch}.expert_shared_feed_forward_length`, u32(m.sharedIntermediate)]] as GgufEntries)),
  ];
}

/**
 * llama.cpp's `expert_gating_func` values (llama-hparams.h `llama_expert_gating_func_type`):
 * softmax 1, sigmoid 2.
 */
export const GATING_FUNC = { softmax: 1, sigmoid: 2 } as const;

/**
 * A GGUF's mixture as llama.cpp's loader reads it (`expert_count`, `expert_used_count`,
 * `expert_feed_forward_length`, else `feed_forward_length / expert_used_count` as the qwen3moe and
 * qwen35moe loaders take it; `expert_shared_feed_forward_length` where `shared` asks for a shared
 * expert, else `feed_forward_length`), with the routing the architecture's graph runs (`routing`)
 * and the layers that are mixtures. `expert_gating_func`, where present, must be the graph's.
 */
export function ggufMoe(
  g: GgufFile,
  arch: string,
  routing: Pick<MoeSpec, 'scoring' | 'renormalize' | 'renormEps' | 'selectionBias' | 'routedScale'>,
  layers: readonly boolean[],
  shared = false,
): MoeSpec {
  const file = g.bytes.name;
  const k = (key: string) => `${arch}.${key}`;
  const experts = metaCount(g, k('expert_count'));
  const topK = metaCount(g, k('expert_used_count'));
  if (topK > experts)
    throw new ModelFormatError(
      file,
      k('expert_used_count'),
      topK,
      `must be at most expert_count (${experts})`,
    );
  const gating = meta(g, k('expert_gating_func'));
  if (gating !== undefined && gating !== GATING_FUNC[routing.scoring])
    throw new ModelFormatError(
      file,
      k('expert_gating_func'),
      gating,
      `llama.cpp's ${arch} graph routes by ${routing.scoring} (${GATING_FUNC[routing.scoring]})`,
    );
  const ff = () => metaCount(g, k('feed_forward_length'));
  const intermediate =
    meta(g, k('expert_feed_forward_length')) === undefined
      ? Math.trunc(ff() / topK)
      : metaCount(g, k('expert_feed_forward_length'));
  const sharedKey = k('expert_shared_feed_forward_length');
  const sharedIntermediate = shared
    ? meta(g, sharedKey) === undefined
      ? ff()
      : metaCount(g, sharedKey)
    : undefined;
  return {
    experts,
    topK,
    intermediate,
    ...routing,
    ...(sharedIntermediate === undefined ? {} : { sharedIntermediate }),
    layers: [...layers],
  };
}
