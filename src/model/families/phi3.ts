// Phi-3, Phi-3.5 and Phi-4-mini (`Phi3Config`, `Phi3ForCausalLM`): a Llama whose checkpoints fuse
// q | k | v (`self_attn.qkv_proj`) and gate | up (`mlp.gate_up_proj`), which the loader reads as
// their parts (`splitFusedView`), with partial rotary and LongRoPE. llama.cpp's `phi3` architecture
// keeps them fused (`attn_qkv`, `ffn_up`) and stores the LongRoPE factors as tensors.
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero } from '../../formats/gguf/meta.js';
import { attentionBlock } from '../blocks/attention/block.js';
import { mlpBlock } from '../blocks/mlp/block.js';
import { type Fields, readAttentionShape, refuseActivation } from '../spec/fields.js';
import { deriveSizes, type LongRopeScaling, layerKind, type ModelSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks } from './decoder.js';
import type { Family, FusedProjection, GgufEntries, NamePairs } from './family.js';
import { f32, GLOBAL_NAMES, ggufBaseSpec, refuseExport, tensorReads, u32 } from './gguf-base.js';

/**
 * Phi-3, Phi-3.5 and Phi-4-mini (`Phi3Config`, `Phi3ForCausalLM`): a Llama block whose checkpoints
 * fuse q | k | v (`self_attn.qkv_proj` [q + 2 · kv, H]) and gate | up (`mlp.gate_up_proj`
 * [2I, H]), which the loader splits into the usual names (`splitFusedView`), with partial rotary
 * (`partial_rotary_factor`, at the top level or in `rope_parameters`: Phi-4-mini's 0.75) and
 * LongRoPE (`rope_scaling` or Transformers 5's `rope_parameters` of type `longrope`, or `su` /
 * `yarn`, which Phi3Config renames `longrope`), read by {@link phi3LongRope}: `short_factor` runs
 * within `original_max_position_embeddings` (Phi3Config's default 4096), where Transformers runs it
 * too, and `long_factor` for an engine whose context passes it, up to `max_position_embeddings`
 * (`ropeForContext` in model/spec/spec.ts, as llama.cpp chooses between the two).
 * `sliding_window` (Transformers' window mask on every layer) becomes `slidingWindow` where it is
 * shorter than that context (a longer one changes nothing). Phi3Config's defaults: 4096 positions,
 * `rope_theta` 10000, an untied head. `resid_pdrop`, `embd_pdrop` and `attention_dropout` are
 * training-only and ignored; attention biases, MLP biases, activations other than SiLU and other
 * RoPE types are refused.
 */
function phi3Spec(f: Fields): ModelSpec {
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', 'phi3 attention has no biases');
  if (f.boolean('mlp_bias', false)) f.refuse('mlp_bias', 'MLP biases are not supported');
  const shape = readAttentionShape(f);
  // Transformers 5 keeps rope_theta, the type and its lists in rope_parameters; older configs in
  // rope_theta and rope_scaling (null without LongRoPE).
  const rp = f.object('rope_parameters');
  const rs = rp ?? f.object('rope_scaling');
  const theta = (rp ?? f).positive('rope_theta', 10000);
  const factorAt = rp?.has('partial_rotary_factor') ? rp : f;
  const factor = factorAt.number('partial_rotary_factor', 1);
  const rotaryDim = Math.trunc(shape.headDim * factor);
  if (!(factor > 0 && factor <= 1) || rotaryDim % 2 !== 0 || rotaryDim < 2)
    factorAt.refuse(
      'partial_rotary_factor',
      `must give an even rotary width in (0, head_dim]: head_dim ${shape.headDim}`,
    );
  const trained = f.count('max_position_embeddings', 4096);
  const original = f.count('original_max_position_embeddings', 4096);
  const scaling = rs && phi3LongRope(rs, rotaryDim, trained, original);
  const maxPositions = trained;
  const window = f.has('sliding_window') ? f.count('sliding_window') : undefined;
  const bos = f.ids('bos_token_id');
  return {
    family: 'phi3',
    ...shape,
    rope: {
      theta,
      layout: 'half',
      ...(scaling ? { scaling } : {}),
      ...(rotaryDim < shape.headDim ? { rotaryDim } : {}),
    },
    maxPositions,
    tiedEmbeddings: f.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: false,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    ...(window !== undefined && window < maxPositions ? { slidingWindow: window } : {}),
  };
}

