// Gemma 3 4B and up are published as vision-language checkpoints (Gemma3ForConditionalGeneration):
// a `gemma3` config holding the language model's as `text_config`, and its tensors under
// `language_model.model.*` beside `vision_tower.*` and `multi_modal_projector.*`. weft loads the
// language model out of it, warns once about the rest, and runs it as the text checkpoint.
import { describe, expect, it } from 'vitest';
import { createEngine, type LoadProgress } from '../../src/engine/create.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { fixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

describe('Gemma 3 as a vision-language checkpoint', () => {
  it('loads the language model, warns once about the vision tower, and generates what the text checkpoint does', async () => {
    const text = fixtureFiles('gemma3', 'f32', 4);
    const config = {
      architectures: ['Gemma3ForConditionalGeneration'],
      model_type: 'gemma3',
      text_config: tinyConfig('gemma3'),
      vision_config: { hidden_size: 16, model_type: 'siglip_vision_model' },
      mm_tokens_per_image: 256,
    };
    expect(specFromConfig(config)).toEqual(specFromConfig(tinyConfig('gemma3')));
    const vision = (name: string, shape: number[]) => ({
      name,
      shape,
      data: new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.25),
    });
    const stored = [
      ...text.tensors.map((t) => ({ ...t, name: t.name.replace(/^model\./, 'language_model.model.') })),
      vision('vision_tower.vision_model.embeddings.patch_embedding.weight', [16, 3, 2, 2]),
      vision('multi_modal_projector.mm_input_projection_weight', [16, 64]),
    ];
    const files = new Map(text.files);
    files.set('config.json', new TextEncoder().encode(JSON.stringify(config)));
    files.set('model.safetensors', safetensorsBytes(stored, 'F32'));
    const events: LoadProgress[] = [];
    const wrapped = await createEngine({
      model: memoryModelFiles('gemma3-vl', files),
      device: 'cpu',
      contextLength: 96,
      onProgress: (e) => events.push(e),
    });
    const warnings = events.filter((e) => e.phase === 'warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ linears: ['vision_tower.*', 'multi_modal_projector.*'] });
    const plain = await createEngine({
      model: memoryModelFiles('gemma3', text.files),
      device: 'cpu',
      contextLength: 96,
    });
    const ids = async (engine: typeof plain) => {
      const out: number[] = [];
      for await (const c of engine.generate([5, 17, 99, 3, 250], { maxTokens: 8, temperature: 0 }))
        out.push(...c.ids);
      return out;
    };
    expect(await ids(wrapped)).toEqual(await ids(plain));
    await wrapped.unload();
    await plain.unload();
  });
});
