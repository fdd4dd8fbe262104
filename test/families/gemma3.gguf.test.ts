// Gemma 3 and SmolLM3 as llama.cpp's `gemma3` and `smollm3` GGUFs: `weft export-gguf` writes the
// names, metadata and value transforms llama.cpp's converter writes, refuses what llama.cpp's
// loaders would run differently, and such a GGUF opens as the safetensors' spec with their tensors,
// so the CPU reference gives the same logits. The expectations are written from llama.cpp's own
// files, cited at each (src/models/gemma3.cpp, smollm3.cpp, conversion/gemma.py, llama.py, base.py,
// gguf-py/gguf/constants.py), not from weft's code.
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
import { normWeight } from '../../src/model/blocks/ops.js';
import { ggufSpec, specFromConfig } from '../../src/model/families/index.js';
import { permuteRows } from '../../src/model/families/stored.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { layerAttention } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import {
  configFixtureFiles,
  randomTensors,
  sameF32,
  tinyConfig,
  tinyGemma3LlamaCppConfig,
  tinySmolLM3LlamaCppConfig,
} from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

/** 80 ids: past the tiny Gemma 3's 64-token window. */
const PROMPT = Array.from({ length: 80 }, (_, i) => (i * 37 + 11) % 300);

/** `config` as `weft export-gguf` writes it, with the source files, spec and tensors. */
async function exported(config: Record<string, unknown>, type: GgufExportType = 'F32', seed = 3) {
  const { files, spec, tensors } = configFixtureFiles(config, seed);
  const bytes = await exportModelGguf(memoryModelFiles('m', files), type);
  return { bytes, files, spec, tensors: new Map(tensors.map((t) => [t.name, t])) };
}

const ggufFiles = (bytes: Uint8Array) => memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));

async function raw(g: GgufFile, name: string): Promise<Float32Array> {
  const info = g.tensors.get(name);
  if (info === undefined) throw new Error(`no tensor ${name}`);
  return readGgufTensorF32(info);
}

/** The metadata keys a GGUF holds besides the tokenizer's. */
const archKeys = (g: GgufFile) => [...g.metadata.keys()].filter((k) => !k.startsWith('tokenizer.'));

