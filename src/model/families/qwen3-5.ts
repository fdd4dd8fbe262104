// Qwen3.5 (dense; `Qwen3_5TextConfig`, in the published `qwen3_5` vision-language wrapper): a
// Qwen3-Next without experts. Gated DeltaNet layers beside gated full-attention layers (q_proj
// yields each head's query and an output gate), QK-norm, partial rotary and zero-centred norms.
// llama.cpp's `qwen35` architecture stores the norms as 1 + w, `A_log` as -exp(A_log), the value
// heads tiled, and multimodal RoPE sections that reduce to plain RoPE for text.
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero } from '../../formats/gguf/meta.js';
import { type Fields, readAttentionShape, refuseActivation, refusePrequantized } from '../spec/fields.js';
import type { DeltaNetSpec, LayerKind, ModelSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, wrapped } from './decoder.js';
import type { Family, GgufEntries, NamePairs, StoredForm } from './family.js';
import { f32, GLOBAL_NAMES, ggufBaseSpec, SHARED_LAYER_NAMES, u32 } from './gguf-base.js';
import { PLUS_ONE } from './stored.js';

/**
 * Qwen3.5's language model (`Qwen3_5TextConfig`, a Qwen3-Next without experts): Gated DeltaNet
 * layers (`linear_*` sizes) beside gated full-attention layers (`layer_types`, or every
 * `full_attention_interval`-th layer), QK-norm, partial rotary (`partial_rotary_factor`, in
 * `rope_parameters` or at the top level), zero-centred norms. `f` is the text config and `outer` the
 * file's root (the wrapper's `tie_word_embeddings` applies when the text config has none). Its
 * multimodal RoPE sections reduce to plain RoPE for text, where the three position ids agree.
 */
export function qwen35Spec(f: Fields, outer: Fields, family = 'qwen3_5', intermediate?: number): ModelSpec {
  refusePrequantized(f);
  refuseActivation(f);
  if (f.boolean('attention_bias', false)) f.refuse('attention_bias', `${family} attention has no biases`);
  const shape = readAttentionShape(f, intermediate === undefined ? {} : { intermediate });
  const rp = f.object('rope_parameters') ?? f;
  const ropeType = rp.string('rope_type') ?? 'default';
  if (ropeType !== 'default') rp.refuse('rope_type', `unsupported RoPE type for ${family} (only "default")`);
  const theta = rp.positive('rope_theta', 10000);
  const factor = rp.number('partial_rotary_factor', 0.25);
  const rotaryDim = Math.trunc(shape.headDim * factor);
  if (!(factor > 0 && factor <= 1) || rotaryDim % 2 !== 0 || rotaryDim < 2) {
    rp.refuse(
      'partial_rotary_factor',
      `must give an even rotary width in (0, head_dim]: head_dim ${shape.headDim}`,
    );
  }
  const deltaNet = {
    keyHeads: f.count('linear_num_key_heads', 16),
    valueHeads: f.count('linear_num_value_heads', 32),
    keyDim: f.count('linear_key_head_dim', 128),
    valueDim: f.count('linear_value_head_dim', 128),
    convKernel: f.count('linear_conv_kernel_dim', 4),
  };
  if (deltaNet.valueHeads % deltaNet.keyHeads !== 0) {
    f.refuse('linear_num_value_heads', `must be a multiple of linear_num_key_heads (${deltaNet.keyHeads})`);
  }
  for (const key of ['linear_key_head_dim', 'linear_value_head_dim'] as const) {
    if (f.count(key, 128) > 256) f.refuse(key, 'must be at most 256');
  }
  if (deltaNet.convKernel < 2) f.refuse('linear_conv_kernel_dim', 'must be at least 2');
  const bos = f.ids('bos_token_id');
  const tied = f.has('tie_word_embeddings') ? f : outer;
  return {
    family,
    ...shape,
    rope: { theta, layout: 'half', rotaryDim },
    maxPositions: f.count('max_position_embeddings'),
    tiedEmbeddings: tied.boolean('tie_word_embeddings', false),
    qkvBias: false,
    qkNorm: true,
    bosId: bos[0],
    eosIds: f.ids('eos_token_id'),
    layerKinds: readLayerKinds(f, shape.layers),
    deltaNet,
    outputGate: true,
    zeroCentredNorms: true,
  };
}

/** `layer_types` ("linear_attention" / "full_attention"), or every `full_attention_interval`-th layer full. */
function readLayerKinds(f: Fields, layers: number): LayerKind[] {
  const types = f.obj.layer_types;
  if (types === undefined || types === null) {
    const interval = f.count('full_attention_interval', 4);
    return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'deltanet'));
  }
  if (!Array.isArray(types) || types.length !== layers) {
    f.refuse('layer_types', `must list one type per layer (num_hidden_layers = ${layers})`);
  }
  return types.map((t) => {
    if (t === 'linear_attention') return 'deltanet';
    if (t === 'full_attention') return 'attention';
    return f.refuse(
      'layer_types',
      `unknown layer type ${JSON.stringify(t)} (linear_attention or full_attention)`,
    );
  });
}

