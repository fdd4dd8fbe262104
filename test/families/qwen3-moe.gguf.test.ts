// Qwen3-MoE as llama.cpp's `qwen3moe` GGUF (src/models/qwen3moe.cpp, conversion/qwen.py): the
// experts as 3-D stacks `ffn_{gate,up,down}_exps`, the router `ffn_gate_inp` (kept F32), the
// `expert_*` keys; read back as the same spec and, per expert, the same logits.
import { describe, expect, it } from 'vitest';
import { exportGguf } from '../../src/convert/gguf-export.js';
import { InvalidInputError } from '../../src/errors.js';
import type { TensorReader } from '../../src/formats/weft-checkpoint.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { splitFusedView } from '../../src/model/fused-view.js';
import { referenceTensors } from '../../src/model/quantized.js';
import { readAllF32 } from '../../src/model/weights.js';
import type { QuantizedMatrix, WeightFormat } from '../../src/quant/formats.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import { storedWeftFormat } from '../../src/quant/ggml-repack.js';
import { randomTensors, sameF32, tinyConfig } from '../fixtures/write.js';
import { ggufRoundTrip } from '../helpers/gguf-round-trip.js';
import {
  expertParts,
  MOE_GGUF_MIXES,
  MOE_GGUF_PACKED,
  type MoeGgufMix,
  moeGguf,
} from '../helpers/moe-gguf.js';

/** llama.cpp's qwen3moe runs a renormalised mixture on every layer. */
const LLAMA_CPP_CONFIG = { ...tinyConfig('qwen3_moe'), mlp_only_layers: [] };

describe('qwen3moe GGUF both ways', () => {
  it('writes the experts as stacks and the expert keys, and reads back the same spec and logits', async () => {
    const r = await ggufRoundTrip(LLAMA_CPP_CONFIG, 'F32');
    expect(r.back).toEqual(r.spec);
    expect(r.backLogits).toEqual(r.logits);
    const m = (k: string) => r.file.metadata.get(`qwen3moe.${k}`);
    expect(r.file.metadata.get('general.architecture')).toBe('qwen3moe');
    expect([m('expert_count'), m('expert_used_count'), m('expert_feed_forward_length')]).toEqual([6, 2, 48]);
    const t = (n: string) => r.file.tensors.get(n);
    expect(t('blk.2.ffn_gate_exps.weight')?.ne).toEqual([64, 48, 6]);
    expect(t('blk.2.ffn_up_exps.weight')?.ne).toEqual([64, 48, 6]);
    expect(t('blk.2.ffn_down_exps.weight')?.ne).toEqual([48, 64, 6]);
    expect(t('blk.2.ffn_gate_inp.weight')?.ne).toEqual([64, 6]);
    for (const [name, w] of [['model.layers.1.mlp.experts.4.down_proj.weight', 0]] as const)
      expect(r.weights.get(name).data).toEqual(
        r.tensors.find((x) => x.name === name)!.data.map((v) => v + w),
      );
  });

  it('Q8_0 keeps the router F32 and stays close', async () => {
    const r = await ggufRoundTrip(LLAMA_CPP_CONFIG, 'Q8_0');
    expect(r.file.tensors.get('blk.0.ffn_gate_inp.weight')?.type).toBe(GgmlType.F32);
    expect(r.file.tensors.get('blk.0.ffn_gate_exps.weight')?.type).toBe(GgmlType.Q8_0);
    expect(r.back).toEqual(r.spec);
  });

  it.each([
    [
      { mlp_only_layers: [1] },
      /mlp_only_layers = \[1\]: llama.cpp’s qwen3moe graph runs a mixture on every layer/,
    ],
    [{ mlp_only_layers: [], norm_topk_prob: false }, /norm_topk_prob = false/],
  ])('refuses %j', (change, message) => {
    const spec = specFromConfig({ ...tinyConfig('qwen3_moe'), ...change });
    expect(() => exportGguf(spec, randomTensors(spec), 'F32')).toThrow(InvalidInputError);
    expect(() => exportGguf(spec, randomTensors(spec), 'F32')).toThrow(message);
  });
});

describe('a quantized qwen3moe GGUF: each expert read as stored', () => {
  it.each(Object.keys(MOE_GGUF_MIXES) as MoeGgufMix[])(
    '%s: an expert’s stored format is its stack’s type, and the reference is the file’s blocks dequantized',
    async (mix) => {
      const { file, opened } = await moeGguf(mix);
      const { spec, weights } = opened;
      const m = spec.moe!;
      expect(opened.packed).toEqual({ format: MOE_GGUF_PACKED[mix], rotation: 'none' });
      const formats = new Set<WeightFormat>();
      for (const { name, stack } of expertParts(spec.layers, m.experts)) {
        const format = weights.storedFormat?.(name);
        expect(format, name).toBe(storedWeftFormat(file.tensors.get(stack)!.type));
        formats.add(format!);
      }
      // Q4_K gate and up, and Q6_K down in one layer at least, whatever the linears' format.
      expect([...formats].sort()).toEqual(['int4', 'q6_k']);
      // Placed as stored (the default quant), every expert is its rows of the stack's blocks, copied:
      // none is decoded to f32 (the largest f32 read is a router [E, H]), and the reference runs on
      // the file dequantized, the experts' stored types and all.
      const placed = await referenceTensors(opened, opened.packed!.format, 'none');
      expect(weights.stats!.largestF32).toBe(m.experts * spec.hidden);
      const dequantized = await readAllF32(weights);
      for (const [name, t] of Object.entries(placed))
        expect(sameF32(t.data, dequantized[name]!.data), name).toBeUndefined();
    },
  );

  // A q6_k expert [20, 64] is 1280 elements, 2.5 pairs of super-blocks: the next expert of its
  // placed stack would not start on a block, so it has no stored format and is packed from f32.
  // An int8 one (1280 = 20 pairs of groups) is read from the stack's rows [e · 20, (e + 1) · 20).
  it.each([
    ['q6_k', undefined],
    ['int8', 'int8'],
  ] as const)('an expert [20, 64] of a %s stack: stored as %s', async (stored, want) => {
    const spec = specFromConfig({ ...tinyConfig('qwen3_moe'), moe_intermediate_size: 20 });
    const E = spec.moe!.experts;
    const stack = 'model.layers.0.mlp.experts.gate_proj';
    const asked: [string, number, number][] = [];
    const reader: TensorReader = {
      tensors: new Map([[stack, { shape: [E, 20, 64] }]]),
      readF32: async () => new Float32Array(E * 20 * 64),
      storedFormat: () => stored,
      readPacked: async (name, w, range): Promise<QuantizedMatrix> => {
        asked.push([name, w.rows, range?.row0 ?? 0]);
        return { format: w.format, rows: range?.rows ?? w.rows, cols: w.cols, data: new Uint32Array(0) };
      },
    };
    const view = splitFusedView(reader, spec, () => 'stub');
    const expert = 'model.layers.0.mlp.experts.3.gate_proj.weight';
    expect(view.storedFormat?.(expert)).toBe(want);
    const got = await view.readPacked?.(expert, { format: stored, rows: 20, cols: 64, rotation: 'none' });
    expect(got?.format).toBe(want);
    expect(asked).toEqual(want ? [[stack, E * 20, 60]] : []);
  });
});
