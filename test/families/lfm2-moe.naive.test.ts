import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { naiveLfm2 } from '../fixtures/naive-lfm2.js';
import { type NaiveMoe, naiveMoe, naiveRoute } from '../fixtures/naive-moe.js';
import { randomWeights } from '../fixtures/reference.js';
import { tinyConfig } from '../fixtures/write.js';

// LFM2-MoE's reference against an independent f64 oracle: LFM2's (test/fixtures/naive-lfm2.ts,
// from `Lfm2ForCausalLM`) with `Lfm2MoeDecoderLayer`'s feed-forward: `Lfm2MoeMLP` of
// `intermediate_size` as it is on the first `num_dense_layers` layers, else `Lfm2MoeSparseMoeBlock`
// (test/fixtures/naive-moe.ts: sigmoid scores, `expert_bias` for choosing, renormalised + 1e-6,
// times `routed_scaling_factor`), read from the config.json's keys, not from weft's code.

type Config = Record<string, unknown>;

function hfMoe(c: Config): { dense: number; moe: NaiveMoe } {
  const n = (k: string, d: number) => (typeof c[k] === 'number' ? (c[k] as number) : d);
  return {
    dense: n('num_dense_layers', 2),
    moe: {
      experts: n('num_experts', 32),
      topK: n('num_experts_per_tok', 4),
      scoring: 'sigmoid',
      normTopK: c.norm_topk_prob !== false,
      normEps: 1e-6,
      scale: n('routed_scaling_factor', 1),
      router: 'feed_forward.gate.weight',
      ...(c.use_expert_bias === false ? {} : { bias: 'feed_forward.expert_bias' }),
      gate: 'feed_forward.experts.{e}.w1.weight',
      up: 'feed_forward.experts.{e}.w3.weight',
      down: 'feed_forward.experts.{e}.w2.weight',
    },
  };
}

const naive = (config: Config, source: Parameters<typeof naiveLfm2>[1], tokens: readonly number[]) => {
  const { dense, moe } = hfMoe(config);
  return naiveLfm2(config, source, tokens, undefined, (l, h) =>
    l < dense ? undefined : naiveMoe(moe, source, `model.layers.${l}`, h),
  );
};

const argmax = (r: ArrayLike<number>) => Array.from(r).reduce((b, v, i, a) => (v > a[b]! ? i : b), 0);

function expectClose(got: ArrayLike<number>, want: readonly number[]): void {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  expect(got.length).toBe(want.length);
  expect(scale).toBeGreaterThan(0.5);
  expect(diff).toBeLessThanOrEqual(2e-5 * scale);
}

const CONFIG = tinyConfig('lfm2_moe');
/** Other switches: no selection bias, a routed scale of 1.5, no renormalisation, two dense layers, 3 of 6. */
const SWITCHED: Config = {
  ...CONFIG,
  use_expert_bias: false,
  routed_scaling_factor: 1.5,
  norm_topk_prob: false,
  num_dense_layers: 2,
  num_experts_per_tok: 3,
  layer_types: ['full_attention', 'conv', 'conv', 'full_attention'],
};
const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21, 300, 77];

describe('LFM2-MoE reference forward vs the independent implementation', () => {
  for (const [label, config] of [
    ['fixture', CONFIG],
    ['switched', SWITCHED],
  ] as const) {
    for (const seed of [31, 32]) {
      it(`${label}, seed ${seed}: logits agree, greedy ids equal`, () => {
        const spec = specFromConfig(config);
        const source = randomWeights(spec, seed);
        const want = naive(config, source, PROMPT);
        const got = new ReferenceRunner(spec, source).logitsFor(PROMPT);
        expectClose(got, want.flat());
        const V = spec.vocabSize;
        expect(want.map((_, t) => argmax(got.subarray(t * V, (t + 1) * V)))).toEqual(want.map(argmax));
      });
    }
  }

  it('the selection bias changes which experts run (and so the logits), the dense layer is LFM2-MoE’s MLP', () => {
    const spec = specFromConfig(CONFIG);
    expect(spec.moe?.layers).toEqual([false, true, true, true]);
    expect(spec.intermediate).toBe(96);
    const source = randomWeights(spec, 31);
    const H = spec.hidden;
    const { moe } = hfMoe(CONFIG);
    const unbiased = { ...moe, bias: undefined };
    let differ = 0;
    const chosen = new Set<number>();
    for (const t of PROMPT) {
      const x = Array.from(source.get('model.embed_tokens.weight').data.subarray(t * H, (t + 1) * H));
      const a = naiveRoute(moe, source, 'model.layers.1', x).chosen;
      for (const e of a) chosen.add(e);
      if (a.join() !== naiveRoute(unbiased, source, 'model.layers.1', x).chosen.join()) differ++;
    }
    expect(chosen.size).toBeGreaterThan(2);
    expect(differ).toBeGreaterThan(0);
  });

  it('config.json written from a spec reads back as the same spec', () => {
    for (const config of [CONFIG, SWITCHED]) {
      const spec = specFromConfig(config);
      expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
    }
  });

  it.each([
    ['num_experts_per_tok', 7, /config\.json: num_experts_per_tok = 7: must be at most num_experts \(6\)/],
    ['num_dense_layers', -1, /config\.json: num_dense_layers = -1: must be a non-negative integer/],
    ['routed_scaling_factor', 0, /config\.json: routed_scaling_factor = 0: must be > 0/],
    [
      'layer_types',
      ['conv', 'mamba', 'conv', 'conv'],
      /config\.json: layer_types = .*unknown layer type "mamba"/,
    ],
  ] as const)('refuses %s = %j naming the file, key and value', (key, value, message) => {
    expect(() => specFromConfig({ ...CONFIG, [key]: value })).toThrow(ModelFormatError);
    expect(() => specFromConfig({ ...CONFIG, [key]: value })).toThrow(message);
  });
});
