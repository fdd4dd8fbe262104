/**
 * `weft export-gguf`'s core: a Hugging Face-layout checkpoint (f32 tensors by HF name) written as a
 * llama.cpp GGUF, its metadata, names and stored values as llama.cpp's converter writes them.
 */

import { InvalidInputError } from '../errors.js';
import { type GgufEntry, type GgufWriteTensor, writeGguf } from '../formats/gguf/write.js';
import { gemma3QueryScalar, imropeSections, slidingPattern } from '../model/families/gguf-families.js';
import {
  ggufNe,
  ggufTensorName,
  type StoredLayout,
  storedLayout,
  storedValues,
} from '../model/families/gguf-names.js';
import { llama3RopeFactors, llamaCppYarnFactor } from '../model/families/gguf-spec.js';
import { fuseProjections } from '../model/fused-view.js';
import { attentionScale, layerAttention, layerKind, type ModelSpec } from '../model/spec/spec.js';
import { fusedProjections } from '../model/tensors.js';
import { GgmlType, quantizeGgml } from '../quant/ggml/blocks.js';
import { fallbackType, type GgufMix, isGgufMix, mixTypes } from './gguf-mix.js';

/** What {@link exportGguf} stores each 2-D weight as; 1-D tensors (norms, biases) stay F32. */
export type GgufExportType =
  | 'F32'
  | 'F16'
  | 'BF16'
  | 'Q8_0'
  | 'Q4_0'
  | 'Q4_1'
  | 'Q5_0'
  | 'Q5_1'
  | 'Q4_K'
  | 'Q5_K'
  | 'Q6_K'
  | 'Q2_K'
  | 'Q3_K'
  | 'IQ4_NL'
  | 'IQ4_XS'
  | 'IQ3_XXS'
  | 'IQ3_S'
  | 'IQ2_XXS'
  | 'IQ2_XS'
  | 'IQ2_S';

/** Options of {@link exportGguf}. */
export interface GgufExportOptions {
  /**
   * Importance weights of a weight's input columns (by its Hugging Face name, as in `tensors`;
   * length = its columns, in Hugging Face order), from calibration: the quantisers of Q2_K, Q3_K
   * and the i-quants weigh each column's squared error by them (llama.cpp's importance matrix).
   * Undefined: unweighted. A Phi-3 projection written fused is asked for by its first part's name
   * (q_proj, gate_proj: the parts share an input); columns are permuted as the layout stores them.
   */
  readonly importance?: (hfName: string) => Float32Array | undefined;
}

/** A metadata entry's list: a key and its typed value, in the order written. */
type Entries = (readonly [string, GgufEntry])[];

const u32 = (value: number): GgufEntry => ({ type: 'u32', value });
const f32 = (value: number): GgufEntry => ({ type: 'f32', value });

/**
 * The `<arch>.*` metadata of `spec`: the keys llama.cpp's converter writes (conversion/base.py
 * `TextModel.set_gguf_parameters`; for Qwen3.5 also conversion/qwen.py `Qwen3NextModel` and
 * `_Qwen35MRopeMixin`, in the converter's order; for Gemma 3 {@link gemma3Metadata}). Throws
 * {@link InvalidInputError} for what llama.cpp's loader of the architecture cannot hold
 * ({@link refuseForLlamaCpp}).
 */
