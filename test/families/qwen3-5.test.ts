import { describe, expect, it } from 'vitest';
import { createEngine, type LoadProgress } from '../../src/engine/create.js';
import { modelFootprint } from '../../src/engine/limits.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights } from '../../src/model/weights.js';
import { packedBytes } from '../../src/quant/formats.js';
import { randomWeights, tinyHybridSpec } from '../fixtures/reference.js';
import { SCALE_MODELS } from '../fixtures/scale.js';
import { fixtureFiles, qwen35FixtureFiles } from '../fixtures/write.js';
import { formatError } from '../helpers/compare.js';
import { greedy } from '../helpers/reference.js';

// The layout of Qwen3.5's published config.json: a vision-language wrapper whose language model sits
// under `text_config`, here Qwen3.5-0.8B's scale shape (test/fixtures/scale.ts says where its sizes
// come from), with the wrapper's multimodal RoPE sections.
const published = SCALE_MODELS['qwen3.5-0.8b'].config;
const text = {
  ...Object.fromEntries(
    Object.entries(published).filter(
      ([k]) => !['architectures', 'tie_word_embeddings', 'torch_dtype'].includes(k),
    ),
  ),
  rope_parameters: {
    ...(published.rope_parameters as Record<string, unknown>),
    mrope_section: [11, 11, 10],
    mrope_interleaved: true,
  },
};
const wrapper = {
  architectures: ['Qwen3_5ForConditionalGeneration'],
  model_type: 'qwen3_5',
  text_config: text,
  vision_config: { depth: 12, hidden_size: 768 },
  tie_word_embeddings: true,
};

describe('Qwen3.5 config', () => {
  it('reads the wrapper: text_config, every fourth layer full attention, partial rotary, the wrapper’s tied head', () => {
    const s = specFromConfig(wrapper);
    expect(s).toMatchObject({
      family: 'qwen3_5',
      hidden: 1024,
      layers: 24,
      heads: 8,
      kvHeads: 2,
      headDim: 256,
      rope: { theta: 10_000_000, layout: 'half', rotaryDim: 64 },
      tiedEmbeddings: true,
      qkNorm: true,
      qkvBias: false,
      outputGate: true,
      zeroCentredNorms: true,
      deltaNet: { keyHeads: 16, valueHeads: 16, keyDim: 128, valueDim: 128, convKernel: 4 },
      eosIds: [248044],
    });
    expect(s.layerKinds).toHaveLength(24);
    expect(s.layerKinds!.map((k, i) => (k === 'attention' ? i : -1)).filter((i) => i >= 0)).toEqual([
      3, 7, 11, 15, 19, 23,
    ]);
  });

  it('reads a text-only Qwen3_5ForCausalLM config with layer_types and a top-level rotary factor', () => {
    const types = ['linear_attention', 'full_attention', 'linear_attention'];
    const { rope_parameters: _, ...rest } = text;
    const s = specFromConfig({
      ...rest,
      num_hidden_layers: 3,
      layer_types: types,
      rope_theta: 1e6,
      partial_rotary_factor: 0.5,
      tie_word_embeddings: false,
    });
    expect(s.layerKinds).toEqual(['deltanet', 'attention', 'deltanet']);
    expect(s.rope).toEqual({ theta: 1e6, layout: 'half', rotaryDim: 128 });
    expect(s.tiedEmbeddings).toBe(false);
  });

  it('names the file, field and value of what it refuses', () => {
    const bad = (patch: Record<string, unknown>) =>
      formatError(() => specFromConfig({ ...wrapper, text_config: { ...text, ...patch } }));
    let e = bad({ layer_types: ['linear_attention', 'sliding_attention'] });
    expect(e.field).toBe('text_config.layer_types');
    expect(e.message).toMatch(/one type per layer/);
    e = bad({ layer_types: Array(24).fill('sliding_attention') });
    expect(e.message).toMatch(/unknown layer type "sliding_attention"/);
    e = bad({ linear_num_value_heads: 12 });
    expect(e.field).toBe('text_config.linear_num_value_heads');
    e = bad({ rope_parameters: { rope_type: 'yarn', rope_theta: 1e6 } });
    expect(e.field).toBe('text_config.rope_parameters.rope_type');
    e = formatError(() => specFromConfig({ ...wrapper, text_config: undefined }));
    expect(e.field).toBe('text_config');
  });

  it('lists the DeltaNet tensors with the published names and shapes', () => {
    const shapes = weightShapes(specFromConfig(wrapper));
    const p = 'model.layers.0.linear_attn';
    expect(shapes.get(`${p}.in_proj_qkv.weight`)).toEqual([6144, 1024]);
    expect(shapes.get(`${p}.in_proj_z.weight`)).toEqual([2048, 1024]);
    expect(shapes.get(`${p}.in_proj_b.weight`)).toEqual([16, 1024]);
    expect(shapes.get(`${p}.conv1d.weight`)).toEqual([6144, 1, 4]);
    expect(shapes.get(`${p}.A_log`)).toEqual([16]);
    expect(shapes.get(`${p}.norm.weight`)).toEqual([128]);
    expect(shapes.get(`${p}.out_proj.weight`)).toEqual([1024, 2048]);
    expect(shapes.has('model.layers.0.self_attn.q_proj.weight')).toBe(false);
    // Full attention: q_proj holds each head's query and its output gate.
    expect(shapes.get('model.layers.3.self_attn.q_proj.weight')).toEqual([4096, 1024]);
    expect(shapes.get('model.layers.3.self_attn.o_proj.weight')).toEqual([1024, 2048]);
    expect(shapes.has('lm_head.weight')).toBe(false);
  });

  it('configFromSpec writes a text config that reads back as the same spec', () => {
    const s = specFromConfig(wrapper);
    expect(specFromConfig(configFromSpec(s))).toEqual(s);
  });
});

