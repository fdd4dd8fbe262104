// Converted checkpoints and GGUF files on the GPU (in Chromium; everything in memory): loading a
// weft-q checkpoint gives bit-identical logits to quantizing while loading, with every matrix
// copied from the file, and a GGUF loads through openModel with logits equal to the reference.
import { describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { type ModelFiles, memoryModelFiles } from '../../src/formats/io/files.js';
import type { TensorReader } from '../../src/formats/weft-checkpoint.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { type OpenedModel, openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import type { WeightFormat } from '../../src/quant/formats.js';
import type { Quant, Rotation } from '../../src/quant/pack.js';
import { fixtureFiles, ggufFixture, sameF32 } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';
import { gpu } from '../helpers/gpu.js';
import { bundledModel } from '../helpers/models.js';

const PROMPT = [5, 17, 99, 3, 250, 11];

/** Converts in-memory model files; returns the converted folder's files. */
async function converted(
  files: Map<string, Uint8Array> | ModelFiles,
  quant: 'int8' | 'int4' | 'int2',
  rotate: Rotation,
): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const chunks: Uint8Array[] = [];
  await convertModel(
    files instanceof Map ? memoryModelFiles('src', files) : files,
    { quant, rotate },
    {
      file: async (name, bytes) => {
        out.set(name, bytes);
      },
      weights: async (chunk) => {
        chunks.push(chunk.slice());
      },
    },
  );
  const weights = new Uint8Array(chunks.reduce((a, c) => a + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    weights.set(c, at);
    at += c.byteLength;
  }
  out.set(WEFT_WEIGHTS, weights);
  return out;
}

/**
 * The opened model with `readPacked` hits counted (a hit: a matrix placed by copy), each with the
 * format it was placed in.
 */
function counting(opened: OpenedModel): {
  model: OpenedModel;
  copied: Set<string>;
  formats: Map<string, WeightFormat>;
} {
  const copied = new Set<string>();
  const formats = new Map<string, WeightFormat>();
  const w = opened.weights;
  const weights: TensorReader = {
    tensors: w.tensors,
    readF32: (name) => w.readF32(name),
    readPacked: async (name, want) => {
      const m = await w.readPacked?.(name, want);
      if (m) {
        copied.add(name);
        formats.set(name, m.format);
      }
      return m;
    },
    ...(w.storedFormat ? { storedFormat: (name: string) => w.storedFormat?.(name) } : {}),
  };
  return { model: { ...opened, weights }, copied, formats };
}

async function logits(opened: OpenedModel, quant: Quant, rotate: Rotation) {
  const runner = await createGpuRunner(opened, { quant, rotate, capacity: 32, gpu: await gpu() });
  const ids = await runner.forward({ tokens: PROMPT }, GREEDY, 'all');
  const out = await runner.lastLogits();
  runner.dispose();
  return { ids, logits: out };
}

const CASES: [ModelFamily, 'int8' | 'int4' | 'int2', Rotation][] = [
  ['llama', 'int8', 'none'],
  ['qwen2', 'int4', 'none'],
  ['qwen3', 'int2', 'none'],
  ['llama', 'int4', 'hadamard'],
];

describe('weft-q checkpoints on the GPU', () => {
  it.each(CASES)(
    '%s %s rotate %s: logits bit-identical to quantizing while loading',
    async (family, quant, rotate) => {
      const { files } = fixtureFiles(family, 'f32', 11);
      const source = await openModel(memoryModelFiles(family, files));
      const want = await logits(source, quant, rotate);
      const opened = await openModel(
        memoryModelFiles(`${family}-${quant}`, await converted(files, quant, rotate)),
      );
      expect(opened.format).toBe('weft-q');
      const { model, copied } = counting(opened);
      const got = await logits(model, quant, rotate);
      // Every matrix came from the file as stored: embedding, linears and (untied) head.
      const matrices = [...weightShapes(opened.spec)].filter(([, s]) => s.length === 2).map(([n]) => n);
      expect([...copied].sort()).toEqual(matrices.sort());
      expect(sameF32(got.logits, want.logits)).toBeUndefined();
      expect(Array.from(got.ids)).toEqual(Array.from(want.ids));
    },
  );

  it('kjv-draft (MLP 344, padded to 352 on the GPU) int4: padded matrices are stored padded and copied', async () => {
    const source = await openModel(await bundledModel('kjv-draft'));
    expect(source.spec.intermediate % 16).not.toBe(0);
    const want = await logits(source, 'int4', 'none');
    const opened = await openModel(
      memoryModelFiles('kjv-draft-int4', await converted(await bundledModel('kjv-draft'), 'int4', 'none')),
    );
    const { model, copied } = counting(opened);
    const got = await logits(model, 'int4', 'none');
    expect(copied.has('model.layers.0.mlp.down_proj.weight')).toBe(true);
    expect(copied.size).toBe([...weightShapes(opened.spec).values()].filter((s) => s.length === 2).length);
    expect(sameF32(got.logits, want.logits)).toBeUndefined();
  });

  it('another quant than the stored one re-quantizes from the dequantized values', async () => {
    const { files } = fixtureFiles('llama', 'f32', 12);
    const opened = await openModel(memoryModelFiles('llama-int8', await converted(files, 'int8', 'none')));
    const { model, copied } = counting(opened);
    const got = await logits(model, 'f32', 'none');
    expect(copied.size).toBe(0);
    // f32 of the dequantized int8 weights is exactly what the reference runs on.
    const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
      capacity: 32,
    });
    await ref.forward({ tokens: PROMPT }, GREEDY, 'all');
    const want = ref.logits({ tokens: PROMPT });
    expect(relErr(got.logits, want)).toBeLessThan(1e-4);
  });
});