/** The error `run` throws (undefined if none). */
function thrown(run: () => unknown): unknown {
  try {
    run();
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

describe('gemma3 GGUF export follows llama.cpp', () => {
  it('writes the metadata keys, tensor names and shapes llama.cpp reads', async () => {
    const { bytes, spec } = await exported(tinyGemma3LlamaCppConfig(), 'Q8_0');
    const g = await openGguf(memoryBytes(bytes, 'g3.gguf'));
    // conversion/base.py `TextModel.set_gguf_parameters` (block_count … value_length, the local
    // base from `rope_local_base_freq` as rope.freq_base_swa) then conversion/gemma.py
    // `Gemma3Model.set_gguf_parameters` (sliding_window unless sliding_window_pattern is 1); no
    // rope.dimension_count (Gemma3Model is no LlamaModel) and no sliding_window_pattern: the
    // fixture's layers follow llama.cpp's default 6.
    expect(archKeys(g)).toEqual([
      'general.architecture',
      'gemma3.block_count',
      'gemma3.context_length',
      'gemma3.embedding_length',
      'gemma3.feed_forward_length',
      'gemma3.attention.head_count',
      'gemma3.attention.head_count_kv',
      'gemma3.rope.freq_base',
      'gemma3.rope.freq_base_swa',
      'gemma3.attention.layer_norm_rms_epsilon',
      'gemma3.attention.key_length',
      'gemma3.attention.value_length',
      'gemma3.attention.sliding_window',
    ]);
    const m = (k: string) => g.metadata.get(`gemma3.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('gemma3');
    expect([m('block_count'), m('attention.head_count'), m('attention.head_count_kv')]).toEqual([6, 4, 1]);
    expect([m('attention.key_length'), m('attention.value_length')]).toEqual([32, 32]);
    expect([m('rope.freq_base'), m('rope.freq_base_swa'), m('attention.sliding_window')]).toEqual([
      1_000_000, 10_000, 64,
    ]);
    expect(m('block_count')).toBe(spec.layers);

    // gguf-py constants.py MODEL_TENSORS[GEMMA3] and TENSOR_NAMES: ATTN_POST_NORM is
    // post_attention_norm, FFN_PRE_NORM ffn_norm, FFN_POST_NORM post_ffw_norm; ne from
    // `llama_model_gemma3::load_arch_tensors`; F32 for vectors (conversion/base.py prepare_tensors).
    const expected: [string, number[], number][] = [
      ['token_embd.weight', [64, 512], GgmlType.Q8_0],
      ['output_norm.weight', [64], GgmlType.F32],
      ['blk.0.attn_norm.weight', [64], GgmlType.F32],
      ['blk.0.attn_q.weight', [64, 4 * 32], GgmlType.Q8_0],
      ['blk.0.attn_k.weight', [64, 32], GgmlType.Q8_0],
      ['blk.0.attn_v.weight', [64, 32], GgmlType.Q8_0],
      ['blk.0.attn_output.weight', [4 * 32, 64], GgmlType.Q8_0],
      ['blk.0.attn_q_norm.weight', [32], GgmlType.F32],
      ['blk.0.attn_k_norm.weight', [32], GgmlType.F32],
      ['blk.0.post_attention_norm.weight', [64], GgmlType.F32],
      ['blk.0.ffn_norm.weight', [64], GgmlType.F32],
      ['blk.0.ffn_gate.weight', [64, 96], GgmlType.Q8_0],
      ['blk.0.ffn_up.weight', [64, 96], GgmlType.Q8_0],
      ['blk.0.ffn_down.weight', [96, 64], GgmlType.Q8_0],
      ['blk.0.post_ffw_norm.weight', [64], GgmlType.F32],
    ];
    for (const [name, ne, type] of expected) {
      const info = g.tensors.get(name);
      expect(info?.ne, name).toEqual(ne);
      expect(info?.type, name).toBe(type);
    }
    // 13 tensors per layer, the embedding, the output norm and the fixture's own head.
    expect(g.tensors.get('output.weight')?.ne).toEqual([64, 512]);
    expect(g.tensors.size).toBe(6 * 13 + 3);
  });

  it('stores every norm as 1 + w and the rest as it is', async () => {
    const { bytes, tensors } = await exported(tinyGemma3LlamaCppConfig());
    const g = await openGguf(memoryBytes(bytes, 'g3.gguf'));
    const hf = (name: string) => tensors.get(name)!.data;
    // Gemma3Model.modify_tensors: `data_torch + 1` for names ending "norm.weight", on f32 data
    // (conversion/base.py casts other dtypes to float32 first): Math.fround(1 + w).
    const plusOne = (name: string) => Float32Array.from(hf(name), (w) => 1 + w);
    const p = 'model.layers.5';
    const stored: [string, Float32Array][] = [
      ['blk.5.attn_norm.weight', plusOne(`${p}.input_layernorm.weight`)],
      ['blk.5.attn_q_norm.weight', plusOne(`${p}.self_attn.q_norm.weight`)],
      ['blk.5.attn_k_norm.weight', plusOne(`${p}.self_attn.k_norm.weight`)],
      ['blk.5.post_attention_norm.weight', plusOne(`${p}.post_attention_layernorm.weight`)],
      ['blk.5.ffn_norm.weight', plusOne(`${p}.pre_feedforward_layernorm.weight`)],
      ['blk.5.post_ffw_norm.weight', plusOne(`${p}.post_feedforward_layernorm.weight`)],
      ['output_norm.weight', plusOne('model.norm.weight')],
      // No RoPE permutation: llama.cpp's gemma3 uses NEOX RoPE, the Hugging Face pairing.
      ['blk.5.attn_q.weight', hf(`${p}.self_attn.q_proj.weight`)],
      ['blk.5.attn_k.weight', hf(`${p}.self_attn.k_proj.weight`)],
      ['token_embd.weight', hf('model.embed_tokens.weight')],
    ];
    for (const [name, want] of stored) expect(sameF32(await raw(g, name), want), name).toBeUndefined();
  });

  it('writes attention.sliding_window_pattern for another period, and linear RoPE scaling', async () => {
    // Three layers sliding, full, sliding: llama.cpp's set_swa_pattern(2) (src/llama-hparams.cpp:
    // layer i slides unless i mod 2 = 1), read since llama.cpp a976ff08; the global layers' linear
    // scaling as rope.scaling.type / factor (conversion/base.py), the local base as freq_base_swa.
    const config = {
      ...tinyConfig('gemma3'),
      query_pre_attn_scalar: 32,
      rope_local_base_freq: 20_000,
      rope_scaling: { rope_type: 'linear', factor: 8 },
    };
    const { bytes, files } = await exported(config);
    const g = await openGguf(memoryBytes(bytes, 'g3.gguf'));
    const m = (k: string) => g.metadata.get(`gemma3.${k}`);
    expect(g.tensors.has('output.weight')).toBe(false); // tied, as tinyConfig's Gemma 3
    expect(archKeys(g)).toEqual([
      'general.architecture',
      'gemma3.block_count',
      'gemma3.context_length',
      'gemma3.embedding_length',
      'gemma3.feed_forward_length',
      'gemma3.attention.head_count',
      'gemma3.attention.head_count_kv',
      'gemma3.rope.scaling.type',
      'gemma3.rope.scaling.factor',
      'gemma3.rope.freq_base',
      'gemma3.rope.freq_base_swa',
      'gemma3.attention.layer_norm_rms_epsilon',
      'gemma3.attention.key_length',
      'gemma3.attention.value_length',
      'gemma3.attention.sliding_window',
      'gemma3.attention.sliding_window_pattern',
    ]);
    expect([m('rope.scaling.type'), m('rope.scaling.factor'), m('rope.freq_base_swa')]).toEqual([
      'linear',
      8,
      20_000,
    ]);
    expect(m('attention.sliding_window_pattern')).toBe(2);
    const st = await openModel(memoryModelFiles('g3', files));
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'g3.gguf'));
    expect(ck.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    expect(ck.spec.slidingLayers).toEqual([true, false, true]);
  });

  it('writes no window when no layer slides, and reads every layer global', async () => {
    const config = { ...tinyGemma3LlamaCppConfig(), layer_types: Array(6).fill('full_attention') };
    const { bytes } = await exported(config);
    const g = await openGguf(memoryBytes(bytes, 'g3.gguf'));
    expect(archKeys(g).filter((k) => k.includes('sliding'))).toEqual([]);
    const spec = await ggufSpec(g);
    expect(spec.slidingWindow).toBeUndefined();
    for (let i = 0; i < 6; i++)
      expect(layerAttention(spec, i)).toEqual({ window: undefined, rope: spec.rope });
  });

  it('62 layers: llama.cpp scales by 1/√(hidden / heads), and the spec read says so', async () => {
    // `type == LLM_TYPE_27B` (n_layer 62) in llama_model_gemma3::load_arch_hparams.
    const layers = { ...tinyGemma3LlamaCppConfig(), num_hidden_layers: 62, layer_types: undefined };
    const { spec, tensors } = source({ ...layers, query_pre_attn_scalar: 16 });
    const g = await openGguf(memoryBytes(exportGguf(spec, tensors, 'F32'), 'g3.gguf'));
    expect(await ggufSpec(g)).toEqual({ ...spec, bosId: undefined, eosIds: [] });
    const e = thrown(() => exportGguf(source(layers).spec, [], 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(/query_pre_attn_scalar = 32: .*1\/√16 \(hidden \/ heads/);
  });
});

describe('gemma3 GGUF export refuses what llama.cpp would run differently', () => {
  it.each([
    // tinyConfig's Gemma 3: query_pre_attn_scalar 24 ≠ head_dim 32, which llama.cpp uses.
    [
      'query_pre_attn_scalar',
      tinyConfig('gemma3'),
      /gemma3 query_pre_attn_scalar = 24: .*1\/√32 \(head_dim\)/,
    ],
    [
      'layer types that are no period',
      {
        ...tinyGemma3LlamaCppConfig(),
        layer_types: [
          'sliding_attention',
          'full_attention',
          'full_attention',
          ...Array(3).fill('full_attention'),
        ],
      },
      /layer_types \[sliding,full,full,full,full,full\] are not every p-th layer full/,
    ],
    [
      'Llama 3 RoPE scaling',
      {
        ...tinyGemma3LlamaCppConfig(),
        rope_scaling: {
          rope_type: 'llama3',
          factor: 8,
          low_freq_factor: 1,
          high_freq_factor: 4,
          original_max_position_embeddings: 64,
        },
      },
      /gemma3 rope_scaling = .*reads no rope_freqs.weight/,
    ],
  ])('%s', (_, config, message) => {
    const { spec, tensors } = source(config);
    const e = thrown(() => exportGguf(spec, tensors, 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(message);
  });

  it('a scaled local RoPE', () => {
    const { spec, tensors } = source(tinyGemma3LlamaCppConfig());
    const local = {
      ...spec,
      localRope: { theta: 10_000, layout: 'half' as const, scaling: { type: 'linear' as const, factor: 2 } },
    };
    const e = thrown(() => exportGguf(local, tensors, 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(/local RoPE scaling/);
  });
});

describe('gemma3 GGUF import', () => {
  it('F32: opens as the safetensors spec, with their tensors and norms whose 1 + w is the file’s', async () => {
    const { bytes, files } = await exported(tinyGemma3LlamaCppConfig());
    const st = await openModel(memoryModelFiles('g3', files));
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'g3.gguf'));
    // The stop ids: the tokenizer's EOS (<|im_end|>, 302) then the config's (ggufTokenizerEntries).
    expect(ck.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    const g = await openGguf(memoryBytes(bytes, 'g3.gguf'));
    const names = [...st.weights.tensors.keys()];
    expect([...ck.tensors.keys()].sort()).toEqual([...names].sort());
    for (const name of names) {
      const want = await st.weights.readF32(name);
      const got = await ck.readF32(name);
      if (!name.endsWith('norm.weight')) {
        expect(sameF32(got, want), name).toBeUndefined();
        continue;
      }
      // The multiplier weft computes from the norm read, fround(1 + w'), is the file's 1 + w bit
      // for bit, and the source's own (w' = stored - 1 is exact for every stored fround(1 + w)).
      const ggufName = [...g.tensors.keys()].find((n) => ck.tensors.get(name)?.info.name === n)!;
      expect(sameF32(normWeight(ck.spec, got), await raw(g, ggufName)), name).toBeUndefined();
      expect(sameF32(normWeight(ck.spec, got), normWeight(st.spec, want)), name).toBeUndefined();
    }
  });

  it('the CPU reference on the GGUF gives the safetensors’ logits past the sliding window', async () => {
    const { bytes, files } = await exported(tinyGemma3LlamaCppConfig());
    const st = await openModel(memoryModelFiles('g3', files));
    const gg = await openModel(ggufFiles(bytes));
    const runner = (m: typeof st) => async () =>
      new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)), { capacity: 128 });
    const want = (await runner(st)()).logitsFor(PROMPT);
    const got = (await runner(gg)()).logitsFor(PROMPT);
    expect(sameF32(got, want)).toBeUndefined();
    expect(greedy(await runner(gg)(), PROMPT, 8)).toEqual(greedy(await runner(st)(), PROMPT, 8));
  });
});

/** A GGUF's metadata as typed entries (numbers: integers u32, else f32; arrays i32). */
function entries(g: GgufFile): [string, GgufEntry][] {
  return [...g.metadata]
    .filter(([k]) => !k.startsWith('tokenizer.') || k.endsWith('_token_id'))
    .map(([k, v]): [string, GgufEntry] => {
      if (typeof v === 'string') return [k, { type: 'string', value: v }];
      if (Array.isArray(v)) return [k, { type: 'i32[]', value: v.map(Number) }];
      return [k, Number.isInteger(v) ? { type: 'u32', value: Number(v) } : { type: 'f32', value: Number(v) }];
    });
}

/** `bytes` with the metadata `key` set to `e` (or removed). */
async function withEntry(bytes: Uint8Array, key: string, e: GgufEntry | undefined): Promise<Uint8Array> {
  const g = await openGguf(memoryBytes(bytes, 'm.gguf'));
  const tensors: GgufWriteTensor[] = [];
  for (const info of g.tensors.values())
    tensors.push({
      name: info.name,
      ne: info.ne,
      type: info.type,
      data: await info.bytes.read(info.offset, info.byteLength),
    });
  const rest = entries(g).filter(([k]) => k !== key);
  return writeGguf(e === undefined ? rest : [...rest, [key, e]], tensors);
}

describe('gemma3 GGUF metadata', () => {
  it.each([
    [
      'gemma3.final_logit_softcapping',
      { type: 'f32', value: 30 },
      /gemma3.final_logit_softcapping = 30: logit soft-capping is not supported/,
    ],
    [
      'gemma3.attention.sliding_window_pattern',
      { type: 'i32[]', value: [1, 1, 1, 1, 1, 0] },
      /gemma3.attention.sliding_window_pattern = \[1,1,1,1,1,0\]: must be one period/,
    ],
    [
      'gemma3.attention.value_length',
      { type: 'u32', value: 16 },
      /gemma3.attention.value_length = 16: must equal key_length \(32\)/,
    ],
    [
      'gemma3.rope.scaling.type',
      { type: 'string', value: 'yarn' },
      /gemma3.rope.scaling.type = "yarn": unsupported RoPE scaling/,
    ],
  ] as const)('%s → %j: names the key and the value', async (key, entry, message) => {
    const { bytes } = await exported(tinyGemma3LlamaCppConfig());
    const g = await openGguf(memoryBytes(await withEntry(bytes, key, entry), 'bad.gguf'));
    const e = await ggufSpec(g).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as ModelFormatError).message).toMatch(message);
  });

  it('a period of 0 slides every layer; a zero window none', async () => {
    const { bytes } = await exported(tinyGemma3LlamaCppConfig());
    const every = await ggufSpec(
      await openGguf(
        memoryBytes(
          await withEntry(bytes, 'gemma3.attention.sliding_window_pattern', { type: 'u32', value: 0 }),
          'm.gguf',
        ),
      ),
    );
    expect(every.slidingLayers).toEqual(Array(6).fill(true));
    const none = await ggufSpec(
      await openGguf(
        memoryBytes(
          await withEntry(bytes, 'gemma3.attention.sliding_window', { type: 'u32', value: 0 }),
          'm.gguf',
        ),
      ),
    );
    expect(none.slidingWindow).toBeUndefined();
  });
});

describe('smollm3 GGUF', () => {
  it('writes llama’s keys and Q/K permutation under smollm3, and reads back the spec', async () => {
    const { bytes, files, spec, tensors } = await exported(tinySmolLM3LlamaCppConfig());
    const g = await openGguf(memoryBytes(bytes, 'smol.gguf'));
    // SmolLM3Model extends LlamaModel (conversion/llama.py): base keys, then rope.dimension_count.
    expect(g.metadata.get('general.architecture')).toBe('smollm3');
    expect(archKeys(g)).toContain('smollm3.rope.dimension_count');
    expect(g.metadata.get('smollm3.block_count')).toBe(4);
    // LlamaModel.permute with undo_permute: llama.cpp's smollm3 uses NORM (interleaved) RoPE.
    const p = 'model.layers.1.self_attn';
    const q = tensors.get(`${p}.q_proj.weight`)!.data;
    const k = tensors.get(`${p}.k_proj.weight`)!.data;
    expect(
      sameF32(await raw(g, 'blk.1.attn_q.weight'), permuteRows(q, 4 * 16, 64, 4, false)),
    ).toBeUndefined();
    expect(
      sameF32(await raw(g, 'blk.1.attn_k.weight'), permuteRows(k, 2 * 16, 64, 2, false)),
    ).toBeUndefined();
    expect(g.tensors.has('output.weight')).toBe(false);
    // n_no_rope_layer_step = 4 (src/models/smollm3.cpp): the fourth layer has no RoPE.
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'smol.gguf'));
    expect(ck.spec).toEqual({ ...spec, eosIds: [302, 2] });
    expect(ck.spec.noRopeLayers).toEqual([false, false, false, true]);
    const st = await openModel(memoryModelFiles('smol', files));
    const gg = await openModel(ggufFiles(bytes));
    const want = new ReferenceRunner(st.spec, mapWeights(await readAllF32(st.weights)), { capacity: 96 });
    const got = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(gg.weights)), { capacity: 96 });
    expect(sameF32(got.logitsFor(PROMPT), want.logitsFor(PROMPT))).toBeUndefined();
  });

  it.each([
    // tinyConfig's SmolLM3: two layers, the second without RoPE; llama.cpp rotates both.
    ['no_rope_layers', tinyConfig('smollm3'), /smollm3 no_rope_layers = \[1,0\]: .*every 4th layer/],
    [
      'Llama 3 RoPE scaling',
      {
        ...tinySmolLM3LlamaCppConfig(),
        rope_scaling: {
          rope_type: 'llama3',
          factor: 8,
          low_freq_factor: 1,
          high_freq_factor: 4,
          original_max_position_embeddings: 64,
        },
      },
      /smollm3 rope_scaling = .*reads no rope_freqs.weight/,
    ],
  ])('refuses %s llama.cpp cannot express', (_, config, message) => {
    const { spec, tensors } = source(config);
    const e = thrown(() => exportGguf(spec, tensors, 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(message);
  });
});

describe('linear RoPE scaling in any GGUF', () => {
  it('llama: written as rope.scaling.type / factor (no rope_freqs.weight) and read back', async () => {
    const config = { ...tinyConfig('llama'), rope_scaling: { rope_type: 'linear', factor: 4 } };
    const { spec, tensors } = source(config);
    const g = await openGguf(memoryBytes(exportGguf(spec, tensors, 'F32'), 'l.gguf'));
    expect(g.metadata.get('llama.rope.scaling.type')).toBe('linear');
    expect(g.metadata.get('llama.rope.scaling.factor')).toBe(4);
    expect(g.tensors.has('rope_freqs.weight')).toBe(false);
    expect((await ggufSpec(g)).rope).toEqual(spec.rope);
  });
});

describe('gemma3 and smollm3 GGUFs in the engine', () => {
  it.each([
    ['gemma3', tinyGemma3LlamaCppConfig()],
    ['smollm3', tinySmolLM3LlamaCppConfig()],
  ])(
    '%s Q8_0: the engine on the CPU gives the reference’s greedy ids on the dequantized file',
    async (_, config) => {
      const { bytes } = await exported(config, 'Q8_0', 7);
      const gg = await openModel(ggufFiles(bytes));
      expect(gg.packed).toEqual({ format: 'int8', rotation: 'none' });
      const ref = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(gg.weights)), { capacity: 128 });
      const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 128 });
      const ids: number[] = [];
      for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
      await engine.unload();
      expect(ids).toEqual(greedy(ref, PROMPT, 6));
    },
  );
});
