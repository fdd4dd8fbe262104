// LFM2-MoE as llama.cpp's `lfm2moe` GGUF (src/models/lfm2moe.cpp, conversion/lfm2.py): LFM2's keys
// and names, the leading dense blocks, sigmoid gating, the selection bias `exp_probs_b.bias`, the
// experts as stacks; read back as the same spec and the same logits.
import { describe, expect, it } from 'vitest';
import { exportGguf } from '../../src/convert/gguf-export.js';
import { InvalidInputError } from '../../src/errors.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { randomTensors, tinyConfig } from '../fixtures/write.js';
import { ggufRoundTrip } from '../helpers/gguf-round-trip.js';

describe('lfm2moe GGUF both ways', () => {
  it('writes the keys and stacks llama.cpp reads, and reads back the same spec and logits', async () => {
    const r = await ggufRoundTrip(tinyConfig('lfm2_moe'), 'F32');
    expect(r.back).toEqual(r.spec);
    expect(r.backLogits).toEqual(r.logits);
    const m = (k: string) => r.file.metadata.get(`lfm2moe.${k}`);
    expect([
      m('expert_count'),
      m('expert_used_count'),
      m('expert_feed_forward_length'),
      m('leading_dense_block_count'),
      m('expert_gating_func'),
      m('feed_forward_length'),
    ]).toEqual([6, 2, 32, 1, 2, 96]);
    const t = (n: string) => r.file.tensors.get(n)?.ne;
    expect(t('blk.1.exp_probs_b.bias')).toEqual([6]);
    expect(t('blk.3.ffn_down_exps.weight')).toEqual([32, 64, 6]);
    expect(t('blk.0.ffn_gate.weight')).toEqual([64, 96]);
    expect(t('blk.0.ffn_gate_exps.weight')).toBeUndefined();
  });

  it.each([
    [{ routed_scaling_factor: 1.5 }, /routed_scaling_factor = 1.5/],
    [{ use_expert_bias: false }, /use_expert_bias = false/],
  ])('refuses %j', (change, message) => {
    const spec = specFromConfig({ ...tinyConfig('lfm2_moe'), ...change });
    expect(() => exportGguf(spec, randomTensors(spec), 'F32')).toThrow(InvalidInputError);
    expect(() => exportGguf(spec, randomTensors(spec), 'F32')).toThrow(message);
  });
});