/**
 * The `rope.dimension_sections` llama.cpp wants for a rotary width of `pairs` (i, i + R/2) pairs:
 * Qwen3.5 rotates with interleaved multimodal RoPE (`ggml_rope_multi`, IMROPE: pair j takes the
 * temporal, height or width position by j mod 3, while j < 3 · that section), and for text the
 * three positions are the token's, so any sections that give every pair one of the three are plain
 * RoPE. These are the counts of each residue mod 3 below `pairs` ([11, 11, 10, 0] for Qwen3.5's 32
 * pairs, the published `mrope_section`).
 */
function imropeSections(pairs: number): number[] {
  return [0, 1, 2].map((s) => Math.max(0, Math.ceil((pairs - s) / 3))).concat(0);
}

/**
 * The rotary pair of `pairs` that IMROPE `sections` rotate by the fourth position (which llama.cpp
 * sets to 0 for text, leaving the pair unrotated), or -1 when every pair is rotated by the token's
 * position as plain RoPE does (see {@link imropeSections}).
 */
function unrotatedPair(sections: readonly number[], pairs: number): number {
  const total = sections.reduce((a, b) => a + b, 0);
  for (let j = 0; j < pairs; j++) {
    const sector = j % total;
    if (sector >= 3 * sections[sector % 3]!) return j;
  }
  return -1;
}

/**
 * Qwen3.5's own fields from its `qwen35.*` metadata, as llama.cpp's loader reads them
 * (`llama_model_qwen35::load_arch_hparams`, src/models/qwen35.cpp) and its converter writes them
 * (`Qwen3NextModel.set_gguf_parameters`, conversion/qwen.py): the decoder layers are `block_count`
 * less `nextn_predict_layers` (MTP blocks appended after them, left out); a layer is recurrent
 * (Gated DeltaNet) per `attention.recurrent_layers` if present, else unless it is every
 * `full_attention_interval`-th (default 4); `ssm.group_count` key heads of `ssm.state_size`,
 * `ssm.time_step_rank` value heads of `ssm.inner_size / time_step_rank`, `ssm.conv_kernel`;
 * `rope.dimension_count` rotated dimensions (partial rotary) and `rope.dimension_sections` that
 * must rotate every pair by the token's position ({@link unrotatedPair}). Norms are zero-centred
 * and q_proj carries the output gate.
 */
export function qwen35Fields(g: GgufFile, base: ModelSpec, arch = 'qwen35'): Partial<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `${arch}.${key}`;
  const blocks = base.layers;
  const nextn = metaCountOrZero(g, k('nextn_predict_layers'));
  if (nextn >= blocks)
    throw new ModelFormatError(
      file,
      k('nextn_predict_layers'),
      nextn,
      `must be below block_count (${blocks})`,
    );
  const layers = blocks - nextn;
  const valueLength = meta(g, k('attention.value_length'));
  if (valueLength !== undefined && valueLength !== base.headDim)
    throw new ModelFormatError(
      file,
      k('attention.value_length'),
      valueLength,
      `must equal key_length (${base.headDim})`,
    );
  const rotaryDim = metaCount(g, k('rope.dimension_count'), base.headDim);
  if (rotaryDim % 2 !== 0 || rotaryDim > base.headDim)
    throw new ModelFormatError(
      file,
      k('rope.dimension_count'),
      rotaryDim,
      `must be even and at most key_length (${base.headDim})`,
    );
  const sections = meta(g, k('rope.dimension_sections'));
  if (
    !Array.isArray(sections) ||
    sections.length > 4 ||
    !sections.every((x): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0) ||
    !sections.some((x) => x > 0)
  ) {
    throw new ModelFormatError(
      file,
      k('rope.dimension_sections'),
      sections,
      sections === undefined ? 'missing' : 'must be up to 4 non-negative integers, not all 0',
    );
  }
  const padded = [0, 1, 2, 3].map((i) => sections[i] ?? 0);
  const pair = unrotatedPair(padded, rotaryDim / 2);
  if (pair >= 0) {
    throw new ModelFormatError(
      file,
      k('rope.dimension_sections'),
      sections,
      `rotary pair ${pair} falls outside the text sections (llama.cpp leaves it unrotated for text)`,
    );
  }
  const layerKinds = qwen35LayerKinds(g, blocks, layers, arch);
  const keyHeads = metaCount(g, k('ssm.group_count'));
  const valueHeads = metaCount(g, k('ssm.time_step_rank'));
  if (valueHeads % keyHeads !== 0)
    throw new ModelFormatError(
      file,
      k('ssm.time_step_rank'),
      valueHeads,
      `must be a multiple of ssm.group_count (${keyHeads})`,
    );
  const keyDim = metaCount(g, k('ssm.state_size'));
  const inner = metaCount(g, k('ssm.inner_size'));
  const valueDim = inner / valueHeads;
  if (!Number.isInteger(valueDim))
    throw new ModelFormatError(
      file,
      k('ssm.inner_size'),
      inner,
      `must be a multiple of ssm.time_step_rank (${valueHeads})`,
    );
  if (keyDim > 256) throw new ModelFormatError(file, k('ssm.state_size'), keyDim, 'must be at most 256');
  if (valueDim > 256)
    throw new ModelFormatError(
      file,
      k('ssm.inner_size'),
      inner,
      `gives value heads of ${valueDim} (at most 256)`,
    );
  const convKernel = metaCount(g, k('ssm.conv_kernel'));
  if (convKernel < 2)
    throw new ModelFormatError(file, k('ssm.conv_kernel'), convKernel, 'must be at least 2');
  return {
    layers,
    rope: { ...base.rope, rotaryDim },
    qkvBias: false,
    qkNorm: true,
    layerKinds,
    ...(layerKinds.includes('deltanet')
      ? { deltaNet: { keyHeads, valueHeads, keyDim, valueDim, convKernel } }
      : {}),
    outputGate: true,
    zeroCentredNorms: true,
  };
}

