import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.js';
import type { TextCodec } from '../../src/engine/types.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { openModel } from '../../src/model/load.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { gpu } from '../helpers/gpu.js';
import { trainedQwen35 } from '../helpers/models.js';

// int4 against f32 on the odd-shaped Qwen3.5 trained on KJV text (test/fixtures/qwen35-trained,
// tools/train/train_qwen35_tiny.py): a random model's logits are so flat that any rounding flips
// its picks (14 of 32 forced picks equal, measured on the random fixture), while a trained model's
// margins carry the rounding of int4 (RTN, groups of 32). Measured as top-1 agreement, each of
// f32's greedy picks against int4's pick on the same prefix, for 32 tokens from each prompt.
const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };
// Openings in the KJV's style (the model learnt the KJV calibration text). The free run is printed
// too: after one flip at a near tie the two texts part, so it says less than the top-1 agreement.
const PROMPTS = [
  'And God said unto Moses, I AM THAT I AM: and',
  'For the LORD is a great God, and a great',
  'Then Jesus said unto them, Verily, verily, I say',
  'And the king commanded, and they brought',
];

async function greedyIds(runner: ModelRunner, p: number[], n: number): Promise<number[]> {
  const engine = new Engine({ id: 'qwen35-trained', runner, codec: ids });
  const out: number[] = [];
  for await (const c of engine.generate(p, { maxTokens: n })) out.push(...c.ids);
  return out;
}

describe('the trained tiny Qwen3.5 at int4', () => {
  it('int4 agrees with f32 for at least 24 of 32 greedy tokens (each of f32’s picks, for each prompt)', async () => {
    const opened = await openModel(await trainedQwen35());
    const f32 = await createGpuRunner(opened, { quant: 'f32', capacity: 128, gpu: await gpu() });
    const int4 = await createGpuRunner(opened, { quant: 'int4', capacity: 128, gpu: await gpu() });
    const rows: string[] = [];
    for (const text of PROMPTS) {
      const prompt = opened.tokenizer.encode(text);
      const want = await greedyIds(f32, prompt, 32);
      const got = await greedyIds(int4, prompt, 32);
      // The free run: positions where int4's own greedy text has f32's token.
      const free = got.filter((id, i) => id === want[i]).length;
      // Top-1 agreement: int4's pick at each step of f32's greedy sequence.
      int4.trim(0);
      const first = await int4.forward({ tokens: prompt }, GREEDY, 'last');
      int4.commit(prompt.map((_, i) => i));
      const rest = await int4.forward({ tokens: want.slice(0, 31) }, GREEDY, 'all');
      const picks = [...Array.from(first), ...Array.from(rest)];
      const agree = picks.filter((id, i) => id === want[i]).length;
      rows.push(
        `${JSON.stringify(text)} → f32 ${JSON.stringify(opened.tokenizer.decode(want))}, int4 ${JSON.stringify(opened.tokenizer.decode(got))}: top-1 ${agree}/32, free run ${free}/32`,
      );
      expect(agree, text).toBeGreaterThanOrEqual(24);
    }
    console.log(`[qwen35-trained] ${rows.join('; ')}`);
    f32.dispose();
    int4.dispose();
  });
});
