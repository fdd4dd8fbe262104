// Gemma 4 as llama.cpp's `gemma4` GGUF: `weft export-gguf` writes the names, metadata and the
// generated `rope_freqs.weight` llama.cpp's converter writes, refuses what llama.cpp's graph would
// run differently, and such a GGUF opens as the safetensors' spec with their tensors, so the CPU
// reference gives the same logits. The expectations are written from llama.cpp's own files, cited
// at each (conversion/gemma.py `Gemma4Model` over `Gemma3Model`, conversion/base.py
// `TextModel.set_gguf_parameters` and `prepare_tensors`, src/models/gemma4.cpp's loader and graph,
// src/llama-model.cpp's KV reuse, gguf-py/gguf/constants.py), not from weft's code.
import { describe, expect, it } from 'vitest';
import { exportModelGguf } from '../../src/convert/convert.js';
import { exportGguf, type GgufExportType } from '../../src/convert/gguf-export.js';
import { createEngine } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { type GgufFile, openGguf } from '../../src/formats/gguf/header.js';
import { readGgufTensorF32 } from '../../src/formats/gguf/tensors.js';
import { type GgufEntry, type GgufWriteTensor, writeGguf } from '../../src/formats/gguf/write.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { ggufSpec, specFromConfig } from '../../src/model/families/index.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GgmlType, quantizeGgml } from '../../src/quant/ggml/blocks.js';
import {
  configFixtureFiles,
  randomTensors,
  sameF32,
  tinyConfig,
  tinyGemma4LlamaCppConfig,
} from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

/** 20 ids: past the tiny Gemma 4's 6-token window. */
const PROMPT = Array.from({ length: 20 }, (_, i) => (i * 37 + 11) % 300);

/** `config` as `weft export-gguf` writes it, with the source files, spec and tensors. */
async function exported(config: Record<string, unknown>, type: GgufExportType = 'F32', seed = 3) {
  const { files, spec, tensors } = configFixtureFiles(config, seed);
  const bytes = await exportModelGguf(memoryModelFiles('m', files), type);
  return { bytes, files, spec, tensors: new Map(tensors.map((t) => [t.name, t])) };
}

const ggufFiles = (bytes: Uint8Array) => memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));
const open = (bytes: Uint8Array, name = 'g4.gguf') => openGguf(memoryBytes(bytes, name));

async function raw(g: GgufFile, name: string): Promise<Float32Array> {
  const info = g.tensors.get(name);
  if (info === undefined) throw new Error(`no tensor ${name}`);
  return readGgufTensorF32(info);
}

/** The metadata keys a GGUF holds besides the tokenizer's. */
const archKeys = (g: GgufFile) => [...g.metadata.keys()].filter((k) => !k.startsWith('tokenizer.'));

/** The error `run` throws or rejects with (undefined if none). */
async function thrown(run: () => unknown): Promise<unknown> {
  try {
    await run();
  } catch (e) {
    return e;
  }
  return undefined;
}

/** The spec of `config` as `exportGguf` sees it, and its random tensors. */
function source(config: Record<string, unknown>) {
  const spec = specFromConfig(config);
  return { spec, tensors: randomTensors(spec, 5) };
}

/** llama.cpp's converter's `rope_freqs.weight` for a full head of 32 turning a quarter: 4 × 1, 12 × 1e30. */
const ROPE_FREQS = Float32Array.from({ length: 16 }, (_, i) => (i < 4 ? 1 : 1e30));

