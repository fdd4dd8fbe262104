// The trained draft head of the demo target (models/kjv-head, made by tools/train/train_head.py)
// through weft's CPU HeadRunner: its depth-1 logits and greedy chain equal the ones PyTorch wrote
// into reference.json, so weft runs the architecture the head was trained as.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { pathModel } from '../../../src/formats/io/node-file.js';
import { HeadRunner, openDraftHead } from '../../../src/model/draft/head.js';
import { openModel } from '../../../src/model/load.js';
import { ReferenceRunner } from '../../../src/model/reference/reference.js';
import { GREEDY } from '../../../src/model/runner.js';
import { mapWeights, readAllF32 } from '../../../src/model/weights.js';

interface Reference {
  prompt_ids: number[];
  draft_vocab_size: number;
  depth1_logits: number[];
  greedy_chain: number[];
}

describe('models/kjv-head', () => {
  it('gives the depth-1 logits and greedy chain PyTorch computed (reference.json)', async () => {
    const ref = JSON.parse(await readFile('models/kjv-head/reference.json', 'utf8')) as Reference;
    const files = await pathModel('models/kjv-target');
    const opened = await openModel(files);
    const target = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 64,
    });
    const head = await openDraftHead(await pathModel('models/kjv-head'), opened);
    await files.close?.();
    expect(head.spec.draftVocab).toBe(ref.draft_vocab_size);
    const context = ref.prompt_ids;
    target.prefill(context.slice(0, -1)); // the target has scored all but the latest token
    const runner = new HeadRunner(head, target, 64);
    await runner.forward({ tokens: context }, GREEDY, 'last');
    runner.commit(context.map((_, i) => i));
    const logits = await runner.lastLogits();
    let worst = 0;
    head.weights.d2t.forEach((id, j) => {
      worst = Math.max(worst, Math.abs(logits[id]! - ref.depth1_logits[j]!));
    });
    console.log(`[head-demo] depth-1 logits: largest difference to PyTorch ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(2e-3);
    // The greedy chain, features fed back: one forward per depth below the context.
    const chain: number[] = [];
    let next = logits.indexOf(Math.max(...logits));
    for (let d = 0; d < ref.greedy_chain.length; d++) {
      chain.push(next);
      const out = await runner.forward({ tokens: [next] }, GREEDY, 'last');
      runner.commit([0]);
      next = out[0]!;
    }
    expect(chain).toEqual(ref.greedy_chain);
  });
});