describe('GGUF files on the GPU', () => {
  it.each([
    ['llama', 'F16'],
    ['qwen3', 'Q8_0'],
  ] as const)(
    '%s %s: loads through openModel; f32 logits equal the reference on the same tensors',
    async (family, variant) => {
      const { bytes } = ggufFixture(family, variant, 13);
      const opened = await openModel(
        memoryModelFiles(`${family}.gguf`, new Map([[`${family}.gguf`, bytes]])),
      );
      expect(opened.format).toBe('gguf');
      const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
        capacity: 32,
      });
      const want = await ref.forward({ tokens: PROMPT }, GREEDY, 'all');
      const wantLogits = ref.logits({ tokens: PROMPT });
      const got = await logits(opened, 'f32', 'none');
      expect(relErr(got.logits, wantLogits)).toBeLessThan(1e-4);
      expect(Array.from(got.ids)).toEqual(Array.from(want));
    },
  );

  // The file's own blocks on the GPU: a quantized GGUF loads at its own format (the default quant)
  // and every matrix whose GGML type has a weft layout is copied as stored, never decoded to f32;
  // the reference runs on the same blocks dequantized with llama.cpp's formulas (readF32).
  // Mixes as llama.cpp writes them: another type for the head, the embedding, one linear; and
  // llama-quantize's K-quant mixes (Q6_K for the head or tied embedding, and for attn_v and
  // ffn_down of layer 1 of 2: use_more_bits).
  const MIXES = {
    none: () => undefined,
    'Q8_0 head, F16 embedding': (n: string) =>
      n === 'lm_head.weight' ? 'Q8_0' : n === 'model.embed_tokens.weight' ? 'F16' : undefined,
    'Q6_K head, Q8_0 embedding, an F16 down_proj': (n: string) =>
      n === 'lm_head.weight'
        ? 'Q6_K'
        : n === 'model.embed_tokens.weight'
          ? 'Q8_0'
          : n === 'model.layers.1.mlp.down_proj.weight'
            ? 'F16'
            : undefined,
  } as const;
  it.each([
    ['llama', 'Q4_0', 'q4_0', 'none'],
    ['qwen3', 'Q4_0', 'q4_0', 'none'],
    ['llama', 'Q8_0', 'int8', 'none'],
    ['llama', 'Q4_K', 'int4', 'none'],
    ['llama', 'Q4_0', 'q4_0', 'Q8_0 head, F16 embedding'],
    ['llama', 'Q4_K', 'int4', 'Q6_K head, Q8_0 embedding, an F16 down_proj'],
    ['llama', 'Q6_K', 'q6_k', 'none'],
    ['qwen3', 'Q5_K', 'q5_k', 'none'],
    ['llama', 'Q4_K_M', 'int4', 'none'],
    ['qwen3', 'Q4_K_M', 'int4', 'none'],
    ['llama', 'Q5_K_M', 'q5_k', 'none'],
    ['qwen3', 'Q4_1', 'q4_1', 'none'],
    ['llama', 'Q5_0', 'q5_0', 'none'],
    ['qwen3', 'Q5_1', 'q5_1', 'none'],
    // The other family of each type above: every type a random Llama and a random Qwen3 file.
    ['qwen3', 'Q8_0', 'int8', 'none'],
    ['qwen3', 'Q4_K', 'int4', 'none'],
    ['qwen3', 'Q6_K', 'q6_k', 'none'],
    ['llama', 'Q5_K', 'q5_k', 'none'],
    ['llama', 'Q4_1', 'q4_1', 'none'],
    ['qwen3', 'Q5_0', 'q5_0', 'none'],
    ['llama', 'Q5_1', 'q5_1', 'none'],
    ['llama', 'Q2_K', 'int2', 'none'],
    ['qwen3', 'Q2_K', 'int2', 'none'],
    ['llama', 'Q3_K', 'q3_k', 'none'],
    ['qwen3', 'Q3_K', 'q3_k', 'none'],
    ['llama', 'IQ4_NL', 'iq4_nl', 'none'],
    ['qwen3', 'IQ4_NL', 'iq4_nl', 'none'],
    ['llama', 'IQ4_XS', 'iq4_xs', 'none'],
    ['qwen3', 'IQ4_XS', 'iq4_xs', 'none'],
    ['llama', 'IQ2_XXS', 'iq2_xxs', 'none'],
    ['qwen3', 'IQ2_XXS', 'iq2_xxs', 'none'],
    ['llama', 'IQ2_XS', 'iq2_xs', 'none'],
    ['qwen3', 'IQ2_XS', 'iq2_xs', 'none'],
    ['llama', 'IQ2_S', 'iq2_s', 'none'],
    ['qwen3', 'IQ2_S', 'iq2_s', 'none'],
    ['llama', 'IQ3_XXS', 'iq3_xxs', 'none'],
    ['qwen3', 'IQ3_XXS', 'iq3_xxs', 'none'],
    ['llama', 'IQ3_S', 'iq3_s', 'none'],
    ['qwen3', 'IQ3_S', 'iq3_s', 'none'],
  ] as const)(
    '%s %s → %s (mixed: %s): placed as stored, logits equal the dequantized blocks',
    async (family, variant, format, mix) => {
      const types = MIXES[mix];
      const { bytes } = ggufFixture(family, variant, 14, mix === 'none' ? {} : { types });
      const opened = await openModel(
        memoryModelFiles(`${family}.gguf`, new Map([[`${family}.gguf`, bytes]])),
      );
      expect(opened.packed).toEqual({ format, rotation: 'none' });
      const { model, copied, formats } = counting(opened);
      const runner = await createGpuRunner(model, {
        quant: format,
        rotate: 'none',
        capacity: 32,
        gpu: await gpu(),
      });
      const got = {
        ids: await runner.forward({ tokens: PROMPT }, GREEDY, 'all'),
        logits: await runner.lastLogits(),
      };
      const bytesPerPass = runner.weightBytesPerPass;
      runner.dispose();
      const stats = { ...opened.weights.stats! };
      const spec = opened.spec;
      const matrices = [...weightShapes(spec)].filter(([, s]) => s.length === 2).map(([n]) => n);
      // Every matrix was copied as stored, each in its own format: none was decoded to f32 (the
      // largest f32 array is a vector: norms, biases).
      expect([...copied].sort()).toEqual(matrices.sort());
      for (const name of copied) expect(formats.get(name), name).toBe(opened.weights.storedFormat?.(name));
      expect(stats.largestF32).toBe(Math.max(spec.hidden, spec.headDim));
      const used = [...new Set(formats.values())].sort();
      console.log(
        `${family} ${variant} (mixed: ${mix}): formats ${used.join(', ')}; f32 decoded while placing ${JSON.stringify(stats)}`,
      );
      if (mix === 'Q8_0 head, F16 embedding') {
        expect(formats.get('lm_head.weight')).toBe('int8');
        expect(formats.get('model.embed_tokens.weight')).toBe('f16');
      }
      if (variant.endsWith('_K_M')) expect(used).toContain('q6_k');
      // The bytes a pass reads are the file's: every linear and the head (a tied head: the
      // embedding) as stored, plus one embedding row (q6_k: the 2 bytes of an unpaired super-block
      // scale per matrix at most).
      const file = await openGguf(memoryBytes(bytes, `${family}.gguf`));
      const embed = file.tensors.get('token_embd.weight')!;
      const tied = !file.tensors.has('output.weight');
      let want = embed.byteLength / embed.ne[1]!;
      for (const t of file.tensors.values())
        if (t.ne.length === 2 && (t !== embed || tied)) want += t.byteLength;
      console.log(`${family} ${variant}: weight bytes per pass ${bytesPerPass}, the file's ${want}`);
      expect(Math.abs(bytesPerPass - want) / want).toBeLessThan(0.01);
      const ref = new ReferenceRunner(spec, mapWeights(await readAllF32(opened.weights)), { capacity: 32 });
      const wantIds = await ref.forward({ tokens: PROMPT }, GREEDY, 'all');
      expect(relErr(got.logits, ref.logits({ tokens: PROMPT }))).toBeLessThan(1e-4);
      expect(Array.from(got.ids)).toEqual(Array.from(wantIds));
    },
  );
});
