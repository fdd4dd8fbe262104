// A quantized gemma4 GGUF on the GPU: GEMMA4_PLE's dense Gemma 4 (per-layer inputs, sliding and
// full layers of two head sizes, KV-shared layers with double-wide MLPs, soft-capped logits) made
// wide enough for GGML's blocks and exported as llama.cpp would write it, loaded at its own format
// (the default quant): every matrix is placed as stored in its file's type (never decoded to f32),
// and the logits and greedy ids are the CPU reference's on the same blocks dequantized (relative
// error at most 7.3e-7 on SwiftShader, 5.6e-7 on lavapipe, measured).
import { describe, expect, it } from 'vitest';
import { exportGguf, type GgufExportType } from '../../src/convert/gguf-export.js';
import type { GgufMix } from '../../src/convert/gguf-mix.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { tokenizerGgufMetadata } from '../../src/formats/gguf/tokenizer.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import type { TensorReader } from '../../src/formats/weft-checkpoint.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { type OpenedModel, openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY, type ModelRunner } from '../../src/model/runner.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import type { WeightFormat } from '../../src/quant/formats.js';
import { storedWeftFormat } from '../../src/quant/ggml-repack.js';
import { GEMMA4_PLE } from '../fixtures/gemma4-config.js';
import { randomTensors, tinyTokenizerJson } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu } from '../helpers/gpu.js';

/**
 * GEMMA4_PLE with rows of whole K-quant super-blocks (hidden and MLP 256, per-layer inputs 32), the
 * tiny tokenizer's vocab of 512, the GPU's smallest window (64), and layer 2 sliding, 3 full, so
 * that its KV-shared layers read the caches llama.cpp gives them (4, sliding, layer 2's; 5 and 6,
 * full, layer 3's).
 */
const WIDE_PLE = {
  ...GEMMA4_PLE,
  vocab_size: 512,
  vocab_size_per_layer_input: 512,
  hidden_size: 256,
  intermediate_size: 256,
  hidden_size_per_layer_input: 32,
  sliding_window: 64,
  layer_types: [
    'sliding_attention',
    'sliding_attention',
    'sliding_attention',
    'full_attention',
    'sliding_attention',
    'full_attention',
    'full_attention',
  ],
};

/** 72 ids: past the 64-token window. */
const PROMPT = Array.from({ length: 72 }, (_, i) => (i * 37 + 5) % 500);

/** The model opened from {@link WIDE_PLE}'s GGUF in `type`, with the file's header. */
async function gemma4Gguf(type: GgufExportType | GgufMix) {
  const spec = specFromConfig(WIDE_PLE);
  const metadata = tokenizerGgufMetadata(
    tinyTokenizerJson(),
    { bos_token: '<|endoftext|>', eos_token: '<|im_end|>' },
    spec.vocabSize,
  );
  const bytes = exportGguf(spec, randomTensors(spec, 9), type, metadata);
  const file = await openGguf(memoryBytes(bytes, 'g4.gguf'));
  const opened = await openModel(memoryModelFiles('g4.gguf', new Map([['g4.gguf', bytes]])));
  return { file, opened };
}

/**
 * {@link PROMPT} in two forwards of 40 and 32 rows (a forward takes 64 at most), the first
 * committed: every row's greedy id, and the second forward's logits [32, vocab].
 */
async function prefill(runner: ModelRunner): Promise<{ ids: number[]; logits: Float32Array }> {
  const first = await runner.forward({ tokens: PROMPT.slice(0, 40) }, GREEDY, 'all');
  runner.commit(Array.from({ length: 40 }, (_, i) => i));
  const rest = await runner.forward({ tokens: PROMPT.slice(40) }, GREEDY, 'all');
  return { ids: [...first, ...rest], logits: await runner.lastLogits!() };
}

/** The opened model with each matrix `readPacked` gave (a copy of stored blocks) recorded with its format. */
function counting(opened: OpenedModel): { model: OpenedModel; copied: Map<string, WeightFormat> } {
  const copied = new Map<string, WeightFormat>();
  const w = opened.weights;
  const weights: TensorReader = {
    ...w,
    readPacked: async (name, want, range) => {
      const m = await w.readPacked?.(name, want, range);
      if (m) copied.set(name, m.format);
      return m;
    },
  };
  return { model: { ...opened, weights }, copied };
}

describe('a quantized gemma4 GGUF on the GPU', () => {
  it.each([
    ['Q8_0', 'int8'],
    ['Q4_0', 'q4_0'],
    ['Q6_K', 'q6_k'],
    ['Q4_K_M', 'int4'],
  ] as const)(
    '%s: every matrix placed as stored (%s and the fallbacks), logits and greedy ids the reference’s on the same blocks',
    async (type, format) => {
      const { file, opened } = await gemma4Gguf(type);
      expect(opened.packed).toEqual({ format, rotation: 'none' });
      const { model, copied } = counting(opened);
      const dev = await createGpuRunner(model, {
        quant: format,
        rotate: 'none',
        capacity: 96,
        gpu: await gpu(),
      });
      const got = await prefill(dev);
      dev.dispose();
      const spec = opened.spec;
      // Every matrix copied from the file in its own type (the per-layer table, projections and
      // gates among them): none decoded to f32 (the largest f32 read is a vector).
      const matrices = [...weightShapes(spec)].filter(([, s]) => s.length === 2).map(([n]) => n);
      expect([...copied.keys()].sort()).toEqual(matrices.sort());
      for (const [name, f] of copied) expect(f, name).toBe(opened.weights.storedFormat?.(name));
      const types = new Set([...file.tensors.values()].filter((t) => t.ne.length === 2).map((t) => t.type));
      const formats = [...new Set(copied.values())].sort();
      expect(formats).toEqual([...new Set([...types].map((t) => storedWeftFormat(t)!))].sort());
      console.log(
        `[gemma4 ${type}] formats ${formats.join(', ')}; f32 decoded while placing ${JSON.stringify(opened.weights.stats)}`,
      );
      expect(opened.weights.stats!.largestF32).toBeLessThanOrEqual(spec.hidden);
      const ref = new ReferenceRunner(spec, mapWeights(await readAllF32(opened.weights)), { capacity: 96 });
      const want = await prefill(ref);
      const err = relErr(got.logits, want.logits);
      console.log(`[gemma4 ${type}] logits' relative error to the reference ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
      expect(got.ids).toEqual(want.ids);
    },
  );
});
