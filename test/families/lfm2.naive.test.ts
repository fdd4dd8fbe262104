import { describe, expect, it } from 'vitest';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, type Tensor } from '../../src/model/weights.js';
import { type Config, type Matrix, naiveLfm2 } from '../fixtures/naive-lfm2.js';
import { randomWeights } from '../fixtures/reference.js';
import { tinyConfig } from '../fixtures/write.js';
import { formatError } from '../helpers/compare.js';

// An independent oracle for the LFM2 reference forward (src/model/reference/reference.ts with the short
// convolution of src/model/blocks/shortconv/reference.ts and LFM2's names in the attention and MLP blocks),
// written from Hugging Face's `Lfm2ForCausalLM` (transformers src/transformers/models/lfm2/
// modeling_lfm2.py, `Lfm2ShortConv.slow_forward` without a cache, `Lfm2Attention`, `Lfm2MLP`,
// `Lfm2DecoderLayer`, `Lfm2Model`) and not from weft's code: whole sequence at once, f64
// throughout, matrices as number[][], sizes and switches read from the config.json the way
// `Lfm2Config` reads them, weights by their checkpoint names. The convolution is nn.Conv1d's:
// zero padding of kernel - 1 on both sides, the first T outputs kept (weft instead carries a
// window of past rows, token by token).

/** max |got − want| and max |want|. */
function compare(got: ArrayLike<number>, want: ArrayLike<number>): { maxDiff: number; scale: number } {
  expect(got.length).toBe(want.length);
  let maxDiff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return { maxDiff, scale };
}

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  const { maxDiff, scale } = compare(got, want);
  expect(scale, what).toBeGreaterThan(0.5);
  expect(maxDiff, what).toBeLessThanOrEqual(TOL * scale);
}

// The reference computes in f32, so each logit carries a few f32 ulps (2^-24 ≈ 6e-8) of relative
// error per operation over four layers of dot products of width <= 192, norms, a softmax and
// three-tap convolutions: a few 1e-7 of the logits' scale. 2e-5 · max|logit| leaves a wide margin
// and stays far below what a wrong tap order, gate or norm name does (the sensitivity test).
const TOL = 2e-5;

/** The fixture's config: conv, conv, full attention, conv; hidden 64, 4 heads over 2 KV heads, L = 3. */
const CONFIG = tinyConfig('lfm2');

/**
 * The other switches: biases in in_proj, the convolution and out_proj (`conv_bias`), a width-4
 * convolution, head_dim 8 unlike hidden / heads, attention first and last (`full_attn_idxs`), an
 * untied head, and the original keys (`theta`, `block_ff_dim` with a null multiplier: 2 · 90 / 3
 * = 60, not rounded).
 */
const SWITCHED: Config = {
  model_type: 'lfm2',
  vocab_size: 61,
  hidden_size: 40,
  num_hidden_layers: 3,
  num_attention_heads: 5,
  num_key_value_heads: 1,
  head_dim: 8,
  full_attn_idxs: [0, 2],
  conv_L_cache: 4,
  conv_bias: true,
  block_ff_dim: 90,
  block_ffn_dim_multiplier: null,
  norm_eps: 1e-5,
  theta: 5000,
  max_position_embeddings: 64,
  tie_embedding: false,
};

const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21];