describe('Qwen3.5 reference forward', () => {
  const spec = tinyHybridSpec;
  const ids = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21];
  const V = spec.vocabSize;

  it('a prompt run at once equals it run token by token (the recurrent state carries exactly)', () => {
    const weights = randomWeights(spec, 7);
    const whole = new ReferenceRunner(spec, weights).logitsFor(ids);
    const stepwise = new ReferenceRunner(spec, weights);
    stepwise.trim(0);
    const joined = Float32Array.from(ids.flatMap((id) => [...stepwise.prefill([id])]));
    expect(joined).toEqual(whole);
    // In two chunks as well.
    const chunked = new ReferenceRunner(spec, weights);
    const a = chunked.prefill(ids.slice(0, 5));
    const b = chunked.prefill(ids.slice(5));
    expect(Float32Array.from([...a, ...b])).toEqual(whole);
  });

  it('a tree row sees its ancestors’ state, not its siblings’; committing a path keeps its state', () => {
    const weights = randomWeights(spec, 11);
    const prompt = ids.slice(0, 6);
    // Tree after the prompt, depth first: 0 → {1 → 2, 3}: nodes 1 and 3 are siblings.
    const tokens = [9, 14, 2, 30];
    const parents = [-1, 0, 1, 0];
    const tree = new ReferenceRunner(spec, weights);
    tree.prefill(prompt);
    const got = tree.logits({ tokens, parents });
    for (const [node, path] of [
      [2, [9, 14, 2]],
      [3, [9, 30]],
    ] as const) {
      const chain = new ReferenceRunner(spec, weights).logitsFor([...prompt, ...path]);
      expect(got.slice(node * V, (node + 1) * V)).toEqual(chain.slice((prompt.length + path.length - 1) * V));
    }
    // Accept the path 0 → 3, then one more token: as if the chain had been run.
    tree.commit([0, 3]);
    const next = tree.prefill([7]);
    const chain = new ReferenceRunner(spec, weights).logitsFor([...prompt, 9, 30, 7]);
    expect(next).toEqual(chain.slice((prompt.length + 2) * V));
  });

  it('the recurrent state cannot roll back part way, only start again', () => {
    const r = new ReferenceRunner(spec, randomWeights(spec, 3));
    r.prefill(ids.slice(0, 4));
    expect(() => r.trim(2)).toThrow(/cannot roll back to 2 of 4 tokens/);
    r.trim(4);
    r.trim(0);
    expect(r.kvLength).toBe(0);
    const again = r.prefill(ids.slice(0, 4));
    expect(again).toEqual(new ReferenceRunner(spec, randomWeights(spec, 3)).logitsFor(ids.slice(0, 4)));
  });
});

