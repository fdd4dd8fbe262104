// The streamed reference (streamed-reference.ts) that the real-size int4 scale tests check the GPU
// against is ReferenceRunner.logits, exactly: on shrunk packed checkpoints of LFM2-8B-A1B's
// mixture and of Gemma 4 E2B (its per-layer table 5 · 64 wide, so a row is not a whole
// super-block and is read with its aligned neighbours), every logit equal.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { referenceTensors } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights } from '../../src/model/weights.js';
import type { ScaleShape } from '../fixtures/scale.js';
import { writePackedScaleDir } from '../fixtures/scale-packed.js';
import { streamedReferenceLogits } from './streamed-reference.js';

const SHRUNK: [ScaleShape, Record<string, unknown>][] = [
  [
    'lfm2-8b-a1b',
    {
      hidden_size: 256,
      num_hidden_layers: 4,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      layer_types: ['conv', 'conv', 'full_attention', 'conv'],
      vocab_size: 4096,
      intermediate_size: 512,
      moe_intermediate_size: 256,
      num_experts: 8,
      num_experts_per_tok: 2,
      num_dense_layers: 1,
    },
  ],
  [
    'gemma-4-e2b',
    {
      hidden_size: 256,
      num_hidden_layers: 5,
      intermediate_size: 512,
      num_kv_shared_layers: 2,
      hidden_size_per_layer_input: 64,
      vocab_size: 4096,
      vocab_size_per_layer_input: 4096,
      layer_types: [
        'sliding_attention',
        'sliding_attention',
        'full_attention',
        'sliding_attention',
        'full_attention',
      ],
      sliding_window: 4,
    },
  ],
];
// A repeated id, and a window of 4 crossed.
const TOKENS = [1, 818, 529, 506, 1121, 36, 563, 9, 818, 11];

for (const [shape, overrides] of SHRUNK)
  it(`${shape}, shrunk: the streamed reference's logits equal ReferenceRunner's`, async () => {
    const dir = await mkdtemp(join(tmpdir(), `weft-streamed-${shape}-`));
    try {
      await writePackedScaleDir(dir, shape, 3, overrides);
      const opened = await openModel(await pathModel(dir));
      const tensors = await referenceTensors(opened, 'int4', 'none');
      const want = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 32 }).logits({
        tokens: TOKENS,
      });
      expect(await streamedReferenceLogits(opened, TOKENS)).toEqual(want);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
