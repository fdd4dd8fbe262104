// Qwen3.5-MoE as llama.cpp's `qwen35moe` GGUF (src/models/qwen35moe.cpp, conversion/qwen.py):
// Qwen3.5's keys and stored forms, no feed_forward_length, the routed experts as stacks, the shared
// expert `ffn_*_shexp` and its gate `ffn_gate_inp_shexp`; read back as the same spec and logits.
import { describe, expect, it } from 'vitest';
import { tinyConfig } from '../fixtures/write.js';
import { ggufRoundTrip } from '../helpers/gguf-round-trip.js';

describe('qwen35moe GGUF both ways', () => {
  it('writes the keys and stacks llama.cpp reads, and reads back the same spec and logits', async () => {
    const config = tinyConfig('qwen3_5_moe');
    const text = { ...(config.text_config as Record<string, unknown>), linear_value_head_dim: 16 };
    const r = await ggufRoundTrip({ ...config, text_config: text }, 'F32');
    expect(r.back).toEqual(r.spec);
    expect(r.backLogits).toEqual(r.logits);
    const m = (k: string) => r.file.metadata.get(`qwen35moe.${k}`);
    expect(m('feed_forward_length')).toBeUndefined();
    expect([
      m('expert_count'),
      m('expert_used_count'),
      m('expert_feed_forward_length'),
      m('expert_shared_feed_forward_length'),
    ]).toEqual([6, 2, 32, 48]);
    const t = (n: string) => r.file.tensors.get(n)?.ne;
    expect(t('blk.0.ffn_gate_exps.weight')).toEqual([64, 32, 6]);
    expect(t('blk.0.ffn_down_shexp.weight')).toEqual([48, 64]);
    expect(t('blk.0.ffn_gate_inp_shexp.weight')).toEqual([64, 1]);
  });
});