describe('gemma4 GGUF export follows llama.cpp', () => {
  it('writes the metadata keys and values of Gemma4Model.set_gguf_parameters, in its order', async () => {
    const { bytes } = await exported(tinyGemma4LlamaCppConfig(), 'Q8_0');
    const g = await open(bytes);
    // TextModel.set_gguf_parameters: block_count, context_length, embedding_length,
    // feed_forward_length, head_count, head_count_kv, (the "proportional" RoPE type is unknown to
    // it: no rope.scaling.*), rope.freq_base (full_attention's theta), rope.freq_base_swa
    // (sliding_attention's), the norm epsilon, key/value_length (head_dim); Gemma3Model: the
    // softcap, sliding_window; Gemma4Model: shared_kv_layers, embedding_length_per_layer_input,
    // sliding_window_pattern, key/value_length again (global_head_dim, in place), the _swa ones,
    // feed_forward_length again (an array, in place), rope.dimension_count and _swa.
    expect(archKeys(g)).toEqual([
      'general.architecture',
      'gemma4.block_count',
      'gemma4.context_length',
      'gemma4.embedding_length',
      'gemma4.feed_forward_length',
      'gemma4.attention.head_count',
      'gemma4.attention.head_count_kv',
      'gemma4.rope.freq_base',
      'gemma4.rope.freq_base_swa',
      'gemma4.attention.layer_norm_rms_epsilon',
      'gemma4.attention.key_length',
      'gemma4.attention.value_length',
      'gemma4.final_logit_softcapping',
      'gemma4.attention.sliding_window',
      'gemma4.attention.shared_kv_layers',
      'gemma4.embedding_length_per_layer_input',
      'gemma4.attention.sliding_window_pattern',
      'gemma4.attention.key_length_swa',
      'gemma4.attention.value_length_swa',
      'gemma4.rope.dimension_count',
      'gemma4.rope.dimension_count_swa',
    ]);
    const m = (k: string) => g.metadata.get(`gemma4.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('gemma4');
    expect([m('block_count'), m('context_length'), m('embedding_length')]).toEqual([6, 4096, 64]);
    // use_double_wide_mlp: [n_ff if il < n_layer - num_kv_shared_layers else 2 · n_ff].
    expect(m('feed_forward_length')).toEqual([48, 48, 48, 48, 96, 96]);
    // No num_global_key_value_heads in the config: one count.
    expect([m('attention.head_count'), m('attention.head_count_kv')]).toEqual([4, 2]);
    expect([m('rope.freq_base'), m('rope.freq_base_swa')]).toEqual([1_000_000, 10_000]);
    expect(m('attention.layer_norm_rms_epsilon')).toBe(Math.fround(1e-6));
    expect([m('attention.key_length'), m('attention.value_length')]).toEqual([32, 32]);
    expect([m('attention.key_length_swa'), m('attention.value_length_swa')]).toEqual([16, 16]);
    // n_rot_full = global_head_dim ("proportional" is in rope_freqs); n_rot_swa = head_dim · 1.0.
    expect([m('rope.dimension_count'), m('rope.dimension_count_swa')]).toEqual([32, 16]);
    expect([m('final_logit_softcapping'), m('attention.sliding_window')]).toEqual([30, 6]);
    expect([m('attention.shared_kv_layers'), m('embedding_length_per_layer_input')]).toEqual([2, 16]);
    // [layer_types[i] == "sliding_attention"], a bool array.
    expect(m('attention.sliding_window_pattern')).toEqual([true, true, true, false, true, false]);
  });

  it('writes the tensors llama_model_gemma4::load_arch_tensors reads, and no K/V for the KV-shared layers', async () => {
    const { bytes } = await exported(tinyGemma4LlamaCppConfig(), 'Q8_0');
    const g = await open(bytes);
    // ne from load_arch_tensors ({n_embd, n_head · n_embd_head} and so on, per layer's head);
    // types: F32 for vectors and *_norm.weight, Q8_0 where a row is whole blocks of 32, else F16
    // (prepare_tensors: gguf-py's QuantError falls back to F16).
    const { F32, F16, Q8_0 } = GgmlType;
    const expected: [string, number[], number][] = [
      ['rope_freqs.weight', [16], F32],
      ['token_embd.weight', [64, 512], Q8_0],
      ['output.weight', [64, 512], Q8_0],
      ['output_norm.weight', [64], F32],
      ['per_layer_token_embd.weight', [6 * 16, 512], Q8_0],
      ['per_layer_model_proj.weight', [64, 6 * 16], Q8_0],
      ['per_layer_proj_norm.weight', [16], F32],
      // A sliding layer: heads of 16.
      ['blk.0.attn_norm.weight', [64], F32],
      ['blk.0.attn_q.weight', [64, 4 * 16], Q8_0],
      ['blk.0.attn_k.weight', [64, 2 * 16], Q8_0],
      ['blk.0.attn_v.weight', [64, 2 * 16], Q8_0],
      ['blk.0.attn_output.weight', [4 * 16, 64], Q8_0],
      ['blk.0.attn_q_norm.weight', [16], F32],
      ['blk.0.attn_k_norm.weight', [16], F32],
      ['blk.0.post_attention_norm.weight', [64], F32],
      ['blk.0.ffn_norm.weight', [64], F32],
      ['blk.0.ffn_gate.weight', [64, 48], Q8_0],
      ['blk.0.ffn_up.weight', [64, 48], Q8_0],
      ['blk.0.ffn_down.weight', [48, 64], F16],
      ['blk.0.post_ffw_norm.weight', [64], F32],
      ['blk.0.layer_output_scale.weight', [1], F32],
      ['blk.0.inp_gate.weight', [64, 16], Q8_0],
      ['blk.0.proj.weight', [16, 64], F16],
      ['blk.0.post_norm.weight', [64], F32],
      // A full layer: heads of 32.
      ['blk.3.attn_q.weight', [64, 4 * 32], Q8_0],
      ['blk.3.attn_k.weight', [64, 2 * 32], Q8_0],
      ['blk.3.attn_v.weight', [64, 2 * 32], Q8_0],
      ['blk.3.attn_output.weight', [4 * 32, 64], Q8_0],
      ['blk.3.attn_q_norm.weight', [32], F32],
      ['blk.3.attn_k_norm.weight', [32], F32],
      // KV-shared layers: Q only, and double-wide MLPs.
      ['blk.4.attn_q.weight', [64, 4 * 16], Q8_0],
      ['blk.4.attn_q_norm.weight', [16], F32],
      ['blk.4.ffn_gate.weight', [64, 96], Q8_0],
      ['blk.5.attn_q.weight', [64, 4 * 32], Q8_0],
      ['blk.5.ffn_down.weight', [96, 64], Q8_0],
    ];
    for (const [name, ne, type] of expected) {
      const info = g.tensors.get(name);
      expect(info?.ne, name).toEqual(ne);
      expect(info?.type, name).toBe(type);
    }
    // kv_flags: attn_k and attn_k_norm TENSOR_NOT_REQUIRED where !has_kv(i); attn_v always optional.
    for (const l of [4, 5])
      for (const t of ['attn_k', 'attn_v', 'attn_k_norm'])
        expect(g.tensors.has(`blk.${l}.${t}.weight`), `blk.${l}.${t}`).toBe(false);
    // 17 tensors per layer with its own KV, 14 per KV-shared one, 7 global.
    expect(g.tensors.size).toBe(4 * 17 + 2 * 14 + 7);
    // generate_extra_tensors: [1.0] · int(32 · 0.25 / 2) + [1e30] · the rest.
    expect(sameF32(await raw(g, 'rope_freqs.weight'), ROPE_FREQS)).toBeUndefined();
  });

  it('stores every tensor as it is: no 1 + w norms (norm_shift 0), no RoPE permutation', async () => {
    const { bytes, tensors } = await exported(tinyGemma4LlamaCppConfig());
    const g = await open(bytes);
    const hf = (name: string) => tensors.get(name)!.data;
    const p = 'model.layers.3';
    const stored: [string, string][] = [
      ['blk.3.attn_norm.weight', `${p}.input_layernorm.weight`],
      ['blk.3.attn_q_norm.weight', `${p}.self_attn.q_norm.weight`],
      ['blk.3.attn_k.weight', `${p}.self_attn.k_proj.weight`],
      ['blk.3.post_ffw_norm.weight', `${p}.post_feedforward_layernorm.weight`],
      ['blk.3.layer_output_scale.weight', `${p}.layer_scalar`],
      ['blk.3.inp_gate.weight', `${p}.per_layer_input_gate.weight`],
      ['blk.3.post_norm.weight', `${p}.post_per_layer_input_norm.weight`],
      ['output_norm.weight', 'model.norm.weight'],
      ['per_layer_token_embd.weight', 'model.embed_tokens_per_layer.weight'],
      ['per_layer_proj_norm.weight', 'model.per_layer_projection_norm.weight'],
      ['token_embd.weight', 'model.embed_tokens.weight'],
    ];
    for (const [name, hfName] of stored)
      expect(sameF32(await raw(g, name), hf(hfName)), name).toBeUndefined();
  });

  it('attention_k_eq_v: head_count_kv per layer, and no attn_v on the full layers (V = K)', async () => {
    const { bytes } = await exported(tinyGemma4LlamaCppConfig(true));
    const g = await open(bytes);
    // num_global_key_value_heads and num_key_value_heads both set: [swa ? 2 : 1].
    expect(g.metadata.get('gemma4.attention.head_count_kv')).toEqual([2, 2, 2, 1, 2, 1]);
    expect(g.tensors.get('blk.3.attn_k.weight')?.ne).toEqual([64, 32]);
    expect(g.tensors.has('blk.3.attn_v.weight')).toBe(false);
    expect(g.tensors.has('blk.2.attn_v.weight')).toBe(true);
  });
});

describe('gemma4 GGUF export refuses what llama.cpp would run differently', () => {
  const refused = (spec: ModelSpec, message: RegExp) => async () => {
    const e = await thrown(() => exportGguf(spec, [], 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(message);
  };
  const { spec } = source(tinyGemma4LlamaCppConfig());
  it(
    'KV-shared layers whose sources are not llama.cpp’s (tinyConfig’s Gemma 4: 4 reads 3, 5 reads 2)',
    refused(
      specFromConfig(tinyConfig('gemma4')),
      /gemma4 KV-shared layer 4's source = 3: llama.cpp reads layer 2's cache/,
    ),
  );
  it('an attention scale other than 1', refused({ ...spec, attentionScale: 0.25 }, /attention scale = 0.25/));
  it(
    'a full RoPE other than proportional',
    refused(
      { ...spec, rope: { theta: 1e6, layout: 'half', scaling: { type: 'linear', factor: 2 } } },
      /full RoPE = .*proportional RoPE \(rope_freqs.weight\)/,
    ),
  );
  it(
    'a scaled sliding RoPE',
    refused(
      {
        ...spec,
        localRope: { theta: 1e4, layout: 'half', scaling: { type: 'linear', factor: 2 } },
      },
      /sliding RoPE = /,
    ),
  );
  it(
    'per-layer inputs over another vocabulary',
    refused(
      specFromConfig({ ...tinyGemma4LlamaCppConfig(), vocab_size_per_layer_input: 256 }),
      /vocab_size_per_layer_input = 256: llama.cpp’s table has vocab_size \(512\) rows/,
    ),
  );
});

describe('gemma4 GGUF import', () => {
  it.each([
    ['F32', false],
    ['F32, V = K', true],
  ] as const)('%s: opens as the safetensors spec, with their tensors', async (_, kEqV) => {
    const { bytes, files } = await exported(tinyGemma4LlamaCppConfig(kEqV));
    const st = await openModel(memoryModelFiles('g4', files));
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'g4.gguf'));
    // The stop ids: the tokenizer's EOS (<|im_end|>, 302) then the config's (ggufTokenizerEntries).
    expect(ck.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    const names = [...st.weights.tensors.keys()];
    expect([...ck.tensors.keys()].sort()).toEqual([...names].sort());
    for (const name of names)
      expect(sameF32(await ck.readF32(name), await st.weights.readF32(name)), name).toBeUndefined();
  });

  it.each([
    ['F32', false],
    ['F32, V = K', true],
  ] as const)(
    '%s: the CPU reference on the GGUF gives the safetensors’ logits past the window',
    async (_, kEqV) => {
      const { bytes, files } = await exported(tinyGemma4LlamaCppConfig(kEqV));
      const st = await openModel(memoryModelFiles('g4', files));
      const gg = await openModel(ggufFiles(bytes));
      const runner = async (m: typeof st) =>
        new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)), { capacity: 64 });
      const want = (await runner(st)).logitsFor(PROMPT);
      const got = (await runner(gg)).logitsFor(PROMPT);
      expect(sameF32(got, want)).toBeUndefined();
      expect(greedy(await runner(gg), PROMPT, 8)).toEqual(greedy(await runner(st), PROMPT, 8));
    },
  );

  it('Q8_0: reads back as the same spec; the engine on the CPU gives the reference’s greedy ids', async () => {
    const { bytes, files } = await exported(tinyGemma4LlamaCppConfig(), 'Q8_0', 7);
    const st = await openModel(memoryModelFiles('g4', files));
    const gg = await openModel(ggufFiles(bytes));
    expect(gg.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    const ref = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(gg.weights)), { capacity: 64 });
    const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 64 });
    const ids: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
    await engine.unload();
    expect(ids).toEqual(greedy(ref, PROMPT, 6));
  });
});

/** A GGUF's metadata as typed entries (integers u32, else f32; arrays of bools or of i32). */
function entries(g: GgufFile): [string, GgufEntry][] {
  return [...g.metadata]
    .filter(([k]) => !k.startsWith('tokenizer.') || k.endsWith('_token_id'))
    .map(([k, v]): [string, GgufEntry] => {
      if (typeof v === 'string') return [k, { type: 'string', value: v }];
      if (typeof v === 'boolean') return [k, { type: 'bool', value: v }];
      if (Array.isArray(v))
        return v.every((b) => typeof b === 'boolean')
          ? [k, { type: 'bool[]', value: v.map((b) => b === true) }]
          : [k, { type: 'i32[]', value: v.map(Number) }];
      return [k, Number.isInteger(v) ? { type: 'u32', value: Number(v) } : { type: 'f32', value: Number(v) }];
    });
}

/**
 * `bytes` with the metadata `key` set to `e` (or removed), and tensor `tensor` (if given) holding
 * `values` (F32) or removed (undefined).
 */
async function edited(
  bytes: Uint8Array,
  key: string | undefined,
  e: GgufEntry | undefined,
  tensor?: [string, Float32Array | undefined],
): Promise<Uint8Array> {
  const g = await open(bytes, 'm.gguf');
  const tensors: GgufWriteTensor[] = [];
  for (const info of g.tensors.values()) {
    if (tensor?.[0] === info.name) {
      const values = tensor[1];
      if (values)
        tensors.push({
          name: info.name,
          ne: [values.length],
          type: GgmlType.F32,
          data: quantizeGgml(0, values),
        });
      continue;
    }
    tensors.push({
      name: info.name,
      ne: info.ne,
      type: info.type,
      data: await info.bytes.read(info.offset, info.byteLength),
    });
  }
  const rest = entries(g).filter(([k]) => k !== key);
  return writeGguf(key === undefined || e === undefined ? rest : [...rest, [key, e]], tensors);
}

describe('gemma4 GGUF metadata', () => {
  it.each([
    [
      'gemma4.expert_count',
      { type: 'u32', value: 8 },
      /gemma4.expert_count = 8: Gemma 4’s mixture-of-experts layers are not read from GGUF yet/,
    ],
    [
      'gemma4.attention.sliding_window_pattern',
      { type: 'i32[]', value: [1, 1, 1, 0, 1, 0] },
      /sliding_window_pattern = \[1,1,1,0,1,0\]: must be one bool per layer \(6\)/,
    ],
    [
      // Layer 4 slides, so llama.cpp gives it layer 2's cache, which is full here.
      'gemma4.attention.sliding_window_pattern',
      { type: 'bool[]', value: [true, true, false, true, true, false] },
      /KV-shared layer 4 reads layer 2's cache, not the last earlier layer of its own type/,
    ],
    [
      'gemma4.attention.head_count_kv',
      { type: 'i32[]', value: [2, 1, 2, 2, 2, 2] },
      /head_count_kv = \[2,1,2,2,2,2\]: must be one value for the sliding layers/,
    ],
    [
      'gemma4.feed_forward_length',
      { type: 'i32[]', value: [48, 48, 48, 48, 144, 144] },
      /feed_forward_length = .*MLPs must be 48 or twice that wide/,
    ],
    ['gemma4.attention.value_length_swa', { type: 'u32', value: 32 }, /value_length_swa = 32: must be 16/],
    [
      'gemma4.rope.dimension_count_swa',
      { type: 'u32', value: 8 },
      /rope.dimension_count_swa = 8: must be 16 \(weft turns the whole head\)/,
    ],
    [
      'gemma4.rope.scaling.type',
      { type: 'string', value: 'yarn' },
      /gemma4.rope.scaling.type = "yarn": unsupported RoPE scaling/,
    ],
    ['gemma4.attention.sliding_window', undefined, /gemma4.attention.sliding_window = undefined: missing/],
  ] as const)('%s → %j: names the key and the value', async (key, entry, message) => {
    const { bytes } = await exported(tinyGemma4LlamaCppConfig());
    const g = await open(await edited(bytes, key, entry), 'bad.gguf');
    const e = await thrown(() => ggufSpec(g));
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as ModelFormatError).message).toMatch(message);
  });

  it('rope_freqs.weight: missing, or not one factor then 1e30, is refused; another factor reads as it', async () => {
    const { bytes, spec } = await exported(tinyGemma4LlamaCppConfig());
    const read = async (values: Float32Array | undefined) =>
      ggufSpec(await open(await edited(bytes, undefined, undefined, ['rope_freqs.weight', values])));
    for (const [values, message] of [
      [undefined, /rope_freqs.weight = undefined: missing tensor/],
      [Float32Array.from(ROPE_FREQS, (v, i) => (i === 2 ? 2 : v)), /must be 16 factors: one for the pairs/],
      [ROPE_FREQS.subarray(0, 8), /must be 16 factors/],
    ] as const) {
      const e = await thrown(() => read(values));
      expect(e).toBeInstanceOf(ModelFormatError);
      expect((e as Error).message).toMatch(message);
    }
    // Every pair turning, divided by 4: proportional RoPE of 16 pairs and factor 4.
    const scaled = await read(new Float32Array(16).fill(4));
    expect(scaled.rope).toEqual({
      ...spec.rope,
      scaling: { type: 'proportional', rotatedPairs: 16, factor: 4 },
    });
    // Every pair turning at 1: RoPE unscaled.
    expect((await read(new Float32Array(16).fill(1))).rope).toEqual({ theta: 1_000_000, layout: 'half' });
  });

  it('a zero softcap and no layer_output_scale read as none; one bool sets every layer', async () => {
    const { bytes } = await exported(tinyGemma4LlamaCppConfig());
    const noCap = await ggufSpec(
      await open(await edited(bytes, 'gemma4.final_logit_softcapping', { type: 'f32', value: 0 })),
    );
    expect(noCap.logitSoftcap).toBeUndefined();
    const g = await open(bytes);
    const tensors: GgufWriteTensor[] = [];
    for (const info of g.tensors.values())
      if (!info.name.endsWith('layer_output_scale.weight'))
        tensors.push({ ...info, data: await info.bytes.read(info.offset, info.byteLength) });
    const noScalar = await ggufSpec(await open(writeGguf(entries(g), tensors)));
    expect(noScalar.layerScalar).toBeUndefined();
    // One bool for every layer (get_key_or_arr): all full, each shared layer reading layer 3.
    const full = await ggufSpec(
      await open(
        await edited(bytes, 'gemma4.attention.sliding_window_pattern', { type: 'bool', value: false }),
      ),
    );
    expect(full.slidingLayers).toEqual(Array(6).fill(false));
  });
});
