// Qwen3-MoE as llama.cpp's `qwen3moe` GGUF (src/models/qwen3moe.cpp, conversion/qwen.py): the
// experts as 3-D stacks `ffn_{gate,up,down}_exps`, the router `ffn_gate_inp` (kept F32), the
// `expert_*` keys; read back as the same spec and, per expert, the same logits.
import { describe, expect, it } from 'vitest';
import { exportGguf } from '../../src/convert/gguf-export.js';
import { InvalidInputError } from '../../src/errors.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { GgmlType } from '../../src/quant/ggml/blocks.js';
import { randomTensors, tinyConfig } from '../fixtures/write.js';
import { ggufRoundTrip } from '../helpers/gguf-round-trip.js';

/** llama.cpp's qwen3moe runs a renormalised mixture on every layer. */
export const LLAMA_CPP_CONFIG = { ...tinyConfig('qwen3_moe'), mlp_only_layers: [] };

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
