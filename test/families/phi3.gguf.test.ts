// Phi-3 as llama.cpp's `phi3` GGUF: `weft export-gguf` writes the names, metadata and fused tensors
// llama.cpp's converter writes (attn_qkv, ffn_up as gate | up, the LongRoPE factors as tensors and
// the attention factor as metadata), refuses what llama.cpp's phi3 loader cannot hold, and such a
// GGUF opens as the safetensors' spec with their tensors bit for bit (the fused ones split by the
// same view), so the CPU reference gives the same logits; `weft convert` writes the split tensors.
// The expectations are written from llama.cpp's own files, cited at each (src/models/phi3.cpp,
// src/llama-model.cpp, conversion/phi.py, gguf-py/gguf/constants.py and tensor_mapping.py).
import { describe, expect, it } from 'vitest';
import { convertModel, exportModelGguf } from '../../src/convert/convert.js';
import { exportGguf, type GgufExportType } from '../../src/convert/gguf-export.js';
import { createEngine } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { type GgufFile, openGguf } from '../../src/formats/gguf/header.js';
import { readGgufTensorF32 } from '../../src/formats/gguf/tensors.js';
import { type GgufEntry, type GgufWriteTensor, writeGguf } from '../../src/formats/gguf/write.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openSafetensors } from '../../src/formats/safetensors.js';
import { safetensorsReader } from '../../src/formats/weft-checkpoint.js';
import { configFromSpec, ggufSpec, specFromConfig } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { dequantize } from '../../src/quant/formats.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import { configFixtureFiles, randomTensors, sameF32, tinyConfig } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 300);

/** `config` as `weft export-gguf` writes it, with the source files and spec. */
async function exported(config: Record<string, unknown>, type: GgufExportType = 'F32', seed = 3) {
  const { files, spec } = configFixtureFiles(config, seed);
  const bytes = await exportModelGguf(memoryModelFiles('m', files), type);
  return { bytes, files, spec };
}

const ggufFiles = (bytes: Uint8Array) => memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));

/** A tensor of the fixture's safetensors file as stored (the fused ones fused). */
async function stored(files: Map<string, Uint8Array>, name: string): Promise<Float32Array> {
  const st = await openSafetensors(memoryBytes(files.get('model.safetensors')!, 'model.safetensors'));
  return safetensorsReader(st).readF32(name);
}

async function raw(g: GgufFile, name: string): Promise<Float32Array> {
  const info = g.tensors.get(name);
  if (info === undefined) throw new Error(`no tensor ${name}`);
  return readGgufTensorF32(info);
}

const archKeys = (g: GgufFile) => [...g.metadata.keys()].filter((k) => !k.startsWith('tokenizer.'));

const shortFactors = (tinyConfig('phi3').rope_scaling as { short_factor: number[] }).short_factor;