/**
 * The kinds of the first `layers` of `blocks` blocks: `qwen35.attention.recurrent_layers` (one
 * bool per block, true for Gated DeltaNet) if present, else every `full_attention_interval`-th
 * layer (default 4, as llama.cpp) full attention.
 */
function qwen35LayerKinds(g: GgufFile, blocks: number, layers: number, arch: string): LayerKind[] {
  const key = `${arch}.attention.recurrent_layers`;
  const recurrent = meta(g, key);
  if (recurrent !== undefined) {
    if (
      !Array.isArray(recurrent) ||
      recurrent.length !== blocks ||
      !recurrent.every((x) => typeof x === 'boolean')
    ) {
      throw new ModelFormatError(g.bytes.name, key, recurrent, `must be ${blocks} booleans (one per block)`);
    }
    return recurrent.slice(0, layers).map((r) => (r ? 'deltanet' : 'attention'));
  }
  const interval = metaCount(g, `${arch}.full_attention_interval`, 4);
  return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'deltanet'));
}
/**
 * Qwen3.5's (`qwen35`) per-layer renames, from llama.cpp's gguf-py (constants.py
 * `MODEL_TENSORS[MODEL_ARCH.QWEN35]`, tensor_mapping.py) and the loader in src/models/qwen35.cpp:
 * the MLP's norm is `post_attention_norm` (ATTN_POST_NORM, not FFN_NORM), the Gated DeltaNet's
 * tensors are `attn_qkv`, `attn_gate` and `ssm_*`; `dt_bias` is renamed `dt_proj.bias` by the
 * converter before mapping (hence `ssm_dt.bias`) and `A_log` has no suffix (`ssm_a`).
 */
export const QWEN35_LAYER_NAMES: NamePairs = [
  ...SHARED_LAYER_NAMES,
  ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
  ['attn_qkv.weight', 'linear_attn.in_proj_qkv.weight'],
  ['attn_gate.weight', 'linear_attn.in_proj_z.weight'],
  ['ssm_beta.weight', 'linear_attn.in_proj_b.weight'],
  ['ssm_alpha.weight', 'linear_attn.in_proj_a.weight'],
  ['ssm_conv1d.weight', 'linear_attn.conv1d.weight'],
  ['ssm_dt.bias', 'linear_attn.dt_bias'],
  ['ssm_a', 'linear_attn.A_log'],
  ['ssm_norm.weight', 'linear_attn.norm.weight'],
  ['ssm_out.weight', 'linear_attn.out_proj.weight'],
];

/**
 * Qwen3.5's value heads as llama.cpp stores them: Hugging Face groups the value heads by the key
 * head they share (head g·r + j is the j-th of key head g's r), llama.cpp tiles them (stored head
 * j·Hk + g) so that ggml's broadcast repeats the Hk key heads over them (`_reorder_v_heads` of
 * `_LinearAttentionVReorderBase` in llama.cpp's conversion/qwen.py). The Hugging Face index of
 * stored index `i` of a run of Hv heads of `width` values starting at `start` (indices outside it
 * stay).
 */
