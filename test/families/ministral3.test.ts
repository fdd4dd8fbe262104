// Ministral 3 (`ministral3`, inside Mistral's `mistral3` wrapper as published): the config (YaRN and
// Llama 4's query temperature in `rope_parameters`), the published layout (language model under
// `language_model.*`, the vision side left out), the real 3B config's size, llama.cpp's `mistral3`
// GGUF both ways (the keys its converter writes, conversion/mistral3.py and conversion/base.py;
// what its loader reads, src/models/mistral3.cpp and llama-context.cpp), and `weft convert`.
import { describe, expect, it } from 'vitest';
import { convertModel, exportModelGguf } from '../../src/convert/convert.js';
import { createEngine } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { type ModelSpec, yarnAttentionFactor } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { SCALE_MODELS } from '../fixtures/scale.js';
import { configFixtureFiles, ministral3FixtureFiles, sameF32, tinyConfig } from '../fixtures/write.js';
import { formatError, relErr } from '../helpers/compare.js';
import { greedy } from '../helpers/reference.js';

const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 300);
const ggufFiles = (bytes: Uint8Array) => memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]]));

describe('Ministral 3 config', () => {
  it('reads the mistral3 wrapper: YaRN, its attention factor and the query temperature', () => {
    const { spec } = ministral3FixtureFiles(1);
    expect(spec).toMatchObject({
      family: 'ministral3',
      hidden: 96,
      heads: 3,
      kvHeads: 1,
      headDim: 48,
      intermediate: 176,
      tiedEmbeddings: false,
      bosId: 1,
      queryTemperature: { beta: 0.1, floorScale: 32 },
      rope: {
        theta: 1000,
        layout: 'half',
        scaling: {
          type: 'yarn',
          factor: 16,
          originalMaxPositions: 32,
          betaFast: 32,
          betaSlow: 1,
          truncate: true,
          mscale: 1,
          mscaleAllDim: 0.7,
        },
      },
    });
    // (1 + 0.1 ln 16) / (1 + 0.07 ln 16), in f32.
    const af = spec.rope.scaling?.type === 'yarn' ? spec.rope.scaling.attentionFactor : 0;
    expect(af).toBe(Math.fround((1 + 0.1 * Math.log(16)) / (1 + 0.07 * Math.log(16))));
    expect(spec.eosIds).toContain(2);
    expect(spec.slidingWindow).toBeUndefined();
  });

  it('Ministral 3 3B’s published config: 3,429,006,336 parameters, tied, YaRN over 16,384, temperature 0.1', () => {
    const s = specFromConfig(SCALE_MODELS['ministral-3-3b'].config);
    const params = [...weightShapes(s).values()].reduce((n, d) => n + d.reduce((a, b) => a * b, 1), 0);
    expect(params).toBe(3_429_006_336);
    expect(s).toMatchObject({ layers: 26, hidden: 3072, heads: 32, kvHeads: 8, headDim: 128 });
    expect(s.tiedEmbeddings).toBe(true);
    expect(s.queryTemperature).toEqual({ beta: 0.1, floorScale: 16384 });
    // mscale = mscale_all_dim: cos and sin are not scaled.
    expect(s.rope.scaling).toMatchObject({ type: 'yarn', factor: 16, attentionFactor: 1 });
  });

  it('refuses what it cannot run, naming the file, key and value', () => {
    const { text_config, ...outer } = SCALE_MODELS['ministral-3-3b'].config as Record<string, unknown>;
    const text = text_config as Record<string, unknown>;
    // The repositories without -BF16 hold FP8 weights.
    const fp8 = formatError(() =>
      specFromConfig({ ...outer, text_config: text, quantization_config: { quant_method: 'fp8' } }),
    );
    expect(fp8.field).toBe('quantization_config');
    const inner = formatError(() =>
      specFromConfig({ ...outer, text_config: { ...text, model_type: 'pixtral' } }),
    );
    expect([inner.field, inner.value]).toEqual(['text_config.model_type', 'pixtral']);
    const rp = text.rope_parameters as Record<string, unknown>;
    const { original_max_position_embeddings: _, ...noOriginal } = rp;
    const floor = formatError(() =>
      specFromConfig({ ...text, rope_parameters: { ...noOriginal, rope_type: 'default' } }, 'c.json'),
    );
    expect([floor.file, floor.field, floor.value]).toEqual([
      'c.json',
      'rope_parameters.llama_4_scaling_beta',
      0.1,
    ]);
    const kind = formatError(() =>
      specFromConfig({ ...text, rope_parameters: { ...rp, rope_type: 'dynamic' } }),
    );
    expect(kind.field).toBe('rope_parameters.rope_type');
  });

  it('the published layout loads: the language model under language_model.*, the vision side left out', async () => {
    const { files, spec, tensors } = ministral3FixtureFiles(4);
    const opened = await openModel(memoryModelFiles('ministral3', files));
    expect(opened.spec).toEqual(spec);
    expect(opened.warnings?.map((w) => w.message)).toEqual([
      'the vision tower (2 tensors) not loaded: weft runs the language model',
    ]);
    expect(opened.warnings?.[0]?.tensors).toEqual(['vision_tower.*', 'multi_modal_projector.*']);
    const all = await readAllF32(opened.weights);
    for (const t of tensors) expect(sameF32(all[t.name]!.data, t.data), t.name).toBeUndefined();
    expect(Object.keys(all).some((n) => n.includes('vision') || n.includes('projector'))).toBe(false);
  });
});