describe('LFM2 reference forward vs the independent whole-sequence implementation', () => {
  for (const [label, config] of [
    ['fixture', CONFIG],
    ['switched', SWITCHED],
  ] as const) {
    for (const seed of [31, 32]) {
      it(`${label}, seed ${seed}: logits of a ${PROMPT.length}-token sequence agree`, () => {
        const spec = specFromConfig(config);
        const source = randomWeights(spec, seed);
        const want = naiveLfm2(config, source, PROMPT).flat();
        expectClose(new ReferenceRunner(spec, source).logitsFor(PROMPT), want, 'logits');
      });
    }
  }

  it('the residual stream after every layer agrees (where a disagreement starts)', () => {
    for (const config of [CONFIG, SWITCHED]) {
      const spec = specFromConfig(config);
      const source = randomWeights(spec, 31);
      const trace: Matrix[] = [];
      naiveLfm2(config, source, PROMPT, trace);
      const outputs: Float32Array[] = [];
      const runner = new ReferenceRunner(spec, source);
      runner.residualHook = {
        output: (layer, x) => {
          outputs[layer] = x.slice();
        },
      };
      runner.logitsFor(PROMPT);
      for (let l = 0; l < spec.layers; l++) {
        const { maxDiff, scale } = compare(outputs[l]!, trace[l]!.flat());
        expect(maxDiff, `layer ${l} (${spec.layerKinds![l]})`).toBeLessThanOrEqual(TOL * scale);
      }
    }
  });

  it('is sensitive: a convolution weight moved, or its taps reversed, changes the logits beyond the tolerance', () => {
    const spec = specFromConfig(CONFIG);
    const source = randomWeights(spec, 31);
    const base = new ReferenceRunner(spec, source).logitsFor(PROMPT);
    const record: Record<string, Tensor> = {};
    for (const name of weightShapes(spec).keys()) record[name] = source.get(name);
    const name = 'model.layers.1.conv.conv.weight';
    const t = source.get(name);
    const L = t.shape[2]!;
    const changes: [string, Float32Array][] = [
      ['moved by 0.3', t.data.map((v) => v + 0.3)],
      ['taps reversed', t.data.map((_, i) => t.data[i - (i % L) + (L - 1 - (i % L))]!)],
    ];
    for (const [what, data] of changes) {
      const changed = mapWeights({ ...record, [name]: { shape: t.shape, data } });
      const moved = new ReferenceRunner(spec, changed).logitsFor(PROMPT);
      const { maxDiff, scale } = compare(moved, base);
      expect(maxDiff, `${what}: its effect`).toBeGreaterThan(100 * TOL * scale);
      expectClose(moved, naiveLfm2(CONFIG, changed, PROMPT).flat(), `${what}: oracle vs reference`);
    }
  });
});