function archMetadata(spec: ModelSpec, arch: string): Entries {
  refuseForLlamaCpp(spec);
  const k = (key: string) => `${arch}.${key}`;
  if (spec.family === 'gemma3') return gemma3Metadata(spec);
  if (spec.family === 'lfm2') return lfm2Metadata(spec);
  if (spec.family === 'phi3') return phi3Metadata(spec);
  if (spec.family !== 'qwen3_5') {
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
  // Without linear layers llama.cpp still wants the ssm keys; any sizes do.
  const la = spec.linearAttention ?? { keyHeads: 1, valueHeads: 1, keyDim: 1, valueDim: 1, convKernel: 4 };
  const rotaryDim = spec.rope.rotaryDim ?? spec.headDim;
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('attention.key_length'), u32(spec.headDim)],
    [k('attention.value_length'), u32(spec.headDim)],
    [k('ssm.conv_kernel'), u32(la.convKernel)],
    [k('ssm.state_size'), u32(la.keyDim)],
    [k('ssm.group_count'), u32(la.keyHeads)],
    [k('ssm.time_step_rank'), u32(la.valueHeads)],
    [k('ssm.inner_size'), u32(la.valueDim * la.valueHeads)],
    [k('full_attention_interval'), u32(fullAttentionInterval(spec))],
    [k('rope.dimension_count'), u32(rotaryDim)],
    [k('rope.dimension_sections'), { type: 'i32[]', value: imropeSections(rotaryDim / 2) }],
  ];
}

/** `rope.scaling.type` linear and its factor (conversion/base.py), for a spec with linear RoPE scaling. */
function linearRopeScaling(spec: ModelSpec, arch: string): Entries {
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
function yarnRopeScaling(spec: ModelSpec, arch: string): Entries {
  const s = spec.rope.scaling;
  const qt = spec.queryTemperature;
  const temperature: Entries = qt ? [[`${arch}.attention.temperature_scale`, f32(qt.beta)]] : [];
  if (s?.type !== 'yarn') return temperature;
  return [
    [`${arch}.rope.scaling.type`, { type: 'string', value: 'yarn' }],
    [`${arch}.rope.scaling.factor`, f32(s.factor)],
    [`${arch}.rope.scaling.original_context_length`, u32(s.originalMaxPositions)],
    [`${arch}.rope.scaling.yarn_beta_fast`, f32(s.betaFast)],
    [`${arch}.rope.scaling.yarn_beta_slow`, f32(s.betaSlow)],
    ...(s.mscaleAllDim
      ? ([[`${arch}.rope.scaling.yarn_log_multiplier`, f32(s.mscaleAllDim)]] as Entries)
      : []),
    ...temperature,
  ];
}

/**
 * Gemma 3's metadata in the converter's order (conversion/base.py `TextModel.set_gguf_parameters`,
 * then conversion/gemma.py `Gemma3Model.set_gguf_parameters`): the global RoPE base and its linear
 * scaling, the local base as `rope.freq_base_swa`, and `attention.sliding_window` unless no layer
 * slides (the converter leaves it out for `sliding_window_pattern` 1). The sliding layers must be
 * all but every p-th ({@link slidingPeriod}); p is written as `attention.sliding_window_pattern`
 * when it is not the 6 llama.cpp's gemma3 loader assumes (it reads the key since llama.cpp
 * a976ff08, March 2026; older builds take 6 whatever the file says).
 */
function gemma3Metadata(spec: ModelSpec): Entries {
  const k = (key: string) => `gemma3.${key}`;
  const period = slidingPeriod(spec);
  const window: Entries =
    period === undefined ? [] : [[k('attention.sliding_window'), u32(spec.slidingWindow ?? 0)]];
  if (period !== undefined && period !== 6) window.push([k('attention.sliding_window_pattern'), u32(period)]);
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    ...linearRopeScaling(spec, 'gemma3'),
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('rope.freq_base_swa'), f32(spec.localRope?.theta ?? spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('attention.key_length'), u32(spec.headDim)],
    [k('attention.value_length'), u32(spec.headDim)],
    ...window,
  ];
}

/**
 * LFM2's metadata in the converter's order (conversion/base.py `TextModel.set_gguf_parameters`,
 * then conversion/lfm2.py `LFM2Model.set_gguf_parameters`, whose later `feed_forward_length` and
 * `layer_norm_rms_epsilon` replace the base's values in place): `attention.head_count_kv` one
 * count per layer, 0 for a short-convolution layer (i32, as gguf-py types Python ints), the MLP
 * width as adjusted (`_add_feed_forward_length`), `vocab_size` and `shortconv.l_cache`. No
 * key_length (LFM2 configs have no head_dim; llama.cpp takes hidden / heads).
 */
