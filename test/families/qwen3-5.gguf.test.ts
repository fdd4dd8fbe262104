// Qwen3.5 as llama.cpp's `qwen35` GGUF: `weft export-gguf` writes the names, metadata and value
// transforms llama.cpp's converter writes, and a qwen35 GGUF opens as the qwen3_5 spec with the
// Hugging Face tensors (the transforms undone), so the CPU reference gives the safetensors' logits.
// The expectations are written from llama.cpp's own files, cited at each, not from weft's code.
import { describe, expect, it } from 'vitest';
import { convertModel, exportModelGguf } from '../../src/convert/convert.js';
import type { GgufExportType } from '../../src/convert/gguf-export.js';
import { createEngine } from '../../src/engine/create.js';
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
import { deltaNetWidths } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import { qwen35FixtureFiles, sameF32 } from '../fixtures/write.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = [5, 17, 99, 3, 250, 11];

/** The fixture (tinyQwen35TextConfig: 4 layers, the third full attention) as `weft export-gguf` writes it. */
async function exported(type: GgufExportType, seed = 3) {
  const { files, spec, tensors } = qwen35FixtureFiles(seed);
  const bytes = await exportModelGguf(memoryModelFiles('q35', files), type);
  return { bytes, files, spec, tensors: new Map(tensors.map((t) => [t.name, t])) };
}

const ggufFiles = (bytes: Uint8Array) => memoryModelFiles('q35.gguf', new Map([['q35.gguf', bytes]]));

async function raw(g: GgufFile, name: string): Promise<Float32Array> {
  const info = g.tensors.get(name);
  if (info === undefined) throw new Error(`no tensor ${name}`);
  return readGgufTensorF32(info);
}

/**
 * llama.cpp's `_reorder_v_heads` (conversion/qwen.py, `_LinearAttentionVReorderBase`), written from
 * its torch ops: the `heads · d` entries from `start` along an axis, viewed as [Hk, r, d], have
 * their first two axes swapped ([r, Hk, d]): stored entry (j·Hk + g)·d + e is HF entry (g·r + j)·d + e.
 * Applied to rows (`cols` values each) or, with `byColumn`, to the columns of each row.
 */
function reorderV(
  hf: Float32Array,
  cols: number,
  start: number,
  hk: number,
  r: number,
  d: number,
  byColumn = false,
): Float32Array {
  const out = hf.slice();
  const rows = hf.length / cols;
  for (let g = 0; g < hk; g++)
    for (let j = 0; j < r; j++)
      for (let e = 0; e < d; e++) {
        const to = start + (j * hk + g) * d + e;
        const from = start + (g * r + j) * d + e;
        if (byColumn) for (let row = 0; row < rows; row++) out[row * cols + to] = hf[row * cols + from]!;
        else out.set(hf.subarray(from * cols, (from + 1) * cols), to * cols);
      }
  return out;
}

