// llama.cpp itself on the K-quant mixes `weft export-gguf --type q4_k_m` (and `q3_k_m`) writes:
// wllama (llama.cpp in WebAssembly, CPU) loads the file of a tiny random Llama (every linear input
// 256 wide, so the K-quant blocks fit; its own head) in headless Chromium and decodes 32 tokens
// greedily. By llama-quantize's recipe the Q4_K_M file holds Q4_K and Q6_K for the head and for
// layer 1's attn_v and ffn_down; the Q3_K_M file Q3_K, Q5_K for both attn_v (the first two), Q4_K
// for ffn_down and attn_output, and Q6_K for the head. weft's reference runs on its blocks
// dequantized with llama.cpp's formulas (the GPU runner places the Q4_K_M blocks as stored and
// equals the reference: test/convert/convert.gpu.test.ts).
//
// What the two can agree on (test/helpers/wllama-parity.ts): each of llama.cpp's tokens, fed back
// along its own sequence, must be weft's top token, except at a near tie within twice the largest
// shift llama.cpp's 8-bit (Q8_K) activations make in a logit at that step. The weights are the
// fixtures' scaled by 0.2 (uniform ±0.1: at ±0.5 the activations grow so large that 8-bit rounding
// moves the logits by 0.7 of their spread), and the test prints every step's lead, margin and shift.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { exportGguf } from '../../../src/convert/gguf-export.js';
import { openGguf } from '../../../src/formats/gguf/header.js';
import { tokenizerGgufMetadata } from '../../../src/formats/gguf/tokenizer.js';
import { memoryBytes } from '../../../src/formats/io/bytes.js';
import { specFromConfig } from '../../../src/model/families/index.js';
import { GgmlType } from '../../../src/quant/ggml/blocks.js';
import { randomTensors, tinyConfig, tinyTokenizerJson } from '../../fixtures/write.js';
import { expectLlamaCppGreedy, setUpWllamaPage } from '../../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

const [Q3, Q4, Q5, Q6] = [GgmlType.Q3_K, GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K];
/** The tensors whose types each mix's recipe sets, and those types. */
const CHECKED = [
  'output',
  'blk.1.attn_v',
  'blk.1.ffn_down',
  'blk.0.attn_v',
  'blk.0.ffn_down',
  'token_embd',
  'blk.0.attn_q',
  'blk.0.attn_output',
];

it.each([
  ['Q4_K_M', [Q6, Q6, Q6, Q4, Q4, Q4, Q4, Q4]],
  ['Q3_K_M', [Q6, Q5, Q4, Q5, Q4, Q3, Q3, Q4]],
] as const)(
  'llama.cpp (wllama) decodes the exported %s llama GGUF: every token weft’s greedy pick but at near ties',
  async (mix, want) => {
    const spec = specFromConfig(tinyConfig('llama', true));
    const tensors = randomTensors(spec, 11).map((t) =>
      t.name.endsWith('norm.weight') ? t : { ...t, data: t.data.map((v) => v * 0.2) },
    );
    const metadata = tokenizerGgufMetadata(
      tinyTokenizerJson(),
      { bos_token: '<|endoftext|>', eos_token: '<|im_end|>' },
      spec.vocabSize,
    );
    const bytes = exportGguf(spec, tensors, mix, metadata);
    const file = await openGguf(memoryBytes(bytes, 'llama.gguf'));
    expect(CHECKED.map((n) => file.tensors.get(`${n}.weight`)?.type)).toEqual(want);
    await expectLlamaCppGreedy(page, pageUrl, bytes, mix);
  },
);