/**
 * A Phi-3 config's RoPE scaling as weft runs it (see phi3Spec): none for `default`, else LongRoPE
 * (`longrope`, or the older `su` and `yarn` that Phi3Config renames) from `short_factor` and
 * `long_factor` (each rotaryDim / 2 positive numbers, as Phi3Config validates them; the long list
 * takes over past `original`),
 * with the attention factor of `_compute_longrope_parameters`: `attention_factor` when given, else
 * √(1 + ln(s) / ln(original)) for s = `factor` when given, else `trained` / `original` (1 when
 * s ≤ 1). Factors and attention factor are rounded to f32, as PyTorch holds them.
 */
function phi3LongRope(
  rs: Fields,
  rotaryDim: number,
  trained: number,
  original: number,
): LongRopeScaling | undefined {
  const key = rs.has('rope_type') ? 'rope_type' : 'type';
  const kind = rs.string(key) ?? 'default';
  if (kind === 'default') return undefined;
  if (kind !== 'longrope' && kind !== 'su' && kind !== 'yarn')
    rs.refuse(key, 'unsupported RoPE type for phi3 (longrope, or default; su and yarn read as longrope)');
  const pairs = rotaryDim / 2;
  const list = (name: string): number[] => {
    const v = rs.obj[name];
    if (!Array.isArray(v) || v.length !== pairs || !v.every((x) => typeof x === 'number' && x > 0))
      rs.refuse(
        name,
        `must list ${pairs} positive numbers, one per rotary pair (rotary width ${rotaryDim} = head_dim × partial_rotary_factor)`,
      );
    return v.map((x: number) => Math.fround(x));
  };
  const factors = list('short_factor');
  const longFactors = list('long_factor');
  // The long list runs only for a context past the original one, which the model must allow.
  const long = original < trained ? { factors: longFactors, originalMaxPositions: original } : undefined;
  let attentionFactor = rs.has('attention_factor') ? rs.positive('attention_factor') : undefined;
  if (attentionFactor === undefined) {
    const s = rs.has('factor') ? rs.positive('factor') : trained / original;
    attentionFactor = s <= 1 ? 1 : Math.sqrt(1 + Math.log(s) / Math.log(original));
  }
  return {
    type: 'longrope',
    factors,
    ...(long ? { long } : {}),
    attentionFactor: Math.fround(attentionFactor),
  };
}

/**
 * Phi-3's own fields from its `phi3.*` metadata and tensors, as llama.cpp's converter writes them
 * (`Phi3MiniModel`, conversion/phi.py) and its loader reads them (src/models/phi3.cpp,
 * `llama_model::get_rope_factors`): `rope.dimension_count` rotated dimensions (partial rotary);
 * LongRoPE from `rope_factors_short.weight` and `rope_factors_long.weight` (one factor per rotary
 * pair) with `rope.scaling.attn_factor` (1 when absent, as llama.cpp takes it) and
 * `rope.scaling.original_context_length`, past which the long factors run (`ropeForContext`, as
 * llama.cpp chooses); without long factors `maxPositions` stops at the original context.
 * `attention.sliding_window`
 * (0: none) is kept as Transformers applies it, where shorter than the context: llama.cpp's phi3
 * loader currently ignores it (runs full attention), so its outputs differ past the window.
 * Refused: long factors without short ones, an attention factor without factors, and linear
 * scaling beside LongRoPE.
 */