describe('LFM2 reference: chunks, decoding and draft trees carry the convolution window', () => {
  const spec = specFromConfig(CONFIG);
  const V = spec.vocabSize;
  const rowsOf = (m: Matrix, from: number) => m.slice(from).flat();

  it('a prompt run at once equals it in chunks and token by token (bit for bit)', () => {
    for (const config of [CONFIG, SWITCHED]) {
      const s = specFromConfig(config);
      const weights = randomWeights(s, 7);
      const whole = new ReferenceRunner(s, weights).logitsFor(PROMPT);
      expect(new ReferenceRunner(s, weights).recurrent).toBe(true);
      const stepwise = new ReferenceRunner(s, weights);
      const joined = Float32Array.from(PROMPT.flatMap((id) => [...stepwise.prefill([id])]));
      expect(joined).toEqual(whole);
      // Chunks of 1, 4 and 7: a chunk boundary inside every window position.
      const chunked = new ReferenceRunner(s, weights);
      const parts = [PROMPT.slice(0, 1), PROMPT.slice(1, 5), PROMPT.slice(5)].map((ids) => [
        ...chunked.prefill(ids),
      ]);
      expect(Float32Array.from(parts.flat())).toEqual(whole);
    }
  });

  it('a draft tree’s nodes equal the oracle on each root-to-node path; a committed path continues as the chain', () => {
    const weights = randomWeights(spec, 11);
    const prompt = PROMPT.slice(0, 6);
    // Depth first after the prompt: 0 → {1 → 2 → 3, 4 → 5}, 6 (a second root): siblings 1 and 4,
    // node 3 deeper than the window, whose rows then all come from its ancestors.
    const tokens = [9, 14, 2, 30, 7, 50, 33];
    const parents = [-1, 0, 1, 2, 0, 4, -1];
    const tree = new ReferenceRunner(spec, weights);
    tree.prefill(prompt);
    const got = tree.logits({ tokens, parents });
    const pathOf = (node: number): number[] => (node < 0 ? [] : [...pathOf(parents[node]!), tokens[node]!]);
    tokens.forEach((_, node) => {
      const ids = [...prompt, ...pathOf(node)];
      const want = rowsOf(naiveLfm2(CONFIG, weights, ids), ids.length - 1);
      const row = got.slice(node * V, (node + 1) * V);
      expectClose(row, want, `node ${node}`);
      // And exactly the chain's row: no node sees a sibling's window.
      expect(row).toEqual(new ReferenceRunner(spec, weights).logitsFor(ids).slice((ids.length - 1) * V));
    });
    // Accept 0 → 4 → 5, then continue: as if the chain had been run.
    tree.commit([0, 4, 5]);
    expect(tree.kvLength).toBe(prompt.length + 3);
    const next = tree.prefill([3, 44]);
    const ids = [...prompt, 9, 7, 50, 3, 44];
    expectClose(next, rowsOf(naiveLfm2(CONFIG, weights, ids), ids.length - 2), 'after the commit');
    expect(next).toEqual(new ReferenceRunner(spec, weights).logitsFor(ids).slice((ids.length - 2) * V));
    // A tree after the commit sees the committed window too.
    const again = tree.logits({ tokens: [12, 13], parents: [-1, -1] });
    for (const [node, id] of [12, 13].entries()) {
      const path = [...ids, id];
      expectClose(
        again.slice(node * V, (node + 1) * V),
        rowsOf(naiveLfm2(CONFIG, weights, path), path.length - 1),
        `root ${node}`,
      );
    }
  });

  it('the window cannot roll back part way, only start again from zeros', () => {
    const weights = randomWeights(spec, 3);
    const r = new ReferenceRunner(spec, weights);
    r.prefill(PROMPT.slice(0, 4));
    expect(() => r.trim(2)).toThrow(/lfm2 model's recurrent state cannot roll back to 2 of 4 tokens/);
    r.trim(4);
    r.trim(0);
    expect(r.kvLength).toBe(0);
    expect(r.prefill(PROMPT.slice(0, 4))).toEqual(
      new ReferenceRunner(spec, weights).logitsFor(PROMPT.slice(0, 4)),
    );
  });
});

describe('LFM2 config', () => {
  // Shaped as LiquidAI's published LFM2 config.json files: the original keys beside Transformers'.
  const published: Config = {
    architectures: ['Lfm2ForCausalLM'],
    model_type: 'lfm2',
    vocab_size: 65536,
    hidden_size: 2048,
    intermediate_size: 12288,
    block_ff_dim: 12288,
    block_auto_adjust_ff_dim: true,
    block_ffn_dim_multiplier: 1.0,
    block_multiple_of: 256,
    num_hidden_layers: 16,
    num_attention_heads: 32,
    num_key_value_heads: 8,
    layer_types: ['conv', 'conv', 'full_attention', 'conv', 'conv', 'full_attention', 'conv', 'conv'].concat([
      'full_attention',
      'conv',
      'full_attention',
      'conv',
      'full_attention',
      'conv',
      'full_attention',
      'conv',
    ]),
    conv_L_cache: 3,
    conv_bias: false,
    norm_eps: 1e-5,
    rope_theta: 1_000_000,
    max_position_embeddings: 128_000,
    tie_embedding: true,
    bos_token_id: 1,
    eos_token_id: 7,
  };

  it('reads the published keys: layer kinds, the convolution, QK-norm, the adjusted MLP width, tied head', () => {
    const s = specFromConfig(published);
    expect(s).toMatchObject({
      family: 'lfm2',
      hidden: 2048,
      intermediate: 8192,
      layers: 16,
      heads: 32,
      kvHeads: 8,
      headDim: 64,
      rmsEps: 1e-5,
      rope: { theta: 1_000_000, layout: 'half' },
      tiedEmbeddings: true,
      qkNorm: true,
      qkvBias: false,
      shortConv: { kernel: 3, bias: false },
      bosId: 1,
      eosIds: [7],
    });
    expect(s.layerKinds!.filter((k) => k === 'attention')).toHaveLength(6);
    expect(s.layerKinds![2]).toBe('attention');
    expect(s.zeroCentredNorms).toBeUndefined();
    expect(specFromConfig(configFromSpec(s))).toEqual(s);
  });

  it('derives the MLP width as Lfm2MLP does (llama.cpp’s n_ff type table: 4608, 6912, 8192, 10752)', () => {
    const width = (extra: Config) => specFromConfig({ ...published, ...extra }).intermediate;
    expect(width({ block_ff_dim: 6656 })).toBe(4608);
    expect(width({ block_ff_dim: 10240 })).toBe(6912);
    expect(width({ block_ff_dim: 16128 })).toBe(10752);
    // block_ff_dim before intermediate_size; intermediate_size alone; no adjustment.
    expect(width({ intermediate_size: 999 })).toBe(8192);
    const { block_ff_dim: _, ...noBlock } = published;
    expect(specFromConfig({ ...noBlock, intermediate_size: 6656 }).intermediate).toBe(4608);
    expect(width({ block_auto_adjust_ff_dim: false })).toBe(12288);
    // A null multiplier: two thirds, truncated, not rounded up (llama.cpp's converter rounds it).
    expect(width({ block_ff_dim: 6656, block_ffn_dim_multiplier: null })).toBe(4437);
    expect(width({ block_ff_dim: 6656, block_ffn_dim_multiplier: 1.5, block_multiple_of: 100 })).toBe(6700);
  });

  it('reads the original keys first (theta, tie_embedding), full_attn_idxs, and Transformers 5’s rope_parameters', () => {
    const { layer_types: _, ...rest } = published;
    const s = specFromConfig({
      ...rest,
      theta: 50_000,
      tie_embedding: false,
      tie_word_embeddings: true,
      full_attn_idxs: [1, 3],
    });
    expect(s.rope.theta).toBe(50_000);
    expect(s.tiedEmbeddings).toBe(false);
    expect(s.layerKinds!.slice(0, 5)).toEqual([
      'shortconv',
      'attention',
      'shortconv',
      'attention',
      'shortconv',
    ]);
    const all = specFromConfig({ ...rest, num_hidden_layers: 2 });
    expect(all.layerKinds).toEqual(['attention', 'attention']);
    expect(all.shortConv).toBeUndefined();
    const rp = specFromConfig({
      ...published,
      rope_theta: undefined,
      rope_parameters: { rope_type: 'default', rope_theta: 7e5 },
    });
    expect(rp.rope).toEqual({ theta: 7e5, layout: 'half' });
    const perType = specFromConfig({
      ...published,
      rope_parameters: { full_attention: { rope_type: 'default', rope_theta: 3e5 }, conv: null },
    });
    expect(perType.rope.theta).toBe(3e5);
  });

  it('names the file, key and value of what it refuses', () => {
    const cases: [Config, string, unknown][] = [
      [{ layer_types: ['conv', 'sliding_attention'] }, 'layer_types', ['conv', 'sliding_attention']],
      [{ conv_L_cache: 1 }, 'conv_L_cache', 1],
      [{ is_causal: false }, 'is_causal', false],
      [{ full_attn_idxs: [2, 99] }, 'full_attn_idxs', [2, 99]],
      [{ num_key_value_heads: 5 }, 'num_key_value_heads', 5],
      [{ block_ff_dim: 1 }, 'block_ff_dim', 1],
      [{ quantization_config: { quant_method: 'gptq' } }, 'quantization_config', { quant_method: 'gptq' }],
    ];
    for (const [change, key, value] of cases) {
      const config = { ...published, ...change };
      if (key === 'full_attn_idxs') delete config.layer_types;
      const e = formatError(() => specFromConfig(config, 'lfm2/config.json'));
      expect(e.file).toBe('lfm2/config.json');
      expect(e.field, JSON.stringify(change)).toBe(key);
      expect(e.value).toEqual(value);
    }
  });
});

describe('LFM2 spec switches', () => {
  it('the fixture is four layers, conv conv attention conv, with an adjusted MLP of 104', () => {
    const s: ModelSpec = specFromConfig(CONFIG);
    expect(s.layerKinds).toEqual(['shortconv', 'shortconv', 'attention', 'shortconv']);
    expect([s.hidden, s.heads, s.kvHeads, s.headDim, s.intermediate]).toEqual([64, 4, 2, 16, 104]);
    expect(s.shortConv).toEqual({ kernel: 3, bias: false });
    expect(
      [...weightShapes(s)].filter(([n]) => n.startsWith('model.layers.0.') || !n.startsWith('model.layers.')),
    ).toEqual([
      ['model.embed_tokens.weight', [512, 64]],
      ['model.layers.0.operator_norm.weight', [64]],
      ['model.layers.0.conv.in_proj.weight', [192, 64]],
      ['model.layers.0.conv.conv.weight', [64, 1, 3]],
      ['model.layers.0.conv.out_proj.weight', [64, 64]],
      ['model.layers.0.ffn_norm.weight', [64]],
      ['model.layers.0.feed_forward.w1.weight', [104, 64]],
      ['model.layers.0.feed_forward.w3.weight', [104, 64]],
      ['model.layers.0.feed_forward.w2.weight', [64, 104]],
      ['model.embedding_norm.weight', [64]],
    ]);
    const attn = [...weightShapes(s).keys()].filter((n) => n.startsWith('model.layers.2.self_attn.'));
    expect(attn).toEqual([
      'model.layers.2.self_attn.q_proj.weight',
      'model.layers.2.self_attn.k_proj.weight',
      'model.layers.2.self_attn.v_proj.weight',
      'model.layers.2.self_attn.q_layernorm.weight',
      'model.layers.2.self_attn.k_layernorm.weight',
      'model.layers.2.self_attn.out_proj.weight',
    ]);
  });
});