describe('qwen35 GGUF export follows llama.cpp', () => {
  it('writes the metadata keys, tensor names and shapes llama.cpp reads', async () => {
    const { bytes, spec } = await exported('Q8_0');
    const g = await openGguf(memoryBytes(bytes, 'q35.gguf'));
    const arch = [...g.metadata.keys()].filter((k) => !k.startsWith('tokenizer.'));
    // The keys of conversion/base.py `TextModel.set_gguf_parameters` (block_count … key/value
    // length), conversion/qwen.py `Qwen3NextModel.set_gguf_parameters` (ssm.*, full_attention_interval,
    // rope.dimension_count) and `_Qwen35MRopeMixin` (rope.dimension_sections); src/models/qwen35.cpp
    // `load_arch_hparams` requires the ssm.* keys and rope.dimension_sections.
    expect(arch).toEqual([
      'general.architecture',
      'qwen35.block_count',
      'qwen35.context_length',
      'qwen35.embedding_length',
      'qwen35.feed_forward_length',
      'qwen35.attention.head_count',
      'qwen35.attention.head_count_kv',
      'qwen35.rope.freq_base',
      'qwen35.attention.layer_norm_rms_epsilon',
      'qwen35.attention.key_length',
      'qwen35.attention.value_length',
      'qwen35.ssm.conv_kernel',
      'qwen35.ssm.state_size',
      'qwen35.ssm.group_count',
      'qwen35.ssm.time_step_rank',
      'qwen35.ssm.inner_size',
      'qwen35.full_attention_interval',
      'qwen35.rope.dimension_count',
      'qwen35.rope.dimension_sections',
    ]);
    const m = (k: string) => g.metadata.get(`qwen35.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('qwen35');
    // state_size = linear_key_head_dim, group_count = linear_num_key_heads, time_step_rank =
    // linear_num_value_heads, inner_size = value head dim · value heads (Qwen3NextModel).
    expect([m('ssm.conv_kernel'), m('ssm.state_size'), m('ssm.group_count')]).toEqual([4, 16, 2]);
    expect([m('ssm.time_step_rank'), m('ssm.inner_size')]).toEqual([4, 12 * 4]);
    // Layer i is recurrent unless (i + 1) % interval == 0 (qwen35.cpp): the fixture's third layer.
    expect(m('full_attention_interval')).toBe(3);
    // rope.dimension_count = int(head_dim · partial_rotary_factor); sections per pair j mod 3.
    expect([m('attention.key_length'), m('rope.dimension_count')]).toEqual([32, 8]);
    expect(m('rope.dimension_sections')).toEqual([2, 1, 1, 0]);
    expect(m('block_count')).toBe(spec.layers);

    // Tensor names from gguf-py/gguf/constants.py (MODEL_TENSORS[QWEN35], TENSOR_NAMES) and their
    // GGML shapes (ne, fastest first) from `load_arch_tensors` in src/models/qwen35.cpp; types
    // from conversion/base.py `prepare_tensors` (vectors, *_norm, non-.weight names and SSM_CONV1D F32).
    const { convChannels } = deltaNetWidths(spec);
    const expected: [string, number[], number][] = [
      ['token_embd.weight', [64, 512], GgmlType.Q8_0],
      ['output_norm.weight', [64], GgmlType.F32],
      ['blk.0.attn_norm.weight', [64], GgmlType.F32],
      ['blk.0.post_attention_norm.weight', [64], GgmlType.F32],
      ['blk.0.attn_qkv.weight', [64, convChannels], GgmlType.Q8_0],
      ['blk.0.attn_gate.weight', [64, 48], GgmlType.Q8_0],
      ['blk.0.ssm_conv1d.weight', [4, convChannels], GgmlType.F32],
      ['blk.0.ssm_dt.bias', [4], GgmlType.F32],
      ['blk.0.ssm_a', [4], GgmlType.F32],
      ['blk.0.ssm_beta.weight', [64, 4], GgmlType.Q8_0],
      ['blk.0.ssm_alpha.weight', [64, 4], GgmlType.Q8_0],
      ['blk.0.ssm_norm.weight', [12], GgmlType.F32],
      // Rows of 48 are no whole Q8_0 blocks: the converter falls back to F16 (QuantError).
      ['blk.0.ssm_out.weight', [48, 64], GgmlType.F16],
      ['blk.0.ffn_gate.weight', [64, 96], GgmlType.Q8_0],
      ['blk.0.ffn_down.weight', [96, 64], GgmlType.Q8_0],
      // Full attention: q holds each head's query then gate rows (n_embd_head_k · n_head · 2).
      ['blk.2.attn_q.weight', [64, 2 * 4 * 32], GgmlType.Q8_0],
      ['blk.2.attn_k.weight', [64, 2 * 32], GgmlType.Q8_0],
      ['blk.2.attn_v.weight', [64, 2 * 32], GgmlType.Q8_0],
      ['blk.2.attn_output.weight', [4 * 32, 64], GgmlType.Q8_0],
      ['blk.2.attn_q_norm.weight', [32], GgmlType.F32],
      ['blk.2.attn_k_norm.weight', [32], GgmlType.F32],
      ['blk.2.post_attention_norm.weight', [64], GgmlType.F32],
    ];
    for (const [name, ne, type] of expected) {
      const info = g.tensors.get(name);
      expect(info?.ne, name).toEqual(ne);
      expect(info?.type, name).toBe(type);
    }
    // 9 tensors per linear layer (qkv, gate, beta, alpha, conv1d, dt, a, ssm_norm, ssm_out), 6 per
    // attention layer (q, k, v, o, q_norm, k_norm), 5 in every layer (2 norms, 3 MLP), and the
    // embedding and output norm; the head is tied (no output.weight), no MTP block (blk.4).
    const names = [...g.tensors.keys()];
    expect(names.length).toBe(3 * (9 + 5) + (6 + 5) + 2);
    expect(names.some((n) => n === 'output.weight' || n.startsWith('blk.4.'))).toBe(false);
    expect(names.some((n) => n.includes('ffn_norm'))).toBe(false);
  });

  it('stores the values as llama.cpp’s converter does', async () => {
    const { bytes, spec, tensors } = await exported('F32');
    const g = await openGguf(memoryBytes(bytes, 'q35.gguf'));
    const hf = (name: string) => tensors.get(name)!.data;
    const la = spec.deltaNet!;
    const hk = la.keyHeads;
    const r = la.valueHeads / hk;
    const { keyWidth, convChannels } = deltaNetWidths(spec);
    const p = 'model.layers.0.linear_attn';
    // Qwen3NextModel.modify_tensors: A_log → -exp(A_log); every norm.weight but
    // linear_attn.norm.weight → w + 1; conv1d squeezed; then _LinearAttentionVReorderBase tiles
    // the value heads.
    const expectStored = async (name: string, want: Float32Array) =>
      expect(sameF32(await raw(g, name), want), name).toBeUndefined();
    await expectStored(
      'blk.0.ssm_a',
      reorderV(
        hf(`${p}.A_log`).map((x) => -Math.exp(x)),
        1,
        0,
        hk,
        r,
        1,
      ),
    );
    await expectStored('blk.0.ssm_dt.bias', reorderV(hf(`${p}.dt_bias`), 1, 0, hk, r, 1));
    await expectStored(
      'blk.0.attn_qkv.weight',
      reorderV(hf(`${p}.in_proj_qkv.weight`), 64, 2 * keyWidth, hk, r, la.valueDim),
    );
    await expectStored(
      'blk.0.attn_gate.weight',
      reorderV(hf(`${p}.in_proj_z.weight`), 64, 0, hk, r, la.valueDim),
    );
    await expectStored('blk.0.ssm_beta.weight', reorderV(hf(`${p}.in_proj_b.weight`), 64, 0, hk, r, 1));
    await expectStored('blk.0.ssm_alpha.weight', reorderV(hf(`${p}.in_proj_a.weight`), 64, 0, hk, r, 1));
    await expectStored(
      'blk.0.ssm_conv1d.weight',
      reorderV(hf(`${p}.conv1d.weight`), 4, 2 * keyWidth, hk, r, la.valueDim),
    );
    await expectStored(
      'blk.0.ssm_out.weight',
      reorderV(hf(`${p}.out_proj.weight`), la.valueHeads * la.valueDim, 0, hk, r, la.valueDim, true),
    );
    await expectStored('blk.0.ssm_norm.weight', hf(`${p}.norm.weight`));
    await expectStored(
      'blk.0.attn_norm.weight',
      hf('model.layers.0.input_layernorm.weight').map((x) => x + 1),
    );
    await expectStored(
      'blk.3.post_attention_norm.weight',
      hf('model.layers.3.post_attention_layernorm.weight').map((x) => x + 1),
    );
    await expectStored(
      'blk.2.attn_q_norm.weight',
      hf('model.layers.2.self_attn.q_norm.weight').map((x) => x + 1),
    );
    await expectStored(
      'blk.2.attn_k_norm.weight',
      hf('model.layers.2.self_attn.k_norm.weight').map((x) => x + 1),
    );
    await expectStored(
      'output_norm.weight',
      hf('model.norm.weight').map((x) => x + 1),
    );
    // q_proj (query | gate per head) and the MLP are stored as they are.
    await expectStored('blk.2.attn_q.weight', hf('model.layers.2.self_attn.q_proj.weight'));
    await expectStored('blk.1.ffn_up.weight', hf('model.layers.1.mlp.up_proj.weight'));
    expect(convChannels).toBe(2 * keyWidth + la.valueHeads * la.valueDim);
    expect(r).toBe(2); // the fixture's value heads do move
  });
});

describe('qwen35 GGUF import', () => {
  it('F32: opens as the safetensors spec with their tensors (A_log as the file holds it)', async () => {
    const { bytes, files } = await exported('F32');
    const st = await openModel(memoryModelFiles('q35', files));
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'q35.gguf'));
    // The GGUF's stop ids are the tokenizer's EOS (<|im_end|>, 302) then the config's, as
    // `weft export-gguf` writes them (ggufTokenizerEntries).
    expect(ck.spec).toEqual({ ...st.spec, eosIds: [302, 2] });
    // The MTP layer (mtp.*) is not exported (see the export test).
    const names = [...st.weights.tensors.keys()].filter((n) => !n.startsWith('mtp.'));
    expect([...ck.tensors.keys()].sort()).toEqual(names.sort());
    for (const name of names) {
      const { shape } = st.weights.tensors.get(name)!;
      expect(ck.tensors.get(name)!.shape, name).toEqual(shape);
      const want = await st.weights.readF32(name);
      const got = await ck.readF32(name);
      // ssm_a = -exp(A_log) in f32 loses what exp's rounding drops near 1: log(-ssm_a) is the
      // A_log the file holds, within one f32 rounding of exp. Every other tensor is exact (the
      // norms' 1 + w is exact for the fixture's w in [0.9, 1.1]).
      const held = name.endsWith('A_log') ? want.map((x) => Math.log(Math.fround(Math.exp(x)))) : want;
      expect(sameF32(got, held), name).toBeUndefined();
      if (name.endsWith('A_log'))
        for (const [i, x] of got.entries()) expect(Math.abs(x - want[i]!)).toBeLessThan(1e-7);
    }
  });

  it('the CPU reference on the GGUF gives the safetensors’ logits', async () => {
    const { bytes, files } = await exported('F32');
    const st = await openModel(memoryModelFiles('q35', files));
    const gg = await openModel(ggufFiles(bytes));
    const stWeights = await readAllF32(st.weights);
    const ggWeights = await readAllF32(gg.weights);
    const want = new ReferenceRunner(st.spec, mapWeights(stWeights), { capacity: 64 }).logitsFor(PROMPT);
    const got = new ReferenceRunner(gg.spec, mapWeights(ggWeights), { capacity: 64 }).logitsFor(PROMPT);
    let worst = 0;
    for (const [i, x] of got.entries()) worst = Math.max(worst, Math.abs(x - want[i]!));
    expect(worst).toBeLessThan(1e-4);
    // The only difference is A_log's rounding: with the file's A_log the logits are bit-identical.
    const held = { ...stWeights };
    for (const name of Object.keys(held).filter((n) => n.endsWith('A_log')))
      held[name] = { ...held[name]!, data: ggWeights[name]!.data };
    const same = new ReferenceRunner(st.spec, mapWeights(held), { capacity: 64 }).logitsFor(PROMPT);
    expect(sameF32(got, same)).toBeUndefined();
    expect(greedy(new ReferenceRunner(gg.spec, mapWeights(ggWeights), { capacity: 64 }), PROMPT, 6)).toEqual(
      greedy(new ReferenceRunner(st.spec, mapWeights(stWeights), { capacity: 64 }), PROMPT, 6),
    );
  });

  it.each(['Q8_0', 'Q4_0', 'F16'] as const)(
    '%s: row reads and stored matrices agree with the whole read',
    async (type) => {
      const { bytes } = await exported(type, 5);
      const ck = await openGgufCheckpoint(memoryBytes(bytes, 'q35.gguf'));
      const p = 'model.layers.1.linear_attn';
      for (const name of [
        `${p}.in_proj_qkv.weight`,
        `${p}.in_proj_z.weight`,
        `${p}.in_proj_a.weight`,
        `${p}.out_proj.weight`,
        'model.layers.2.self_attn.q_proj.weight',
      ]) {
        const [rows = 0, cols = 0] = ck.tensors.get(name)!.shape;
        const whole = await ck.readF32(name);
        const ranges = [
          [0, rows],
          [0, 1],
          [3, 7],
          [rows - 5, 5],
          [Math.floor(rows / 2), 1],
        ].filter(([row0 = 0, n = 0]) => row0 >= 0 && row0 + n <= rows);
        for (const [row0 = 0, n = 0] of ranges) {
          const got = await ck.readRowsF32(name, row0, n);
          expect(
            sameF32(got, whole.subarray(row0 * cols, (row0 + n) * cols)),
            `${name} [${row0}, +${n})`,
          ).toBeUndefined();
        }
        const format = ck.storedFormat(name);
        if (format === undefined) continue;
        const packed = await ck.readPacked(name, { format, rows, cols, rotation: 'none' });
        // out_proj's columns move, so its stored blocks are not the HF matrix's.
        expect(packed === undefined, name).toBe(name.endsWith('out_proj.weight'));
      }
    },
  );

  it('Q8_0: the engine on the CPU gives the reference’s greedy ids on the dequantized file', async () => {
    const { bytes } = await exported('Q8_0', 7);
    const gg = await openModel(ggufFiles(bytes));
    expect(gg.packed).toEqual({ format: 'int8', rotation: 'none' });
    const ref = new ReferenceRunner(gg.spec, mapWeights(await readAllF32(gg.weights)), { capacity: 64 });
    const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 64 });
    const ids: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
    await engine.unload();
    expect(ids).toEqual(greedy(ref, PROMPT, 6));
  });

  it('weft convert of a qwen35 GGUF writes a config.json that reads back as its spec', async () => {
    const { bytes } = await exported('Q8_0');
    const small = new Map<string, Uint8Array>();
    let weights = 0;
    await convertModel(
      ggufFiles(bytes),
      { quant: 'int8' },
      {
        file: async (name, b) => void small.set(name, b),
        weights: async (chunk) => {
          weights += chunk.byteLength;
        },
      },
    );
    const config = JSON.parse(new TextDecoder().decode(small.get('config.json')));
    expect(specFromConfig(config)).toEqual((await openModel(ggufFiles(bytes))).spec);
    expect(weights).toBeGreaterThan(0);
  });
});

/** A qwen35 GGUF's metadata as typed entries (numbers: integers u32, else f32; arrays i32). */
function entries(g: GgufFile): [string, GgufEntry][] {
  return [...g.metadata]
    .filter(([k]) => !k.startsWith('tokenizer.') || k.endsWith('_token_id'))
    .map(([k, v]): [string, GgufEntry] => {
      if (typeof v === 'string') return [k, { type: 'string', value: v }];
      if (Array.isArray(v)) return [k, { type: 'i32[]', value: v.map(Number) }];
      return [k, Number.isInteger(v) ? { type: 'u32', value: Number(v) } : { type: 'f32', value: Number(v) }];
    });
}

/** `bytes` rewritten with its metadata edited by `edit` and `more` tensors added. */
async function rewritten(
  bytes: Uint8Array,
  edit: (e: [string, GgufEntry][]) => [string, GgufEntry][],
  more: GgufWriteTensor[] = [],
): Promise<Uint8Array> {
  const g = await openGguf(memoryBytes(bytes, 'q35.gguf'));
  const tensors: GgufWriteTensor[] = [];
  for (const info of g.tensors.values())
    tensors.push({
      name: info.name,
      ne: info.ne,
      type: info.type,
      data: await info.bytes.read(info.offset, info.byteLength),
    });
  return writeGguf(edit(entries(g)), [...tensors, ...more]);
}

const set =
  (key: string, e: GgufEntry | undefined) =>
  (list: [string, GgufEntry][]): [string, GgufEntry][] => {
    const rest = list.filter(([k]) => k !== key);
    return e === undefined ? rest : [...rest, [key, e]];
  };

describe('qwen35 GGUF metadata', () => {
  it('ignores the MTP block past block_count - nextn_predict_layers', async () => {
    const { bytes } = await exported('F32');
    const f32 = (n: number) => new Uint8Array(new Float32Array(n).buffer);
    const mtp: GgufWriteTensor[] = [
      { name: 'blk.4.attn_norm.weight', ne: [64], type: GgmlType.F32, data: f32(64) },
      { name: 'blk.4.attn_q.weight', ne: [64, 256], type: GgmlType.F32, data: f32(64 * 256) },
      { name: 'blk.4.nextn.eh_proj.weight', ne: [128, 64], type: GgmlType.F32, data: f32(128 * 64) },
    ];
    const withMtp = await rewritten(
      bytes,
      (e) =>
        set('qwen35.nextn_predict_layers', { type: 'u32', value: 1 })(
          set('qwen35.block_count', { type: 'u32', value: 5 })(e),
        ),
      mtp,
    );
    const plain = await openGgufCheckpoint(memoryBytes(bytes, 'q35.gguf'));
    const ck = await openGgufCheckpoint(memoryBytes(withMtp, 'mtp.gguf'));
    expect(ck.spec).toEqual(plain.spec);
    expect([...ck.tensors.keys()]).toEqual([...plain.tensors.keys()]);
  });

  it.each([
    [
      'qwen35.ssm.time_step_rank',
      { type: 'u32', value: 3 },
      /qwen35.ssm.time_step_rank = 3: must be a multiple of ssm.group_count \(2\)/,
    ],
    [
      'qwen35.ssm.inner_size',
      { type: 'u32', value: 50 },
      /qwen35.ssm.inner_size = 50: must be a multiple of ssm.time_step_rank \(4\)/,
    ],
    ['qwen35.ssm.state_size', undefined, /qwen35.ssm.state_size = undefined: missing/],
    ['qwen35.ssm.conv_kernel', { type: 'u32', value: 1 }, /qwen35.ssm.conv_kernel = 1: must be at least 2/],
    [
      'qwen35.rope.dimension_count',
      { type: 'u32', value: 7 },
      /qwen35.rope.dimension_count = 7: must be even/,
    ],
    [
      'qwen35.rope.dimension_count',
      { type: 'u32', value: 40 },
      /qwen35.rope.dimension_count = 40: must be even and at most key_length \(32\)/,
    ],
    ['qwen35.rope.dimension_sections', undefined, /qwen35.rope.dimension_sections = undefined: missing/],
    // One section of 1 sends every pair to the temporal position (fine); [0, 1, 1] sends pair 0
    // (sector 0, residue 0, past 3 · 0) to the fourth.
    [
      'qwen35.rope.dimension_sections',
      { type: 'i32[]', value: [0, 1, 1] },
      /qwen35.rope.dimension_sections = \[0,1,1\]: rotary pair 0 falls outside/,
    ],
    [
      'qwen35.rope.dimension_sections',
      { type: 'i32[]', value: [0, 0, 0, 0] },
      /qwen35.rope.dimension_sections = \[0,0,0,0\]: must be up to 4/,
    ],
    [
      'qwen35.nextn_predict_layers',
      { type: 'u32', value: 4 },
      /qwen35.nextn_predict_layers = 4: must be below block_count \(4\)/,
    ],
    [
      'qwen35.attention.value_length',
      { type: 'u32', value: 16 },
      /qwen35.attention.value_length = 16: must equal key_length \(32\)/,
    ],
    [
      'qwen35.full_attention_interval',
      { type: 'u32', value: 0 },
      /qwen35.full_attention_interval = 0: must be a positive integer/,
    ],
    [
      'qwen35.attention.recurrent_layers',
      { type: 'i32[]', value: [1, 1, 0] },
      /qwen35.attention.recurrent_layers = \[1,1,0\]: must be 4 booleans/,
    ],
    [
      'general.architecture',
      { type: 'string', value: 'qwen3next' },
      /general.architecture = "qwen3next": unsupported architecture/,
    ],
  ] as const)('%s → %j: names the key and the value', async (key, entry, message) => {
    const { bytes } = await exported('F32');
    const bad = await rewritten(bytes, set(key, entry as GgufEntry | undefined));
    const g = await openGguf(memoryBytes(bad, 'bad.gguf'));
    const e = await ggufSpec(g).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as ModelFormatError).message).toMatch(message);
  });

  it('reads the layer kinds from attention.recurrent_layers when present', async () => {
    const { bytes } = await exported('F32');
    const bools = [true, false, true, true];
    const g = await openGguf(memoryBytes(await rewritten(bytes, (e) => e), 'q35.gguf'));
    // writeGguf has no bool arrays: patch the entry by hand through the spec reader's input.
    const metadata = new Map(g.metadata);
    metadata.set('qwen35.attention.recurrent_layers', bools);
    const spec = await ggufSpec({ ...g, metadata });
    expect(spec.layerKinds).toEqual(['deltanet', 'attention', 'deltanet', 'deltanet']);
  });
});