function lfm2Metadata(spec: ModelSpec): Entries {
  const k = (key: string) => `lfm2.${key}`;
  const kv = Array.from({ length: spec.layers }, (_, i) =>
    layerKind(spec, i) === 'conv' ? 0 : spec.kvHeads,
  );
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), { type: 'i32[]', value: kv }],
    ...linearRopeScaling(spec, 'lfm2'),
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('vocab_size'), u32(spec.vocabSize)],
    [k('shortconv.l_cache'), u32(spec.shortConv?.kernel ?? 3)],
  ];
}

/**
 * Phi-3's metadata in the converter's order (conversion/phi.py `Phi3MiniModel.set_gguf_parameters`,
 * then `generate_extra_tensors`'s attention factor): the context and
 * `rope.scaling.original_context_length`, past which llama.cpp takes the long LongRoPE factors
 * (the context itself where the spec has no long ones), `rope.dimension_count` the rotary width,
 * `attention.sliding_window` (0 without one; llama.cpp's phi3 loader reads it but runs full
 * attention), and with LongRoPE `rope.scaling.attn_factor`, which llama.cpp multiplies cos and
 * sin by. No key_length: llama.cpp takes hidden / heads ({@link refuseForLlamaCpp} holds to it).
 */
function phi3Metadata(spec: ModelSpec): Entries {
  const k = (key: string) => `phi3.${key}`;
  const s = spec.rope.scaling;
  return [
    [k('context_length'), u32(spec.maxPositions)],
    [
      k('rope.scaling.original_context_length'),
      u32((s?.type === 'longrope' && s.long?.originalMaxPositions) || spec.maxPositions),
    ],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('block_count'), u32(spec.layers)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    [k('attention.layer_norm_rms_epsilon'), f32(spec.rmsEps)],
    [k('rope.dimension_count'), u32(spec.rope.rotaryDim ?? spec.headDim)],
    [k('rope.freq_base'), f32(spec.rope.theta)],
    [k('attention.sliding_window'), u32(spec.slidingWindow ?? 0)],
    ...(s?.type === 'longrope' ? ([[k('rope.scaling.attn_factor'), f32(s.attentionFactor)]] as Entries) : []),
  ];
}

/**
 * The `set_swa_pattern` period p that gives a Gemma 3 spec's sliding layers (layer i slides unless
 * i mod p = p - 1; every layer for p = 0: {@link slidingPattern}), preferring llama.cpp's 6;
 * undefined when no layer slides. Throws when no period does.
 */
function slidingPeriod(spec: ModelSpec): number | undefined {
  const sliding = Array.from({ length: spec.layers }, (_, i) => layerAttention(spec, i).window !== undefined);
  if (!sliding.includes(true)) return undefined;
  const first = sliding.indexOf(false);
  for (const p of [6, first + 1]) {
    const pattern = slidingPattern(spec.layers, p);
    if (pattern.every((s, i) => s === sliding[i])) return p;
  }
  throw new InvalidInputError(
    `exportGguf: gemma3 layer_types [${sliding.map((s) => (s ? 'sliding' : 'full'))}] are not every p-th layer full, the only pattern llama.cpp's gemma3 loader takes (attention.sliding_window_pattern)`,
  );
}

/**
 * Refuses a spec that llama.cpp would run differently from weft, for want of a GGUF key:
 * Gemma 3's softmax scale (llama.cpp's is fixed, {@link gemma3QueryScalar}), a RoPE scaling on
 * its local layers (llama.cpp scales only the global ones) or Llama 3 scaling (its gemma3 loader
 * reads no `rope_freqs.weight`); SmolLM3's layers without RoPE other than every 4th, and Llama 3
 * scaling (its smollm3 loader has no `rope_freqs.weight` either, and refuses a file with one);
 * LFM2's convolution biases, a head_dim other than hidden / heads and Llama 3 scaling (its lfm2
 * loader and graph have none of them); Phi-3's head_dim other than hidden / heads and RoPE scalings
 * other than LongRoPE. (Phi-3's sliding window is written but not refused: llama.cpp's phi3 loader
 * ignores it, as it does for the files its own converter writes.)
 */
