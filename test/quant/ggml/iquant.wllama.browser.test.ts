// llama.cpp itself on the i-quant files `weft export-gguf --type iq2_xs | iq4_xs --calibrate` writes:
// wllama (llama.cpp in WebAssembly, CPU) loads the file of a tiny random Llama (every linear input
// 256 wide, so the 256-value blocks fit; its own head) in headless Chromium and decodes 32 tokens
// greedily. Every matrix (embedding and head included) is IQ2_XS, or IQ4_XS, encoded with
// importance from a short calibration text run through the f32 model, as --calibrate measures it
// (the diagonal of each linear's input Hessian); weft's reference runs on the blocks dequantized
// with llama.cpp's formulas (src/quant/ggml/iquant-decode.ts, bit for bit gguf-py's and ggml's
// decoders).
//
// What the two can agree on is what gguf-kquant-wllama.test.ts argues (in full in
// test/helpers/wllama-parity.ts): llama.cpp's CPU multiplies an IQ2_XS or IQ4_XS matrix by
// activations it first rounds to 8 bits (Q8_K, as for the K-quants), weft by f32 activations. So
// each of llama.cpp's tokens, fed back along its own sequence, must be weft's top token, except at
// a near tie within twice the largest shift those 8-bit activations make in a logit at that step.
// The weights are the fixtures' scaled by 0.2, as there; the test prints every step's margin
// (weft's top logit over its runner-up) and shift.
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { calibrationWindows, collectHessians } from '../../../src/convert/calibrate.js';
import { exportGguf } from '../../../src/convert/gguf-export.js';
import { openGguf } from '../../../src/formats/gguf/header.js';
import { tokenizerGgufMetadata } from '../../../src/formats/gguf/tokenizer.js';
import { memoryBytes } from '../../../src/formats/io/bytes.js';
import { specFromConfig } from '../../../src/model/families/index.js';
import { mapWeights } from '../../../src/model/weights.js';
import { GgmlType } from '../../../src/quant/ggml/blocks.js';
import { loadTokenizer } from '../../../src/tokenizer/tokenizer.js';
import { randomTensors, tinyConfig, tinyTokenizerJson } from '../../fixtures/write.js';
import { expectLlamaCppGreedy, setUpWllamaPage } from '../../helpers/wllama-parity.js';

let page: Page;
let pageUrl: string;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ page, pageUrl, close } = await setUpWllamaPage());
});

afterAll(() => close?.());

const CALIBRATION =
  'The quick brown fox jumps over the lazy dog, and then the dog sleeps in the sun. '.repeat(8);

it.each(['IQ2_XS', 'IQ4_XS'] as const)(
  'llama.cpp (wllama) decodes the exported %s llama GGUF: every token weft’s greedy pick but at near ties',
  async (type) => {
    const spec = specFromConfig(tinyConfig('llama', true));
    const tensors = randomTensors(spec, 11).map((t) =>
      t.name.endsWith('norm.weight') ? t : { ...t, data: t.data.map((v) => v * 0.2) },
    );
    const tokenizerJson = tinyTokenizerJson();
    const metadata = tokenizerGgufMetadata(
      tokenizerJson,
      { bos_token: '<|endoftext|>', eos_token: '<|im_end|>' },
      spec.vocabSize,
    );
    // Importance as `weft export-gguf --calibrate` measures it: Σ x_k² of each linear's inputs.
    const windows = calibrationWindows(loadTokenizer(tokenizerJson), CALIBRATION, spec.bosId!);
    const hessians = collectHessians(
      spec,
      mapWeights(Object.fromEntries(tensors.map((t) => [t.name, t]))),
      windows,
      {
        rotate: 'none',
      },
    );
    const importance = (name: string) => {
      const h = hessians.get(name);
      const cols = tensors.find((t) => t.name === name)?.shape[1];
      if (h === undefined || cols === undefined) return undefined;
      const n = Math.sqrt(h.length);
      return Float32Array.from({ length: cols }, (_, k) => h[k * n + k]!);
    };
    const bytes = exportGguf(spec, tensors, type, metadata, { importance });
    const file = await openGguf(memoryBytes(bytes, 'llama.gguf'));
    const matrices = [...file.tensors.values()].filter((t) => t.ne.length === 2);
    expect(matrices.length).toBe(2 + 7 * spec.layers);
    expect(new Set(matrices.map((t) => t.type))).toEqual(new Set([GgmlType[type]]));
    await expectLlamaCppGreedy(page, pageUrl, bytes, type);
  },
);