describe('phi3 GGUF export follows llama.cpp', () => {
  it('writes the metadata keys, tensor names, shapes and types llama.cpp reads', async () => {
    const { bytes, spec } = await exported(tinyConfig('phi3'), 'Q8_0');
    const g = await openGguf(memoryBytes(bytes, 'phi3.gguf'));
    // conversion/phi.py `Phi3MiniModel.set_gguf_parameters` (no base call, no key_length: llama.cpp
    // takes hidden / heads), then `generate_extra_tensors`' add_rope_scaling_attn_factors.
    expect(archKeys(g)).toEqual([
      'general.architecture',
      'phi3.context_length',
      'phi3.rope.scaling.original_context_length',
      'phi3.embedding_length',
      'phi3.feed_forward_length',
      'phi3.block_count',
      'phi3.attention.head_count',
      'phi3.attention.head_count_kv',
      'phi3.attention.layer_norm_rms_epsilon',
      'phi3.rope.dimension_count',
      'phi3.rope.freq_base',
      'phi3.attention.sliding_window',
      'phi3.rope.scaling.attn_factor',
    ]);
    const m = (k: string) => g.metadata.get(`phi3.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('phi3');
    // The whole context and the original one, past which llama.cpp takes the long factors; the
    // window (262144, longer than any context) was dropped from the spec, so 0 as the converter
    // writes for none.
    expect([m('context_length'), m('rope.scaling.original_context_length')]).toEqual([256, 64]);
    expect([m('embedding_length'), m('feed_forward_length'), m('block_count')]).toEqual([128, 96, 2]);
    expect([m('attention.head_count'), m('attention.head_count_kv')]).toEqual([4, 2]);
    // int(partial_rotary_factor · n_embd) // n_head = int(0.75 · 128) // 4.
    expect(m('rope.dimension_count')).toBe(24);
    expect([m('rope.freq_base'), m('attention.sliding_window')]).toEqual([10000, 0]);
    // √(1 + ln(256 / 64) / ln 64), as f32 (add_float32).
    expect(m('rope.scaling.attn_factor')).toBe(Math.fround(Math.sqrt(1 + Math.log(4) / Math.log(64))));
    expect(spec.rope.scaling).toMatchObject({ attentionFactor: m('rope.scaling.attn_factor') });

    // gguf-py MODEL_TENSORS[PHI3]: ROPE_FACTORS_LONG / _SHORT (global, {n_rot / 2}), ATTN_QKV
    // ({n_embd, n_embd + 2 · n_embd_gqa} in llama_model_phi3::load_arch_tensors), ATTN_OUT, FFN_NORM,
    // FFN_UP ({n_embd, 2 · n_ff}: tensor_mapping.py maps gate_up_proj to it), FFN_DOWN; the factors
    // F32 as generate_extra_tensors yields them, first.
    const expected: [string, number[], number][] = [
      ['rope_factors_long.weight', [12], GgmlType.F32],
      ['rope_factors_short.weight', [12], GgmlType.F32],
      ['token_embd.weight', [128, 512], GgmlType.Q8_0],
      ['blk.0.attn_norm.weight', [128], GgmlType.F32],
      ['blk.0.attn_qkv.weight', [128, 256], GgmlType.Q8_0],
      ['blk.0.attn_output.weight', [128, 128], GgmlType.Q8_0],
      ['blk.0.ffn_norm.weight', [128], GgmlType.F32],
      ['blk.0.ffn_up.weight', [128, 192], GgmlType.Q8_0],
      ['blk.0.ffn_down.weight', [96, 128], GgmlType.Q8_0],
      ['output_norm.weight', [128], GgmlType.F32],
    ];
    for (const [name, ne, type] of expected) {
      const info = g.tensors.get(name);
      expect(info?.ne, name).toEqual(ne);
      expect(info?.type, name).toBe(type);
    }
    expect([...g.tensors.keys()].slice(0, 2)).toEqual([
      'rope_factors_long.weight',
      'rope_factors_short.weight',
    ]);
    // Tied (Phi-4-mini style): no output.weight, the loader duplicates token_embd. Per layer 6.
    expect(g.tensors.has('output.weight')).toBe(false);
    expect(g.tensors.size).toBe(2 + 1 + 2 * 6 + 1);
  });

  it('stores the fused projections as the checkpoint has them, and the short and long factors', async () => {
    const { bytes, files } = await exported(tinyConfig('phi3'));
    const g = await openGguf(memoryBytes(bytes, 'phi3.gguf'));
    const pairs: [string, string][] = [
      ['blk.1.attn_qkv.weight', 'model.layers.1.self_attn.qkv_proj.weight'],
      ['blk.1.ffn_up.weight', 'model.layers.1.mlp.gate_up_proj.weight'],
      ['blk.1.attn_output.weight', 'model.layers.1.self_attn.o_proj.weight'],
      ['blk.1.ffn_norm.weight', 'model.layers.1.post_attention_layernorm.weight'],
      ['token_embd.weight', 'model.embed_tokens.weight'],
    ];
    for (const [name, hfName] of pairs)
      expect(sameF32(await raw(g, name), await stored(files, hfName)), name).toBeUndefined();
    const long = (tinyConfig('phi3').rope_scaling as { long_factor: number[] }).long_factor;
    expect(
      sameF32(await raw(g, 'rope_factors_short.weight'), Float32Array.from(shortFactors)),
    ).toBeUndefined();
    expect(sameF32(await raw(g, 'rope_factors_long.weight'), Float32Array.from(long))).toBeUndefined();
  });

  it('refuses a head width other than hidden / heads, which llama.cpp’s phi3 loader cannot hold', () => {
    const spec = specFromConfig({
      ...tinyConfig('phi3'),
      head_dim: 16,
      rope_scaling: null,
      partial_rotary_factor: 1,
    });
    let e: unknown;
    try {
      exportGguf(spec, randomTensors(spec, 5), 'F32');
    } catch (err) {
      e = err;
    }
    expect(e).toBeInstanceOf(InvalidInputError);
    expect((e as Error).message).toMatch(
      /phi3 head_dim = 16: .*num_attention_heads × head_dim = hidden_size \(128\)/,
    );
  });
});

describe('phi3 GGUF import', () => {
  it('F32: opens as the safetensors spec with their tensors, and the reference gives the same logits bit for bit', async () => {
    const { bytes, files } = await exported(tinyConfig('phi3'));
    const st = await openModel(memoryModelFiles('phi3', files));
    const gg = await openModel(ggufFiles(bytes));
    // The stop ids: the tokenizer's EOS (<|im_end|>, 302) then the config's (ggufTokenizerEntries).
    expect(gg.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    const names = [...st.weights.tensors.keys()];
    expect([...gg.weights.tensors.keys()].sort()).toEqual([...names].sort());
    for (const name of names)
      expect(sameF32(await gg.weights.readF32(name), await st.weights.readF32(name)), name).toBeUndefined();
    const runner = async (m: typeof st) =>
      new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)));
    const want = (await runner(st)).logitsFor(PROMPT);
    expect(sameF32((await runner(gg)).logitsFor(PROMPT), want)).toBeUndefined();
    // weft convert from the GGUF writes a config.json that reads back as the GGUF's spec.
    expect(specFromConfig(configFromSpec(gg.spec))).toEqual(gg.spec);
  });

  it('Q8_0: the split parts are served as the stored blocks, and the CPU engine gives the reference’s greedy ids', async () => {
    const { bytes } = await exported(tinyConfig('phi3'), 'Q8_0', 7);
    const gg = await openModel(ggufFiles(bytes));
    expect(gg.packed).toEqual({ format: 'int8', rotation: 'none' });
    const w = gg.weights;
    const k = 'model.layers.0.self_attn.k_proj.weight';
    expect(w.storedFormat?.(k)).toBe('int8');
    const packed = await w.readPacked!(k, { format: 'int8', rows: 64, cols: 128, rotation: 'none' });
    // Rows 128..191 of attn_qkv: their Q8_0 blocks as stored, whose values readF32 gives too.
    const g = await openGguf(memoryBytes(bytes, 'm.gguf'));
    const keys = (await raw(g, 'blk.0.attn_qkv.weight')).subarray(128 * 128, 192 * 128);
    expect(packed?.rows).toBe(64);
    expect(sameF32(dequantize(packed!), keys)).toBeUndefined();
    expect(sameF32(await w.readF32(k), keys)).toBeUndefined();
    const half = await w.readPacked!(
      k,
      { format: 'int8', rows: 64, cols: 128, rotation: 'none' },
      { row0: 32, rows: 32 },
    );
    expect(sameF32(dequantize(half!), keys.subarray(32 * 128))).toBeUndefined();
    // A padded want is packed from f32 by the caller.
    expect(await w.readPacked!(k, { format: 'int8', rows: 64, cols: 256, rotation: 'none' })).toBeUndefined();
    const ref = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(w)));
    const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 64 });
    const ids: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
    await engine.unload();
    expect(ids).toEqual(greedy(ref, PROMPT, 6));
  });

  it('weft convert writes the split tensors, and its folder reads back with the source’s spec', async () => {
    const { files } = configFixtureFiles(tinyConfig('phi3'), 3);
    const out = new Map<string, Uint8Array>();
    const chunks: Uint8Array[] = [];
    await convertModel(
      memoryModelFiles('phi3', files),
      { quant: 'int8' },
      { file: async (name, b) => void out.set(name, b), weights: async (c) => void chunks.push(c.slice()) },
    );
    const all = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
    chunks.reduce((at, c) => {
      all.set(c, at);
      return at + c.byteLength;
    }, 0);
    out.set('model.weft.safetensors', all);
    const converted = await openModel(memoryModelFiles('converted', out));
    expect(converted.format).toBe('weft-q');
    expect(converted.spec).toEqual((await openModel(memoryModelFiles('phi3', files))).spec);
    const names = [...converted.weights.tensors.keys()];
    expect(names).toContain('model.layers.0.self_attn.q_proj.weight');
    expect(names).toContain('model.layers.1.mlp.up_proj.weight');
    expect(names.some((n) => n.includes('qkv_proj') || n.includes('gate_up_proj'))).toBe(false);
  });
});

/** A GGUF's metadata as typed entries (numbers: integers u32, else f32). */
function entries(g: GgufFile): [string, GgufEntry][] {
  return [...g.metadata]
    .filter(([k]) => !k.startsWith('tokenizer.') || k.endsWith('_token_id'))
    .map(([k, v]): [string, GgufEntry] => {
      if (typeof v === 'string') return [k, { type: 'string', value: v }];
      if (Array.isArray(v)) return [k, { type: 'i32[]', value: v.map(Number) }];
      return [k, Number.isInteger(v) ? { type: 'u32', value: Number(v) } : { type: 'f32', value: Number(v) }];
    });
}

/** `bytes` with the metadata `key` set to `e` (or removed), tensors named in `drop` left out and `add` added. */
async function edited(
  bytes: Uint8Array,
  key: string,
  e: GgufEntry | undefined,
  drop: readonly string[] = [],
  add: readonly GgufWriteTensor[] = [],
): Promise<Uint8Array> {
  const g = await openGguf(memoryBytes(bytes, 'm.gguf'));
  const tensors: GgufWriteTensor[] = [];
  for (const info of g.tensors.values())
    if (!drop.includes(info.name))
      tensors.push({
        name: info.name,
        ne: info.ne,
        type: info.type,
        data: await info.bytes.read(info.offset, info.byteLength),
      });
  const rest = entries(g).filter(([k]) => k !== key);
  return writeGguf(e === undefined ? rest : [...rest, [key, e]], [...tensors, ...add]);
}

describe('phi3 GGUF metadata', () => {
  const factors = (n: number): GgufWriteTensor => ({
    name: 'rope_factors_short.weight',
    ne: [n],
    type: GgmlType.F32,
    data: new Uint8Array(new Float32Array(n).fill(1.5).buffer),
  });

  it('long factors give the whole context, without them it stops at the original one; a window shorter than it is kept', async () => {
    const { bytes, spec } = await exported(tinyConfig('phi3'));
    const scaling = spec.rope.scaling;
    if (scaling?.type !== 'longrope') throw new Error('expected LongRoPE');
    expect(spec.maxPositions).toBe(256);
    expect(scaling.long?.originalMaxPositions).toBe(64);
    const shortOnly = await edited(bytes, 'phi3.context_length', { type: 'u32', value: 256 }, [
      'rope_factors_long.weight',
    ]);
    const capped = await ggufSpec(await openGguf(memoryBytes(shortOnly, 'm.gguf')));
    expect(capped.maxPositions).toBe(64);
    expect(capped.rope.scaling).toEqual({ ...scaling, long: undefined });
    const windowed = await edited(bytes, 'phi3.attention.sliding_window', { type: 'u32', value: 16 });
    expect(await ggufSpec(await openGguf(memoryBytes(windowed, 'm.gguf')))).toEqual({
      ...spec,
      eosIds: [302, 2],
      slidingWindow: 16,
    });
  });

  it('without factors: plain RoPE over the rotary width, the whole context', async () => {
    const { bytes } = await exported(tinyConfig('phi3'));
    const plain = await edited(bytes, 'phi3.rope.scaling.attn_factor', undefined, [
      'rope_factors_short.weight',
      'rope_factors_long.weight',
    ]);
    const spec = await ggufSpec(await openGguf(memoryBytes(plain, 'm.gguf')));
    expect(spec.rope).toEqual({ theta: 10000, layout: 'half', rotaryDim: 24 });
    expect(spec.maxPositions).toBe(256);
  });

  it.each([
    [
      'short factors of the wrong count',
      'phi3.rope.freq_base',
      { type: 'f32', value: 10000 },
      ['rope_factors_short.weight'],
      [factors(11)],
      /rope_factors_short.weight = \[11\]: must hold 12 factors/,
    ],
    [
      'long factors of the wrong count',
      'phi3.rope.freq_base',
      { type: 'f32', value: 10000 },
      ['rope_factors_long.weight'],
      [{ ...factors(11), name: 'rope_factors_long.weight' }],
      /rope_factors_long.weight = \[11\]: must hold 12 factors/,
    ],
    [
      'long factors alone',
      'phi3.rope.freq_base',
      { type: 'f32', value: 10000 },
      ['rope_factors_short.weight'],
      [],
      /rope_factors_long.weight = \[12\]: long RoPE factors without rope_factors_short.weight/,
    ],
    [
      'an attention factor without factors',
      'phi3.rope.freq_base',
      { type: 'f32', value: 10000 },
      ['rope_factors_short.weight', 'rope_factors_long.weight'],
      [],
      /phi3.rope.scaling.attn_factor = 1.1\d*: an attention factor without/,
    ],
    [
      'an odd rotary width',
      'phi3.rope.dimension_count',
      { type: 'u32', value: 23 },
      [],
      [],
      /phi3.rope.dimension_count = 23: must be even/,
    ],
  ] as const)('%s: names the key and the value', async (_, key, entry, drop, add, message) => {
    const { bytes } = await exported(tinyConfig('phi3'));
    const g = await openGguf(memoryBytes(await edited(bytes, key, entry, drop, add), 'bad.gguf'));
    const e = await ggufSpec(g).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as ModelFormatError).message).toMatch(message);
    expect((e as ModelFormatError).file).toBe('bad.gguf');
  });
});
