// Gemma 4 as published (Gemma4ForConditionalGeneration: a `gemma4` config holding the language
// model's as `text_config`, its tensors under `model.language_model.*` beside the vision and audio
// towers and their embedders, and K/V tensors on the KV-shared layers that Transformers ignores)
// and as a weft folder: weft loads the language model, warns once about the towers, ignores the
// shared layers' K/V, and runs what the text checkpoint runs; an int4 folder reads back as the
// same spec with the source's logits rounded through int4.
import { describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { createEngine, type LoadProgress } from '../../src/engine/create.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { referenceTensors, roundedThrough } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { firstSharedLayer } from '../../src/model/spec/spec.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { configFixtureFiles, fixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';
import { relErr } from '../helpers/compare.js';

const PROMPT = [5, 17, 99, 3, 250, 11, 42, 8];

async function idsOf(engine: Awaited<ReturnType<typeof createEngine>>): Promise<number[]> {
  const out: number[] = [];
  for await (const c of engine.generate(PROMPT, { maxTokens: 8, temperature: 0 })) out.push(...c.ids);
  return out;
}

describe('Gemma 4 checkpoints', () => {
  it('as published: the language model loads, one warning names the towers, the shared layers’ K/V are ignored', async () => {
    const text = fixtureFiles('gemma4', 'f32', 4);
    const textConfig = tinyConfig('gemma4');
    const config = {
      architectures: ['Gemma4ForConditionalGeneration'],
      model_type: 'gemma4',
      text_config: textConfig,
      vision_config: { hidden_size: 16, model_type: 'gemma4_vision' },
      audio_config: { hidden_size: 16, model_type: 'gemma4_audio' },
      tie_word_embeddings: true,
    };
    const spec = specFromConfig(config);
    expect(spec).toEqual(specFromConfig(textConfig));
    const filled = (name: string, shape: number[], v = 0.25) => ({
      name,
      shape,
      data: new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(v),
    });
    // The published files keep k_proj, v_proj and k_norm on the KV-shared layers (unused).
    const kvWidth = spec.kvHeads * spec.headDim;
    const sharedKv = [];
    for (let l = firstSharedLayer(spec); l < spec.layers; l++) {
      const at = `model.language_model.layers.${l}.self_attn`;
      sharedKv.push(filled(`${at}.k_proj.weight`, [kvWidth, spec.hidden], Number.NaN));
      sharedKv.push(filled(`${at}.v_proj.weight`, [kvWidth, spec.hidden], Number.NaN));
      sharedKv.push(filled(`${at}.k_norm.weight`, [spec.headDim], Number.NaN));
    }
    const stored = [
      ...text.tensors.map((t) => ({ ...t, name: t.name.replace(/^model\./, 'model.language_model.') })),
      ...sharedKv,
      filled('model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight', [16, 16]),
      filled('model.embed_vision.embedding_projection.weight', [64, 16]),
      filled('model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight', [16, 16]),
      filled('model.embed_audio.embedding_projection.weight', [64, 16]),
    ];
    const files = new Map(text.files);
    files.set('config.json', new TextEncoder().encode(JSON.stringify(config)));
    files.set('model.safetensors', safetensorsBytes(stored, 'F32'));
    const events: LoadProgress[] = [];
    const wrapped = await createEngine({
      model: memoryModelFiles('gemma4-published', files),
      device: 'cpu',
      contextLength: 96,
      onProgress: (e) => events.push(e),
    });
    const warnings = events.filter((e) => e.phase === 'warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({
      linears: ['model.vision_tower.*', 'model.embed_vision.*', 'model.audio_tower.*', 'model.embed_audio.*'],
    });
    expect(JSON.stringify(warnings[0])).toMatch(/vision and audio towers/);
    const plain = await createEngine({
      model: memoryModelFiles('gemma4', text.files),
      device: 'cpu',
      contextLength: 96,
    });
    // NaN K/V on the shared layers would spread into every logit if they were read.
    expect(await idsOf(wrapped)).toEqual(await idsOf(plain));
    await wrapped.unload();
    await plain.unload();
  });

  it('an int4 weft folder reads back as the same spec, and its reference equals the source at int4', async () => {
    const { files } = configFixtureFiles(tinyConfig('gemma4'), 7);
    const source = await openModel(memoryModelFiles('gemma4', files));
    const out = new Map<string, Uint8Array>();
    const chunks: Uint8Array[] = [];
    await convertModel(
      memoryModelFiles('gemma4', files),
      { quant: 'int4' },
      {
        file: async (n, bytes) => {
          out.set(n, bytes);
        },
        weights: async (chunk) => {
          chunks.push(chunk.slice());
        },
      },
    );
    const weights = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) {
      weights.set(c, at);
      at += c.length;
    }
    out.set(WEFT_WEIGHTS, weights);
    const converted = await openModel(memoryModelFiles('gemma4-int4', out));
    expect(converted.spec).toEqual(source.spec);
    const rounded = roundedThrough(await readAllF32(source.weights), 'int4');
    const want = new ReferenceRunner(source.spec, mapWeights(rounded), { capacity: 64 }).logitsFor(PROMPT);
    const tensors = await referenceTensors(converted, 'int4', 'none');
    const got = new ReferenceRunner(converted.spec, mapWeights(tensors), { capacity: 64 }).logitsFor(PROMPT);
    expect(relErr(got, want)).toBeLessThan(1e-5);
  });
});
