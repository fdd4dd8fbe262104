// LFM2 as llama.cpp's `lfm2` GGUF: `weft export-gguf` writes the names, metadata and stored
// layouts llama.cpp's converter writes, refuses what llama.cpp's lfm2 graph cannot run, and such a
// GGUF opens as the safetensors' spec with their tensors bit for bit, so the CPU reference gives the
// same logits. The expectations are written from llama.cpp's own files, cited at each
// (src/models/lfm2.cpp, src/llama-arch.cpp, conversion/lfm2.py, conversion/base.py,
// gguf-py/gguf/constants.py and tensor_mapping.py), not from weft's code.
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
import { configFromSpec, ggufSpec, specFromConfig } from '../../src/model/families/index.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import { configFixtureFiles, randomTensors, sameF32, tinyConfig } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 300);

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

function thrown(run: () => unknown): unknown {
  try {
    run();
  } catch (e) {
    return e;
  }
  return undefined;
}

describe('lfm2 GGUF export follows llama.cpp', () => {
  it('writes the metadata keys, tensor names, shapes and types llama.cpp reads', async () => {
    const { bytes, spec } = await exported(tinyConfig('lfm2'), 'Q8_0');
    const g = await openGguf(memoryBytes(bytes, 'lfm2.gguf'));
    // conversion/base.py `TextModel.set_gguf_parameters` (no key_length: LFM2 configs have no
    // head_dim) then conversion/lfm2.py `LFM2Model.set_gguf_parameters`: head_count_kv per layer,
    // 0 for conv layers; vocab_size; shortconv.l_cache; the adjusted feed_forward_length and
    // norm_eps replace the base's values where the base wrote them.
    expect(archKeys(g)).toEqual([
      'general.architecture',
      'lfm2.block_count',
      'lfm2.context_length',
      'lfm2.embedding_length',
      'lfm2.feed_forward_length',
      'lfm2.attention.head_count',
      'lfm2.attention.head_count_kv',
      'lfm2.rope.freq_base',
      'lfm2.attention.layer_norm_rms_epsilon',
      'lfm2.vocab_size',
      'lfm2.shortconv.l_cache',
    ]);
    const m = (k: string) => g.metadata.get(`lfm2.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('lfm2');
    expect(m('attention.head_count_kv')).toEqual([0, 0, 2, 0]);
    expect([m('block_count'), m('feed_forward_length'), m('shortconv.l_cache'), m('vocab_size')]).toEqual([
      4, 104, 3, 512,
    ]);
    expect([m('rope.freq_base'), m('attention.head_count')]).toEqual([1_000_000, 4]);
    expect(m('feed_forward_length')).toBe(spec.intermediate);

    // gguf-py MODEL_TENSORS[LFM2]; `model.embedding_norm` is TOKEN_EMBD_NORM (tensor_mapping.py),
    // read as the output norm (LLM_TENSOR_OUTPUT_NORM_LFM2 "token_embd_norm", src/llama-arch.cpp);
    // the conv weight squeezed to {l_cache, n_embd} (LFM2Model.modify_tensors, and
    // `llama_model_lfm2::load_arch_tensors`) and kept F32 (SHORTCONV_CONV, conversion/base.py).
    // Q8_0 falls back to F16 where 32 does not divide a row (104: ffn_down).
    const expected: [string, number[], number][] = [
      ['token_embd.weight', [64, 512], GgmlType.Q8_0],
      ['token_embd_norm.weight', [64], GgmlType.F32],
      ['blk.0.attn_norm.weight', [64], GgmlType.F32],
      ['blk.0.shortconv.in_proj.weight', [64, 192], GgmlType.Q8_0],
      ['blk.0.shortconv.conv.weight', [3, 64], GgmlType.F32],
      ['blk.0.shortconv.out_proj.weight', [64, 64], GgmlType.Q8_0],
      ['blk.0.ffn_norm.weight', [64], GgmlType.F32],
      ['blk.0.ffn_gate.weight', [64, 104], GgmlType.Q8_0],
      ['blk.0.ffn_up.weight', [64, 104], GgmlType.Q8_0],
      ['blk.0.ffn_down.weight', [104, 64], GgmlType.F16],
      ['blk.2.attn_norm.weight', [64], GgmlType.F32],
      ['blk.2.attn_q.weight', [64, 64], GgmlType.Q8_0],
      ['blk.2.attn_k.weight', [64, 32], GgmlType.Q8_0],
      ['blk.2.attn_v.weight', [64, 32], GgmlType.Q8_0],
      ['blk.2.attn_q_norm.weight', [16], GgmlType.F32],
      ['blk.2.attn_k_norm.weight', [16], GgmlType.F32],
      ['blk.2.attn_output.weight', [64, 64], GgmlType.Q8_0],
    ];
    for (const [name, ne, type] of expected) {
      const info = g.tensors.get(name);
      expect(info?.ne, name).toEqual(ne);
      expect(info?.type, name).toBe(type);
    }
    // Tied (no output.weight: the loader duplicates token_embd), no output_norm.weight.
    expect(g.tensors.has('output.weight')).toBe(false);
    expect(g.tensors.has('output_norm.weight')).toBe(false);
    // Per conv layer 3 + 5 (norms, MLP), per attention layer 7 + 4, the embedding and its norm.
    expect(g.tensors.size).toBe(3 * 8 + 11 + 2);
  });

  it('stores every value as it is: plain norms, Q and K unpermuted (NEOX RoPE), the conv squeezed', async () => {
    const { bytes, tensors } = await exported(tinyConfig('lfm2'));
    const g = await openGguf(memoryBytes(bytes, 'lfm2.gguf'));
    const hf = (name: string) => tensors.get(name)!.data;
    const stored: [string, string][] = [
      ['token_embd_norm.weight', 'model.embedding_norm.weight'],
      ['blk.1.attn_norm.weight', 'model.layers.1.operator_norm.weight'],
      ['blk.1.shortconv.in_proj.weight', 'model.layers.1.conv.in_proj.weight'],
      // [H, 1, 3] row-major is [H, 3]: ne {3, H} holds the same values in the same order.
      ['blk.1.shortconv.conv.weight', 'model.layers.1.conv.conv.weight'],
      ['blk.2.attn_q.weight', 'model.layers.2.self_attn.q_proj.weight'],
      ['blk.2.attn_k.weight', 'model.layers.2.self_attn.k_proj.weight'],
      ['blk.2.attn_q_norm.weight', 'model.layers.2.self_attn.q_layernorm.weight'],
      ['blk.2.attn_output.weight', 'model.layers.2.self_attn.out_proj.weight'],
      ['blk.3.ffn_gate.weight', 'model.layers.3.feed_forward.w1.weight'],
      ['blk.3.ffn_up.weight', 'model.layers.3.feed_forward.w3.weight'],
      ['blk.3.ffn_down.weight', 'model.layers.3.feed_forward.w2.weight'],
    ];
    for (const [name, hfName] of stored)
      expect(sameF32(await raw(g, name), hf(hfName)), name).toBeUndefined();
  });

  it.each([
    ['conv_bias', { conv_bias: true }, /lfm2 conv_bias = true: .*no biases/],
    ['head_dim', { head_dim: 8 }, /lfm2 head_dim = 8: .*num_attention_heads × head_dim = hidden_size \(64\)/],
    [
      'Llama 3 RoPE scaling',
      {
        rope_scaling: {
          rope_type: 'llama3',
          factor: 8,
          low_freq_factor: 1,
          high_freq_factor: 4,
          original_max_position_embeddings: 64,
        },
      },
      /lfm2 rope_scaling = .*reads no rope_freqs.weight/,
    ],
  ])('refuses %s, which llama.cpp’s lfm2 cannot run', (_, change, message) => {
    const spec = specFromConfig({ ...tinyConfig('lfm2'), ...change });
    const e = thrown(() => exportGguf(spec, randomTensors(spec, 5), 'F32'));
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(message);
  });
});

describe('lfm2 GGUF import', () => {
  it('F32: opens as the safetensors spec with their tensors, and the reference gives the same logits bit for bit', async () => {
    const { bytes, files } = await exported(tinyConfig('lfm2'));
    const st = await openModel(memoryModelFiles('lfm2', files));
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'lfm2.gguf'));
    // The stop ids: the tokenizer's EOS (<|im_end|>, 302) then the config's (ggufTokenizerEntries).
    expect(ck.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    const names = [...st.weights.tensors.keys()];
    expect([...ck.tensors.keys()].sort()).toEqual([...names].sort());
    for (const name of names)
      expect(sameF32(await ck.readF32(name), await st.weights.readF32(name)), name).toBeUndefined();
    const gg = await openModel(ggufFiles(bytes));
    const runner = async (m: typeof st) =>
      new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)), { capacity: 64 });
    const want = (await runner(st)).logitsFor(PROMPT);
    expect(sameF32((await runner(gg)).logitsFor(PROMPT), want)).toBeUndefined();
    // weft convert from the GGUF writes a config.json that reads back as the GGUF's spec.
    expect(specFromConfig(configFromSpec(ck.spec))).toEqual(ck.spec);
  });

  it('a model without conv layers reads back with every layer attention', async () => {
    const config = { ...tinyConfig('lfm2'), layer_types: Array(4).fill('full_attention') };
    const { bytes, spec } = await exported(config);
    const g = await openGguf(memoryBytes(bytes, 'lfm2.gguf'));
    expect(g.metadata.get('lfm2.attention.head_count_kv')).toEqual([2, 2, 2, 2]);
    const read = await ggufSpec(g);
    expect(read).toEqual({ ...spec, eosIds: [302, 2] });
    expect(read.shortConv).toBeUndefined();
  });

  it('Q8_0: the engine on the CPU gives the reference’s greedy ids on the dequantized file', async () => {
    const { bytes } = await exported(tinyConfig('lfm2'), 'Q8_0', 7);
    const gg = await openModel(ggufFiles(bytes));
    const ref = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(gg.weights)), { capacity: 64 });
    const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 64 });
    const ids: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
    await engine.unload();
    expect(ids).toEqual(greedy(ref, PROMPT, 6));
  });
});

/** A GGUF's metadata as typed entries (numbers: integers u32, else f32; arrays i32). */
function entries(g: GgufFile): [string, GgufEntry][] {
  return [...g.metadata]
    .filter(([k]) => !k.startsWith('tokenizer.') || k.endsWith('_token_id'))
    .map(([k, v]): [string, GgufEntry] => {
      if (typeof v === 'string') return [k, { type: 'string', value: v }];
      if (typeof v === 'boolean') return [k, { type: 'bool', value: v }];
      if (Array.isArray(v)) return [k, { type: 'i32[]', value: v.map(Number) }];
      return [k, Number.isInteger(v) ? { type: 'u32', value: Number(v) } : { type: 'f32', value: Number(v) }];
    });
}

/** `bytes` with the metadata `key` set to `e` (or removed), and `drop`/`add` tensors. */
async function edited(
  bytes: Uint8Array,
  key: string,
  e: GgufEntry | undefined,
  add: GgufWriteTensor[] = [],
): Promise<Uint8Array> {
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
  return writeGguf(e === undefined ? rest : [...rest, [key, e]], [...tensors, ...add]);
}

describe('lfm2 GGUF metadata', () => {
  const dense: GgufWriteTensor = {
    name: 'dense_2.weight',
    ne: [64, 8],
    type: GgmlType.F32,
    data: new Uint8Array(64 * 8 * 4),
  };
  it.each([
    [
      'lfm2.attention.head_count_kv',
      { type: 'i32[]', value: [0, 2, 1, 0] },
      [],
      /lfm2.attention.head_count_kv = \[0,2,1,0\]: must be one count or 4/,
    ],
    [
      'lfm2.attention.head_count_kv',
      { type: 'i32[]', value: [0, 2, 0] },
      [],
      /lfm2.attention.head_count_kv = \[0,2,0\]: must be one count or 4/,
    ],
    [
      'lfm2.attention.sliding_window',
      { type: 'u32', value: 32 },
      [],
      /lfm2.attention.sliding_window = 32: sliding-window LFM2 attention is not implemented/,
    ],
    [
      'lfm2.attention.causal',
      { type: 'bool', value: false },
      [],
      /lfm2.attention.causal = false: a non-causal LFM2/,
    ],
    [
      'lfm2.shortconv.l_cache',
      { type: 'u32', value: 1 },
      [],
      /lfm2.shortconv.l_cache = 1: must be at least 2/,
    ],
    ['lfm2.shortconv.l_cache', undefined, [], /lfm2.shortconv.l_cache = undefined: missing/],
    ['dense_2', undefined, [dense], /dense_2.weight = \[64,8\]: an LFM2 embedding model/],
  ] as const)('%s → %j: names the key and the value', async (key, entry, add, message) => {
    const { bytes } = await exported(tinyConfig('lfm2'));
    const g = await openGguf(memoryBytes(await edited(bytes, key, entry, [...add]), 'bad.gguf'));
    const e = await ggufSpec(g).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as ModelFormatError).message).toMatch(message);
    expect((e as ModelFormatError).file).toBe('bad.gguf');
  });

  it('one head_count_kv for every layer: all attention', async () => {
    const config = { ...tinyConfig('lfm2'), layer_types: Array(4).fill('full_attention') };
    const { bytes, spec } = await exported(config);
    const g = await openGguf(
      memoryBytes(await edited(bytes, 'lfm2.attention.head_count_kv', { type: 'u32', value: 2 }), 'm.gguf'),
    );
    expect((await ggufSpec(g)).layerKinds).toEqual(spec.layerKinds);
  });
});