describe('Ministral 3 as llama.cpp’s mistral3 GGUF', () => {
  it('writes the keys llama.cpp reads, and reads back the same spec, tensors and logits', async () => {
    const { files, spec } = ministral3FixtureFiles(5);
    const bytes = await exportModelGguf(memoryModelFiles('m', files), 'F32');
    const g = await openGguf(memoryBytes(bytes, 'm.gguf'));
    const m = (k: string) => g.metadata.get(`mistral3.${k}`);
    expect(g.metadata.get('general.architecture')).toBe('mistral3');
    expect(m('rope.scaling.type')).toBe('yarn');
    expect([m('rope.scaling.factor'), m('rope.scaling.original_context_length')]).toEqual([16, 32]);
    expect([m('rope.scaling.yarn_beta_fast'), m('rope.scaling.yarn_beta_slow')]).toEqual([32, 1]);
    // mscale_all_dim as the log multiplier, beta as the temperature scale (conversion/mistral3.py).
    expect(m('rope.scaling.yarn_log_multiplier')).toBe(Math.fround(0.7));
    expect(m('attention.temperature_scale')).toBe(Math.fround(0.1));
    expect([m('attention.key_length'), m('rope.dimension_count')]).toEqual([48, 48]);
    // Q and K stored permuted for llama.cpp's interleaved RoPE, as conversion/llama.py does.
    const back = await openModel(ggufFiles(bytes));
    const f32 = (x: ModelSpec) =>
      JSON.parse(JSON.stringify(x, (_, v) => (typeof v === 'number' ? Math.fround(v) : v)));
    // The GGUF's tokenizer adds its end-of-turn id to the end ids.
    expect(f32({ ...back.spec, eosIds: [] })).toEqual(f32({ ...spec, eosIds: [] }));
    const a = await readAllF32((await openModel(memoryModelFiles('m', files))).weights);
    const b = await readAllF32(back.weights);
    for (const name of Object.keys(a)) expect(sameF32(b[name]!.data, a[name]!.data), name).toBeUndefined();
    const want = new ReferenceRunner(spec, mapWeights(a)).logitsFor(PROMPT);
    const got = new ReferenceRunner(back.spec, mapWeights(b)).logitsFor(PROMPT);
    expect(relErr(got, want)).toBeLessThan(1e-6);
  });

  it('a Q8_0 file generates the reference’s ids on the CPU engine', async () => {
    const { files } = ministral3FixtureFiles(6);
    const bytes = await exportModelGguf(memoryModelFiles('m', files), 'Q8_0');
    const g = await openModel(ggufFiles(bytes));
    const ref = new ReferenceRunner(g.spec, mapWeights(await readAllF32(g.weights)));
    const engine = await createEngine({ model: ggufFiles(bytes), device: 'cpu', contextLength: 64 });
    const ids: number[] = [];
    for await (const c of engine.generate(PROMPT, { maxTokens: 6 })) ids.push(...c.ids);
    await engine.unload();
    expect(ids).toEqual(greedy(ref, PROMPT, 6));
  });

  it('refuses what llama.cpp’s mistral3 loader would run differently', async () => {
    const refused = async (text: Record<string, unknown>, pattern: RegExp) => {
      const { files } = configFixtureFiles(text, 2);
      await expect(exportModelGguf(memoryModelFiles('m', files), 'F32')).rejects.toThrow(InvalidInputError);
      await expect(exportModelGguf(memoryModelFiles('m', files), 'F32')).rejects.toThrow(pattern);
    };
    const base = tinyConfig('ministral3');
    const rp = base.rope_parameters as Record<string, unknown>;
    await refused({ ...base, sliding_window: 64 }, /sliding_window/);
    // llama.cpp takes mscale as 1.
    await refused({ ...base, rope_parameters: { ...rp, mscale: 0.9 } }, /attention_factor/);
    await refused({ ...base, rope_parameters: { ...rp, truncate: false } }, /truncate/);
  });

  it('a GGUF without a log multiplier or temperature reads as llama.cpp takes it', async () => {
    const base = tinyConfig('ministral3');
    const {
      mscale: _,
      mscale_all_dim: __,
      llama_4_scaling_beta: ___,
      ...rp
    } = base.rope_parameters as Record<string, unknown>;
    const { files } = configFixtureFiles({ ...base, rope_parameters: rp }, 2);
    const back = await openModel(ggufFiles(await exportModelGguf(memoryModelFiles('m', files), 'F32')));
    expect(back.spec.queryTemperature).toBeUndefined();
    // mscale(16) = 1 + 0.1 ln 16 on both sides.
    expect(back.spec.rope.scaling).toMatchObject({ type: 'yarn', attentionFactor: yarnAttentionFactor(16) });
  });
});

describe('Ministral 3 through weft convert', () => {
  it('a GGUF converts to a folder whose config.json reads back as the same spec', async () => {
    const { files } = ministral3FixtureFiles(7);
    const bytes = await exportModelGguf(memoryModelFiles('m', files), 'F32');
    const spec = (await openModel(ggufFiles(bytes))).spec;
    expect(specFromConfig(JSON.parse(JSON.stringify(configFromSpec(spec))))).toEqual(spec);
  });

  it('the published layout converts to int8 and reads back with its spec', async () => {
    const { files, spec } = ministral3FixtureFiles(8);
    const out = new Map<string, Uint8Array>();
    const chunks: Uint8Array[] = [];
    await convertModel(
      memoryModelFiles('ministral3', files),
      { quant: 'int8' },
      { file: async (name, b) => void out.set(name, b), weights: async (c) => void chunks.push(c.slice()) },
    );
    const all = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
    chunks.reduce((at, c) => {
      all.set(c, at);
      return at + c.byteLength;
    }, 0);
    out.set('model.weft.safetensors', all);
    const converted = await openModel(memoryModelFiles('converted', out));
    expect(converted.spec).toEqual(spec);
  });
});
