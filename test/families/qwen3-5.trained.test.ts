// The odd-shaped Qwen3.5 trained on KJV text (test/fixtures/qwen35-trained, written by
// tools/train/train_qwen35_tiny.py, whose model is plain PyTorch written from Transformers'
// Qwen3_5 definitions): weft's reference gives the held-out loss PyTorch measured, window for
// window. That checks the reference's Qwen3.5 (Gated DeltaNet recurrence, gated attention with
// QK-norm and partial rotary, zero-centred norms) against a second implementation on trained weights.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { trainedQwen35 } from '../helpers/models.js';

const record = JSON.parse(readFileSync('test/fixtures/qwen35-trained/train-record.json', 'utf8'));

describe('the trained tiny Qwen3.5', () => {
  it('has the odd shapes of the tests’ Qwen3.5 and weft’s reference gives PyTorch’s held-out loss', async () => {
    const m = await openModel(await trainedQwen35());
    expect(m.spec).toMatchObject({ family: 'qwen3_5', hidden: 64, layers: 4, vocabSize: 512, headDim: 32 });
    expect(m.spec.deltaNet).toEqual({
      keyHeads: 2,
      valueHeads: 4,
      keyDim: 16,
      valueDim: 12,
      convKernel: 4,
    });
    const seq: number = record.seq;
    const ref = new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)), { capacity: seq });
    // The held-out text as the trainer took it: every 20th non-empty line of the calibration text.
    const lines = readFileSync(record.text, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '');
    const ids = m.tokenizer.encode(lines.filter((_, i) => i % 20 === 0).join('\n'));
    const V = m.spec.vocabSize;
    let total = 0;
    let windows = 0;
    for (let s = 0; s + seq + 1 <= ids.length; s += seq) {
      const w = ids.slice(s, s + seq + 1);
      ref.trim(0);
      const logits = ref.logitsFor(w.slice(0, seq));
      let loss = 0;
      for (let t = 0; t < seq; t++) {
        const row = logits.subarray(t * V, (t + 1) * V);
        const max = row.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY);
        const z = row.reduce((a, b) => a + Math.exp(b - max), 0);
        loss -= row[w[t + 1]!]! - max - Math.log(z);
      }
      total += loss / seq;
      windows++;
    }
    expect(windows).toBe(record.held_out_windows);
    console.log(
      `[qwen35-trained] held-out loss: weft ${(total / windows).toFixed(4)}, PyTorch ${record.held_out_loss}`,
    );
    expect(Math.abs(total / windows - record.held_out_loss)).toBeLessThan(1e-3);
  });
});