function refuseForLlamaCpp(spec: ModelSpec): void {
  const refuse = (what: string, value: unknown, why: string): never => {
    throw new InvalidInputError(`exportGguf: ${spec.family} ${what} = ${JSON.stringify(value)}: ${why}`);
  };
  const scaling = spec.rope.scaling;
  if (
    (spec.family === 'gemma3' || spec.family === 'smollm3' || spec.family === 'lfm2') &&
    scaling &&
    scaling.type !== 'linear'
  )
    refuse(
      'rope_scaling',
      scaling,
      `llama.cpp's ${spec.family} loader reads no rope_freqs.weight (only linear scaling)`,
    );
  if (spec.family === 'gemma3') {
    // llama.cpp computes its scale in f32: a spec within f32 rounding of it runs the same.
    const scalar = gemma3QueryScalar(spec);
    const scale = attentionScale(spec);
    if (Math.fround(scale) !== Math.fround(1 / Math.sqrt(scalar)))
      refuse(
        'query_pre_attn_scalar',
        Number((scale ** -2).toPrecision(6)),
        `llama.cpp's gemma3 loader scales attention by 1/√${scalar} (${spec.layers === 62 ? 'hidden / heads for 62 layers' : 'head_dim'}) and has no key for another scale`,
      );
    if (spec.localRope?.scaling)
      refuse(
        'local RoPE scaling',
        spec.localRope.scaling,
        'llama.cpp does not scale the sliding layers’ RoPE',
      );
  }
  if (spec.family === 'lfm2') {
    // src/models/lfm2.cpp: no convolution biases in the graph; q and out_proj are [H, H].
    if (spec.shortConv?.bias)
      refuse(
        'conv_bias',
        true,
        'llama.cpp’s lfm2 graph has no biases in in_proj, the convolution or out_proj',
      );
    if (spec.heads * spec.headDim !== spec.hidden)
      refuse(
        'head_dim',
        spec.headDim,
        `llama.cpp’s lfm2 loader wants num_attention_heads × head_dim = hidden_size (${spec.hidden})`,
      );
  }
  if (spec.family === 'phi3') {
    // src/models/phi3.cpp: attn_qkv is [hidden + 2 · kv], attn_output [hidden, hidden].
    if (spec.heads * spec.headDim !== spec.hidden)
      refuse(
        'head_dim',
        spec.headDim,
        `llama.cpp’s phi3 loader wants num_attention_heads × head_dim = hidden_size (${spec.hidden})`,
      );
    if (scaling && scaling.type !== 'longrope')
      refuse('rope_scaling', scaling, 'llama.cpp’s phi3 graph takes LongRoPE factors only');
  }
  if (spec.family === 'ministral3') refuseMinistral3(spec, refuse);
  if (spec.family === 'smollm3') {
    const noRope = spec.noRopeLayers ?? [];
    if (noRope.some((none, i) => none !== ((i + 1) % 4 === 0)))
      refuse(
        'no_rope_layers',
        noRope.map((none) => (none ? 0 : 1)),
        'llama.cpp’s smollm3 loader leaves out RoPE in every 4th layer exactly (n_no_rope_layer_step = 4, no GGUF key)',
      );
  }
}

/**
 * What llama.cpp's mistral3 loader and graph (src/models/mistral3.cpp) cannot state: a sliding
 * window (its graph attends to the whole context), RoPE scalings other than YaRN, linear or none,
 * a YaRN attention factor other than the one it derives (mscale taken as 1: mscale(s, 1) /
 * mscale(s, mscale_all_dim), or mscale(s, 1) without a log multiplier), truncation turned off, and
 * a query temperature whose floor scale is not YaRN's original context.
 */