function vHeadIndex(la: DeltaNetSpec, start: number, width: number): (i: number) => number {
  const hk = la.keyHeads;
  const r = la.valueHeads / hk;
  return (i) => {
    const p = i - start;
    if (p < 0 || p >= la.valueHeads * width) return i;
    const head = Math.floor(p / width);
    const j = Math.floor(head / hk);
    const g = head % hk;
    return start + (g * r + j) * width + (p % width);
  };
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
    if (kind !== ((i + 1) % n === 0 ? 'attention' : 'deltanet')) {
      throw new InvalidInputError(
        `exportGguf: qwen35 GGUFs give every full_attention_interval-th layer full attention; layer kinds [${kinds}] are not such a pattern`,
      );
    }
  });
  return n;
}

/** A Qwen3.5 spec's own keys: its layer types, DeltaNet sizes and partial rotary. */
export function qwen35OwnConfig(spec: ModelSpec): Record<string, unknown> {
  const la = spec.deltaNet;
  if (!la || !spec.layerKinds) return {};
  return {
    layer_types: spec.layerKinds.map((k) => (k === 'deltanet' ? 'linear_attention' : 'full_attention')),
    linear_num_key_heads: la.keyHeads,
    linear_num_value_heads: la.valueHeads,
    linear_key_head_dim: la.keyDim,
    linear_value_head_dim: la.valueDim,
    linear_conv_kernel_dim: la.convKernel,
    partial_rotary_factor: (spec.rope.rotaryDim ?? spec.headDim) / spec.headDim,
  };
}

/**
 * The `qwen35.*` metadata in the converter's order (conversion/base.py, then conversion/qwen.py
 * `Qwen3NextModel` and `_Qwen35MRopeMixin`): the DeltaNet sizes as llama.cpp's `ssm.*` keys (which
 * its loader wants even without DeltaNet layers: any sizes do), the layer kinds as
 * `full_attention_interval` ({@link fullAttentionInterval}), the rotary width and the RoPE sections
 * that give plain RoPE for text ({@link imropeSections}).
 */
export function qwen35Metadata(spec: ModelSpec, arch = 'qwen35'): GgufEntries {
  const k = (key: string) => `${arch}.${key}`;
  const la = spec.deltaNet ?? { keyHeads: 1, valueHeads: 1, keyDim: 1, valueDim: 1, convKernel: 4 };
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

/**
 * How llama.cpp's converter stores a Qwen3.5 tensor (conversion/qwen.py,
 * `Qwen3NextModel.modify_tensors` and `_LinearAttentionVReorderBase`): the zero-centred norms
 * (every `*norm.weight` but the DeltaNet's gated `linear_attn.norm.weight`) as 1 + w, `A_log` as
 * -exp(A_log), and the value heads tiled ({@link vHeadIndex}) in the v rows of in_proj_qkv, the rows
 * of in_proj_z, in_proj_b and in_proj_a, `A_log`, `dt_bias`, the v channels of conv1d and the
 * columns of out_proj. q_proj keeps its per-head query | gate rows as they are.
 */
export function qwen35StoredForm(spec: ModelSpec, hfName: string): StoredForm {
  if (hfName.endsWith('norm.weight') && !hfName.endsWith('linear_attn.norm.weight')) return PLUS_ONE;
  const la = spec.deltaNet;
  if (la === undefined || !hfName.includes('.linear_attn.')) return {};
  const vStart = 2 * la.keyHeads * la.keyDim; // the v rows of q | k | v
  if (hfName.endsWith('in_proj_qkv.weight') || hfName.endsWith('linear_attn.conv1d.weight'))
    return { hfRow: vHeadIndex(la, vStart, la.valueDim) };
  if (hfName.endsWith('in_proj_z.weight')) return { hfRow: vHeadIndex(la, 0, la.valueDim) };
  if (
    hfName.endsWith('in_proj_b.weight') ||
    hfName.endsWith('in_proj_a.weight') ||
    hfName.endsWith('dt_bias')
  )
    return { hfRow: vHeadIndex(la, 0, 1) };
  if (hfName.endsWith('A_log'))
    return { hfRow: vHeadIndex(la, 0, 1), toHf: (x) => Math.log(-x), toStored: (x) => -Math.exp(x) };
  if (hfName.endsWith('out_proj.weight')) return { hfCol: vHeadIndex(la, 0, la.valueDim) };
  return {};
}

export const qwen3_5: Family = {
  configTypes: { qwen3_5: wrapped('qwen3_5', qwen35Spec), qwen3_5_text: qwen35Spec },
  config: (spec) => ({ ...baseConfig(spec, 'Qwen3_5ForCausalLM', 'qwen3_5_text'), ...qwen35OwnConfig(spec) }),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'qwen35',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, { family: 'qwen3_5', arch: 'qwen35', ropeFreqs: false });
      return { ...base, ...qwen35Fields(g, base) };
    },
    metadata: (spec) => qwen35Metadata(spec),
    names: { global: GLOBAL_NAMES, layer: QWEN35_LAYER_NAMES },
    squeezed: ['linear_attn.conv1d.weight'],
    storedForm: qwen35StoredForm,
  },
};