async function phi3Fields(g: GgufFile, base: ModelSpec): Promise<Partial<ModelSpec>> {
  const file = g.bytes.name;
  const k = (key: string) => `phi3.${key}`;
  const rotaryDim = metaCount(g, k('rope.dimension_count'), base.headDim);
  if (rotaryDim % 2 !== 0 || rotaryDim > base.headDim)
    throw new ModelFormatError(
      file,
      k('rope.dimension_count'),
      rotaryDim,
      `must be even and at most the head width (${base.headDim})`,
    );
  const window = metaCountOrZero(g, k('attention.sliding_window'));
  const short = g.tensors.get('rope_factors_short.weight');
  const attnKey = k('rope.scaling.attn_factor');
  const attn = meta(g, attnKey);
  const rope = { ...base.rope, ...(rotaryDim < base.headDim ? { rotaryDim } : {}) };
  if (short === undefined) {
    if (g.tensors.has('rope_factors_long.weight'))
      throw new ModelFormatError(
        file,
        'rope_factors_long.weight',
        g.tensors.get('rope_factors_long.weight')!.ne,
        'long RoPE factors without rope_factors_short.weight (the factors weft runs)',
      );
    if (attn !== undefined && attn !== 1)
      throw new ModelFormatError(
        file,
        attnKey,
        attn,
        'an attention factor without rope_factors_short.weight',
      );
    const maxPositions = base.maxPositions;
    return {
      rope,
      qkvBias: false,
      ...(window > 0 && window < maxPositions ? { slidingWindow: window } : {}),
    };
  }
  const pairs = rotaryDim / 2;
  if (base.rope.scaling !== undefined)
    throw new ModelFormatError(
      file,
      k('rope.scaling.factor'),
      base.rope.scaling,
      'linear RoPE scaling beside LongRoPE factors',
    );
  const readFactors = async (name: string): Promise<number[]> => {
    const info = g.tensors.get(name)!;
    if (info.ne.length !== 1 || info.ne[0] !== pairs)
      throw new ModelFormatError(
        file,
        name,
        info.ne,
        `must hold ${pairs} factors, one per rotary pair (rope.dimension_count ${rotaryDim})`,
      );
    const factors = [...(await (await tensorReads()).readGgufTensorF32(info))];
    if (!factors.every((f) => f > 0 && Number.isFinite(f)))
      throw new ModelFormatError(file, name, factors.slice(0, 8), 'factors must be finite and > 0');
    return factors;
  };
  const factors = await readFactors('rope_factors_short.weight');
  const longFactors = g.tensors.has('rope_factors_long.weight')
    ? await readFactors('rope_factors_long.weight')
    : undefined;
  if (attn !== undefined && (typeof attn !== 'number' || !(attn > 0) || !Number.isFinite(attn)))
    throw new ModelFormatError(file, attnKey, attn, 'must be a finite number > 0');
  const attentionFactor = Math.fround(typeof attn === 'number' ? attn : 1);
  const original = metaCount(g, k('rope.scaling.original_context_length'), base.maxPositions);
  const long =
    longFactors && original < base.maxPositions
      ? { factors: longFactors, originalMaxPositions: original }
      : undefined;
  const maxPositions = long ? base.maxPositions : Math.min(base.maxPositions, original);
  return {
    rope: { ...rope, scaling: { type: 'longrope', factors, ...(long ? { long } : {}), attentionFactor } },
    maxPositions,
    qkvBias: false,
    ...(window > 0 && window < maxPositions ? { slidingWindow: window } : {}),
  };
}

/**
 * Phi-3's (`phi3`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.PHI3]`, tensor_mapping.py: `self_attn.qkv_proj` is ATTN_QKV,
 * `mlp.gate_up_proj` is FFN_UP) and its loader (src/models/phi3.cpp): q | k | v stay fused as
 * `attn_qkv` [q + 2 · kv] (or apart as `attn_q`, `attn_k`, `attn_v`, which `create_tensor_qkv` takes
 * too), gate | up as `ffn_up` [2I] (gate rows first: `ggml_swiglu` applies SiLU to the first half),
 * the MLP's norm as `ffn_norm`. The loader splits the fused ones (`splitFusedView`).
 */
const LAYER_NAMES: NamePairs = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_qkv.weight', 'self_attn.qkv_proj.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_up.weight', 'mlp.gate_up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];