function refuseMinistral3(
  spec: ModelSpec,
  refuse: (what: string, value: unknown, why: string) => never,
): void {
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
}

/**
 * The `full_attention_interval` n that gives Qwen3.5's layer kinds (layer i full attention exactly
 * when (i + 1) mod n = 0, as llama.cpp's loader derives them); throws when no n does.
 */
function fullAttentionInterval(spec: ModelSpec): number {
  const kinds = spec.layerKinds ?? [];
  const first = kinds.indexOf('attention');
  const n = first < 0 ? spec.layers + 1 : first + 1;
  kinds.forEach((kind, i) => {
    if (kind !== ((i + 1) % n === 0 ? 'attention' : 'linear')) {
      throw new InvalidInputError(
        `exportGguf: qwen35 GGUFs give every full_attention_interval-th layer full attention; layer kinds [${kinds}] are not such a pattern`,
      );
    }
  });
  return n;
}

/**
 * Whether llama.cpp's converter keeps a tensor it writes as `name` in F32 whatever the file's type
 * (conversion/base.py `prepare_tensors`): vectors, `*_norm.weight`, names not ending `.weight`
 * (Qwen3.5's `ssm_a`, `ssm_dt.bias`), `ssm_conv1d.weight` and LFM2's `shortconv.conv.weight`
 * (SSM_CONV1D and SHORTCONV_CONV are kept F32). The others take the file's type, or a fallback
 * (`fallbackType`) where its block does not divide their rows.
 */
function keptF32(name: string, ne: readonly number[]): boolean {
  return (
    ne.length < 2 ||
    name.endsWith('_norm.weight') ||
    !name.endsWith('.weight') ||
    name.endsWith('.ssm_conv1d.weight') ||
    name.endsWith('.shortconv.conv.weight')
  );
}

/**
 * Writes a Hugging Face-layout checkpoint (tensors by HF name, f32 values) as a llama.cpp GGUF:
 * `<arch>.*` metadata from `spec` ({@link archMetadata}), GGUF tensor names, dims reversed to `ne`
 * (Qwen3.5's conv1d squeezed), values stored as llama.cpp's converter stores them (`storedLayout`:
 * llama and smollm3 Q/K rows permuted for interleaved RoPE; Qwen3.5's and Gemma 3's norms as 1 + w;
 * Qwen3.5's `A_log` as -exp(A_log), value heads tiled), Llama 3 RoPE scaling as `rope_freqs.weight`
 * (linear scaling as metadata), Phi-3's q | k | v and gate | up fused (`attn_qkv`, `ffn_up`) and its
 * LongRoPE factors as `rope_factors_short.weight` and `rope_factors_long.weight` (the short ones
 * under both names where the spec has no long ones), matrices encoded as `type` (or `type(hfName)`, for files that mix
 * types as llama.cpp's do; or a {@link GgufMix}, llama-quantize's per-tensor recipe, see `mixTypes`),
 * falling back where a row is no whole block (`fallbackType`), and everything else F32
 * ({@link keptF32}). `extra` adds metadata
 * (e.g. the tokenizer's, from `tokenizerGgufMetadata`). Qwen3.5's MTP layer is not written (a file
 * as `convert_hf_to_gguf.py --no-mtp` writes). Throws {@link InvalidInputError} for a spec that
 * llama.cpp's loader would run differently (see `refuseForLlamaCpp`).
 */
