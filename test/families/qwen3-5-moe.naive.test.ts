import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors, readAllF32 } from '../../src/model/weights.js';
import { type NaiveMoe, naiveMoe } from '../fixtures/naive-moe.js';
import { naiveQwen35 } from '../fixtures/naive-qwen35.js';
import { randomWeights } from '../fixtures/reference.js';
import { configFixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

// Qwen3.5-MoE's reference against an independent f64 oracle: Qwen3.5's (test/fixtures/naive-qwen35.ts,
// from `Qwen3_5TextModel`, its delta rule chunked) with `Qwen3_5MoeSparseMoeBlock` on every layer
// (test/fixtures/naive-moe.ts: softmax, top-k always renormalised, the shared expert times
// sigmoid(shared_expert_gate · h)), read from the config.json's keys, not from weft's code.

type Config = Record<string, unknown>;

function hfMoe(text: Config): NaiveMoe {
  const n = (k: string, d: number) => (typeof text[k] === 'number' ? (text[k] as number) : d);
  return {
    experts: n('num_experts', 256),
    topK: n('num_experts_per_tok', 8),
    scoring: 'softmax',
    normTopK: true,
    normEps: 0,
    scale: 1,
    router: 'mlp.gate.weight',
    gate: 'mlp.experts.{e}.gate_proj.weight',
    up: 'mlp.experts.{e}.up_proj.weight',
    down: 'mlp.experts.{e}.down_proj.weight',
    shared: {
      gate: 'mlp.shared_expert.gate_proj.weight',
      up: 'mlp.shared_expert.up_proj.weight',
      down: 'mlp.shared_expert.down_proj.weight',
      router: 'mlp.shared_expert_gate.weight',
    },
  };
}

const CONFIG = tinyConfig('qwen3_5_moe');
const TEXT = CONFIG.text_config as Config;
const naive = (spec: ModelSpec, source: NamedTensors, tokens: readonly number[]) =>
  naiveQwen35(spec, source, tokens, 4, undefined, (l, h) =>
    naiveMoe(hfMoe(TEXT), source, `model.layers.${l}`, h),
  );

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

const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21, 300, 77];

async function load(files: Map<string, Uint8Array>): Promise<{ spec: ModelSpec; weights: NamedTensors }> {
  const opened = await openModel(memoryModelFiles('qwen3-5-moe', files));
  return { spec: opened.spec, weights: mapWeights(await readAllF32(opened.weights)) };
}

describe('Qwen3.5-MoE reference forward vs the independent implementation', () => {
  for (const seed of [31, 32]) {
    it(`seed ${seed}: logits agree, greedy ids equal`, () => {
      const spec = specFromConfig(CONFIG);
      const source = randomWeights(spec, seed);
      const want = naive(spec, source, PROMPT);
      const got = new ReferenceRunner(spec, source).logitsFor(PROMPT);
      expectClose(got, want.flat());
      const V = spec.vocabSize;
      expect(want.map((_, t) => argmax(got.subarray(t * V, (t + 1) * V)))).toEqual(want.map(argmax));
    });
  }

  it('the shared expert counts: without its output the logits move', () => {
    const spec = specFromConfig(CONFIG);
    const source = randomWeights(spec, 31);
    const { shared: _, ...routed } = hfMoe(TEXT);
    const without = naiveQwen35(spec, source, PROMPT, 4, undefined, (l, h) =>
      naiveMoe(routed, source, `model.layers.${l}`, h),
    ).flat();
    const got = new ReferenceRunner(spec, source).logitsFor(PROMPT);
    const diff = without.reduce((m, v, i) => Math.max(m, Math.abs(v - got[i]!)), 0);
    expect(diff).toBeGreaterThan(0.01);
  });

  it('config.json written from a spec reads back as the same spec (text config and wrapper)', () => {
    const spec = specFromConfig(CONFIG);
    expect(spec.moe?.sharedIntermediate).toBe(48);
    expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
  });

  it('the published fused experts (gate_up_proj, down_proj) and per-expert tensors load the same', async () => {
    const { files, tensors } = configFixtureFiles(CONFIG, 5);
    const fused = await load(files);
    const apart = new Map(files);
    apart.set('model.safetensors', safetensorsBytes(tensors, 'F32'));
    const plain = await load(apart);
    expect(plain.spec).toEqual(fused.spec);
    for (const t of tensors) expect(fused.weights.get(t.name).data, t.name).toEqual(t.data);
    const a = new ReferenceRunner(fused.spec, fused.weights).logitsFor(PROMPT);
    expect(new ReferenceRunner(plain.spec, plain.weights).logitsFor(PROMPT)).toEqual(a);
    expectClose(a, naive(fused.spec, fused.weights, PROMPT).flat());
  });

  it.each([
    [
      'num_experts_per_tok',
      7,
      /config\.json: text_config\.num_experts_per_tok = 7: must be at most num_experts \(6\)/,
    ],
    [
      'shared_expert_intermediate_size',
      0,
      /config\.json: text_config\.shared_expert_intermediate_size = 0: must be a positive integer/,
    ],
    ['num_experts', 1.5, /config\.json: text_config\.num_experts = 1\.5: must be a positive integer/],
  ] as const)('refuses %s = %j naming the file, key and value', (key, value, message) => {
    const bad = { ...CONFIG, text_config: { ...TEXT, [key]: value } };
    expect(() => specFromConfig(bad)).toThrow(ModelFormatError);
    expect(() => specFromConfig(bad)).toThrow(message);
  });
});