/**
 * Phi-3's metadata in the converter's order (conversion/phi.py `Phi3MiniModel.set_gguf_parameters`,
 * then `generate_extra_tensors`'s attention factor): the context and
 * `rope.scaling.original_context_length`, past which llama.cpp takes the long LongRoPE factors
 * (the context itself where the spec has no long ones), `rope.dimension_count` the rotary width,
 * `attention.sliding_window` (0 without one; llama.cpp's phi3 loader reads it but runs full
 * attention), and with LongRoPE `rope.scaling.attn_factor`, which llama.cpp multiplies cos and
 * sin by. No key_length: llama.cpp takes hidden / heads ({@link refuseForLlamaCpp} holds to it).
 */
function metadata(spec: ModelSpec): GgufEntries {
  refuseForLlamaCpp(spec);
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
    ...(s?.type === 'longrope'
      ? ([[k('rope.scaling.attn_factor'), f32(s.attentionFactor)]] as GgufEntries)
      : []),
  ];
}

/**
 * Layer `layer`'s fused projections as the checkpoints store them (`Phi3Attention`, `Phi3MLP`):
 * `self_attn.qkv_proj` [qWidth + 2 · kvWidth, H] (the query rows, then the keys', then the
 * values') and `mlp.gate_up_proj` [2I, H] (the gate rows, then the up rows: `chunk(2)`). Every other
 * family stores its linears apart: none. `splitFusedView` serves the parts under their plain names.
 */
function fused(spec: ModelSpec, layer: number): FusedProjection[] {
  if (layerKind(spec, layer) !== 'attention') return [];
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const p = `model.layers.${layer}`;
  const a = attentionBlock(layer, p).names;
  const m = mlpBlock(layer, 'silu', p).names;
  return [
    {
      name: `${p}.self_attn.qkv_proj.weight`,
      shape: [qWidth + 2 * kvWidth, H],
      parts: [
        { name: a.q, row0: 0, rows: qWidth },
        { name: a.k, row0: qWidth, rows: kvWidth },
        { name: a.v, row0: qWidth + kvWidth, rows: kvWidth },
      ],
    },
    {
      name: `${p}.mlp.gate_up_proj.weight`,
      shape: [2 * I, H],
      parts: [
        { name: m.gate, row0: 0, rows: I },
        { name: m.up, row0: I, rows: I },
      ],
    },
  ];
}

/**
 * What llama.cpp's phi3 loader and graph (src/models/phi3.cpp: attn_qkv is [hidden + 2 · kv],
 * attn_output [hidden, hidden]) cannot hold: a head_dim other than hidden / heads, and RoPE
 * scalings other than LongRoPE. (The sliding window is written but not refused: llama.cpp's phi3
 * loader ignores it, as it does for the files its own converter writes.)
 */
function refuseForLlamaCpp(spec: ModelSpec): void {
  const scaling = spec.rope.scaling;
  if (spec.heads * spec.headDim !== spec.hidden)
    refuseExport(
      spec,
      'head_dim',
      spec.headDim,
      `llama.cpp’s phi3 loader wants num_attention_heads × head_dim = hidden_size (${spec.hidden})`,
    );
  if (scaling && scaling.type !== 'longrope')
    refuseExport(spec, 'rope_scaling', scaling, 'llama.cpp’s phi3 graph takes LongRoPE factors only');
}

export const phi3: Family = {
  configTypes: { phi3: (f) => phi3Spec(f) },
  config: (spec) => ({
    ...baseConfig(spec, 'Phi3ForCausalLM', 'phi3'),
    ...(spec.rope.rotaryDim === undefined
      ? {}
      : { partial_rotary_factor: spec.rope.rotaryDim / spec.headDim }),
  }),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused,
  gguf: {
    arch: 'phi3',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, { family: 'phi3', arch: 'phi3', ropeFreqs: false });
      return { ...base, ...(await phi3Fields(g, base)) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: LAYER_NAMES },
    squeezed: [],
    // conversion/phi.py, `Phi3MiniModel`: every value as it is, the fused rows in the checkpoint's order.
    storedForm: () => ({}),
  },
};
