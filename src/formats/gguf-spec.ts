/**
 * The {@link ModelSpec} of a GGUF file from its llama / qwen2 / qwen3 / qwen35 metadata, including
 * Llama 3 RoPE scaling recovered from the stored `rope_freqs.weight` factors (and those factors
 * computed from the scaling, for the writer), and Qwen3.5's layer kinds, DeltaNet sizes and
 * partial rotary (and the RoPE sections llama.cpp wants, for the writer).
 */

import { ModelFormatError } from './errors.js';
import type { GgufFile, GgufValue } from './gguf-header.js';
import { readGgufTensorF32 } from './gguf-tensors.js';
import type { LayerKind, Llama3RopeScaling, ModelFamily, ModelSpec, RopeSpec } from './spec.js';

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

/** `general.architecture` → family: llama.cpp names Qwen3.5 (dense) `qwen35`. */
const ARCHES: Readonly<Record<string, ModelFamily>> = {
  llama: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen35: 'qwen3_5',
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
 * GGUFs), qwen2, qwen3 or qwen35 (Qwen3.5, see {@link qwen35Fields}). Keys are
 * `<arch>.embedding_length`, `.block_count`, `.feed_forward_length`, `.attention.head_count(_kv)`,
 * `.attention.key_length` (head dim), `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`,
 * `.context_length`; the vocab size comes from `token_embd.weight`; the head is tied when
 * `output.weight` is absent. Llama 3 RoPE scaling is recovered from `rope_freqs.weight` (hence
 * async). RoPE layout is always `'half'`: weft un-permutes llama Q/K rows at load (see
 * `openGgufCheckpoint` in gguf.ts).
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
      'unsupported architecture (llama, qwen2, qwen3, qwen35)',
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
  const rope: RopeSpec =
    freqs && family !== 'qwen3_5'
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
  return family === 'qwen3_5' ? { ...spec, ...qwen35Fields(g, spec) } : spec;
}

/** An optional count at `key`: an integer ≥ 0, 0 when absent. */
function metaCountOrZero(g: GgufFile, key: string): number {
  const v = meta(g, key) ?? 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new ModelFormatError(g.source.name, key, v, 'must be a non-negative integer');
  return v;
}

/**
 * The `rope.dimension_sections` llama.cpp wants for a rotary width of `pairs` (i, i + R/2) pairs:
 * Qwen3.5 rotates with interleaved multimodal RoPE (`ggml_rope_multi`, IMROPE: pair j takes the
 * temporal, height or width position by j mod 3, while j < 3 · that section), and for text the
 * three positions are the token's, so any sections that give every pair one of the three are plain
 * RoPE. These are the counts of each residue mod 3 below `pairs` ([11, 11, 10, 0] for Qwen3.5's 32
 * pairs, the published `mrope_section`).
 */
export function imropeSections(pairs: number): number[] {
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
function qwen35Fields(g: GgufFile, base: ModelSpec): Partial<ModelSpec> {
  const file = g.source.name;
  const k = (key: string) => `qwen35.${key}`;
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
  const layerKinds = qwen35LayerKinds(g, blocks, layers);
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
    ...(layerKinds.includes('linear')
      ? { linearAttention: { keyHeads, valueHeads, keyDim, valueDim, convKernel } }
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
function qwen35LayerKinds(g: GgufFile, blocks: number, layers: number): LayerKind[] {
  const key = 'qwen35.attention.recurrent_layers';
  const recurrent = meta(g, key);
  if (recurrent !== undefined) {
    if (
      !Array.isArray(recurrent) ||
      recurrent.length !== blocks ||
      !recurrent.every((x) => typeof x === 'boolean')
    ) {
      throw new ModelFormatError(g.source.name, key, recurrent, `must be ${blocks} booleans (one per block)`);
    }
    return recurrent.slice(0, layers).map((r) => (r ? 'linear' : 'attention'));
  }
  const interval = metaCount(g, 'qwen35.full_attention_interval', 4);
  return Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? 'attention' : 'linear'));
}