describe('Qwen3.5 as published, in the engine on the CPU', () => {
  it('loads the language model out of the vision-language checkpoint, warns once, and generates the reference’s greedy ids', async () => {
    const { spec, tensors, files } = qwen35FixtureFiles(5);
    const events: LoadProgress[] = [];
    const engine = await createEngine({
      model: memoryModelFiles('qwen35', files),
      device: 'cpu',
      contextLength: 96,
      onProgress: (e) => events.push(e),
    });
    const warnings = events.filter((e) => e.phase === 'warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ linears: ['model.visual.*'] });
    expect(warnings[0]!.phase === 'warning' && warnings[0]!.message).toMatch(/vision tower \(2 tensors/);
    const reference = new ReferenceRunner(
      spec,
      mapWeights(Object.fromEntries(tensors.map((t) => [t.name, t]))),
    );
    const ids = async (prompt: number[], n: number) => {
      const out: number[] = [];
      for await (const c of engine.generate(prompt, { maxTokens: n, temperature: 0 })) out.push(...c.ids);
      return out;
    };
    // The engine stops at an EOS id (the fixture's is 2), which it does not emit.
    const expected = (prompt: number[], n: number) => {
      const all = greedy(reference, prompt, n);
      const eos = all.findIndex((id) => spec.eosIds.includes(id));
      return eos < 0 ? all : all.slice(0, eos);
    };
    const prompt = [5, 17, 99, 3, 250];
    const first = await ids(prompt, 20);
    expect(first).toEqual(expected(prompt, 20));
    expect(first.length).toBeGreaterThan(10);
    // The next request extends the last: the recurrent state carries over (all rows kept) ...
    const longer = [...prompt, ...first, 7, 8];
    expect(await ids(longer, 8)).toEqual(expected(longer, 8));
    // ... and one that shares only part of it starts again from zeros.
    const other = [5, 17, 42];
    expect(await ids(other, 8)).toEqual(expected(other, 8));
    // The chat template comes from chat_template.jinja (tokenizer_config.json has none).
    const reply = await engine.chat.completions.create({
      messages: [{ role: 'user', content: 'the' }],
      max_tokens: 4,
      temperature: 0,
    });
    expect(reply.usage.prompt_tokens).toBeGreaterThan(8);
    await engine.unload();
  });
});

describe('Qwen3.5 on the device: its footprint', () => {
  it('counts every tensor at its placed size, a KV cache for the attention layers only, and the linear layers’ state', () => {
    const spec = specFromConfig(wrapper);
    const kv = { context: 4096, kvFormat: 'f16' as const };
    for (const format of ['f16', 'int4'] as const) {
      const f = modelFootprint(spec, format, kv);
      let weights = 0;
      for (const [, shape] of weightShapes(spec))
        weights +=
          shape.length === 2
            ? packedBytes(format, shape[0]!, shape[1]!)
            : 4 * shape.reduce((a, b) => a * b, 1);
      expect(f.weights, format).toBe(weights);
      // 6 attention layers × K and V × [4096, 2 KV heads, 256] halves.
      expect(f.kvCache).toBe(6 * 2 * 4096 * 2 * 256 * 2);
      // 18 linear layers: two copies of [3, 6144] + [16, 128, 128] f32, 64 kept projection rows of
      // 8224, and the gathered rows and mixer output [64, 8224 + 2048].
      expect(f.state).toBe(18 * 4 * (2 * (3 * 6144 + 16 * 128 * 128) + 64 * 8224 + 64 * (8224 + 2048)));
    }
  });
});

describe('Qwen3.5 drafting with its own MTP layer', () => {
  it('draft: mtp gives plain decoding’s ids, greedy and seeded, chains and trees', async () => {
    const { files } = qwen35FixtureFiles(5);
    const engine = await createEngine({
      model: memoryModelFiles('qwen35', files),
      device: 'cpu',
      contextLength: 96,
      draft: 'mtp',
    });
    const prompt = [5, 17, 99, 3, 250, 17, 99, 3];
    const run = async (o: Parameters<typeof engine.generate>[1]) => {
      const out: number[] = [];
      for await (const c of engine.generate(prompt, o)) out.push(...c.ids);
      return out;
    };
    const plain = await run({ maxTokens: 16, drafter: 'none' });
    for (const treeBudget of [4, 8]) {
      expect(await run({ maxTokens: 16, drafter: 'draft', treeBudget })).toEqual(plain);
      const s = engine.lastStats!;
      console.log(
        `[qwen35] mtp, budget ${treeBudget}: ${(s.completion_tokens / s.target_passes).toFixed(2)} tokens per target pass`,
      );
    }
    const seeded = { maxTokens: 12, temperature: 1, seed: 4 };
    expect(await run({ ...seeded, drafter: 'draft', treeBudget: 6 })).toEqual(
      await run({ ...seeded, drafter: 'none' }),
    );
    await engine.unload();
  });

  it('a checkpoint without mtp.* refuses draft: mtp by name', async () => {
    const { files } = fixtureFiles('qwen3', 'f32', 1);
    await expect(
      createEngine({
        model: memoryModelFiles('qwen3', files),
        device: 'cpu',
        contextLength: 32,
        draft: 'mtp',
      }),
    ).rejects.toThrow(/has no multi-token-prediction layer/);
  });
});