export function exportGguf(
  spec: ModelSpec,
  tensors: readonly {
    readonly name: string;
    readonly shape: readonly number[];
    readonly data: Float32Array;
  }[],
  type: GgufExportType | GgufMix | ((hfName: string) => GgufExportType),
  extra: readonly (readonly [string, GgufEntry])[] = [],
  options: GgufExportOptions = {},
): Uint8Array<ArrayBuffer> {
  // Mistral GGUFs use the llama architecture and naming; llama.cpp names Qwen3.5 qwen35 and
  // Ministral 3 mistral3.
  const arch =
    spec.family === 'mistral'
      ? 'llama'
      : spec.family === 'qwen3_5'
        ? 'qwen35'
        : spec.family === 'ministral3'
          ? 'mistral3'
          : spec.family;
  const metadata: (readonly [string, GgufEntry])[] = [
    ['general.architecture', { type: 'string', value: arch }],
    ...archMetadata(spec, arch),
    ...extra,
  ];
  const out: GgufWriteTensor[] = [];
  const scaling = spec.rope.scaling;
  if (scaling?.type === 'longrope') {
    // llama.cpp takes the long factors when its context passes the original one (a spec without
    // long factors stops there: the short ones go under both names).
    const lists = [
      ['rope_factors_long.weight', scaling.long?.factors ?? scaling.factors],
      ['rope_factors_short.weight', scaling.factors],
    ] as const;
    for (const [name, factors] of lists)
      out.push({
        name,
        ne: [factors.length],
        type: GgmlType.F32,
        data: quantizeGgml(0, Float32Array.from(factors)),
      });
  } else if (scaling && scaling.type !== 'linear' && scaling.type !== 'yarn') {
    const factors = llama3RopeFactors(spec.rope.theta, spec.headDim, scaling);
    out.push({
      name: 'rope_freqs.weight',
      ne: [factors.length],
      type: GgmlType.F32,
      data: quantizeGgml(0, factors),
    });
  }
  const written = fuseProjections(spec, tensors).flatMap((t) => {
    const name = ggufTensorName(t.name, spec.family);
    return name === undefined ? [] : [{ t, name, ne: ggufNe(t.name, t.shape) }];
  });
  const weights = written.filter((w) => !keptF32(w.name, w.ne));
  // Each weight's type: the mix's recipe, or the type asked for (falling back where it must).
  const types =
    typeof type === 'function' || !isGgufMix(type)
      ? new Map(
          weights.map((w) => [
            w.name,
            fallbackType(GgmlType[typeof type === 'function' ? type(w.t.name) : type], w.ne[0]!),
          ]),
        )
      : mixTypes(type, weights, spec.layers);
  // A fused projection (Phi-3's) takes its first part's importance: its parts read one input.
  const firstPart = new Map(
    Array.from({ length: spec.layers }, (_, l) => fusedProjections(spec, l))
      .flat()
      .map((fp) => [fp.name, fp.parts[0]!.name]),
  );
  for (const { t, name, ne } of written) {
    const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
    const layout = storedLayout(spec, t.name, t.shape);
    const data = storedValues(layout, t.data, cols);
    const ggmlType = types.get(name) ?? GgmlType.F32;
    const importance =
      ggmlType === GgmlType.F32
        ? undefined
        : storedImportance(options.importance?.(firstPart.get(t.name) ?? t.name), layout, t.name, cols);
    out.push({ name, ne, type: ggmlType, data: quantizeGgml(ggmlType, data, importance) });
  }
  return writeGguf(metadata, out);
}

/**
 * A weight's column importance (Hugging Face column order) in the order `layout` stores its columns
 * (Qwen3.5's out_proj tiles its value heads); throws {@link InvalidInputError} unless it has one
 * value per column.
 */
function storedImportance(
  importance: Float32Array | undefined,
  layout: StoredLayout,
  hfName: string,
  cols: number,
): Float32Array | undefined {
  if (importance === undefined) return undefined;
  if (importance.length !== cols)
    throw new InvalidInputError(
      `exportGguf: importance of ${hfName} has ${importance.length} values for its ${cols} columns`,
    );
  const hfCol = layout.hfCol;
  return hfCol ? Float32Array.from({ length: cols }, (_, c) => importance[hfCol(c)]!) : importance;
}
