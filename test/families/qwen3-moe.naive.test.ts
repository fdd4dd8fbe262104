import { describe, expect, it } from 'vitest';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { configFromSpec, specFromConfig } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { mapWeights, type NamedTensors, readAllF32 } from '../../src/model/weights.js';
import { type NaiveMoe, naiveMoe, naiveRoute } from '../fixtures/naive-moe.js';
import { randomWeights } from '../fixtures/reference.js';
import { configFixtureFiles, safetensorsBytes, tinyConfig } from '../fixtures/write.js';

// An independent oracle for Qwen3-MoE (weft's reference with the moe block), written from Hugging
// Face's `Qwen3MoeForCausalLM` (modeling_qwen3_moe.py: `Qwen3MoeAttention` with its per-head
// q_norm / k_norm, rotate_half RoPE, `Qwen3MoeDecoderLayer`'s choice of a sparse block or a dense
// `Qwen3MoeMLP`) and not from weft's code: whole sequence at once, f64, matrices as number[][],
// switches read from the config.json's keys; the mixture is test/fixtures/naive-moe.ts.

type Matrix = number[][];
type Config = Record<string, unknown>;

const rows = (source: NamedTensors, name: string): Matrix => {
  const t = source.get(name);
  const cols = t.shape[t.shape.length - 1]!;
  return Array.from({ length: t.data.length / cols }, (_, r) =>
    Array.from(t.data.subarray(r * cols, (r + 1) * cols)),
  );
};
const vec = (source: NamedTensors, name: string) => Array.from(source.get(name).data);
const dot = (a: readonly number[], b: readonly number[]) => a.reduce((acc, v, i) => acc + v * b[i]!, 0);
const linear = (x: Matrix, w: Matrix): Matrix => x.map((r) => w.map((wr) => dot(wr, r)));
const silu = (v: number) => v / (1 + Math.exp(-v));
function rmsnorm(x: readonly number[], w: readonly number[], eps: number): number[] {
  const r = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length + eps);
  return x.map((v, i) => v * r * w[i]!);
}

/** What `Qwen3MoeConfig` and `Qwen3MoeDecoderLayer` make of a config.json. */
function hf(c: Config) {
  const n = (k: string, d: number) => (typeof c[k] === 'number' ? (c[k] as number) : d);
  const layers = n('num_hidden_layers', 24);
  const heads = n('num_attention_heads', 32);
  const only = (c.mlp_only_layers as number[] | undefined) ?? [];
  const experts = n('num_experts', 128);
  const step = n('decoder_sparse_step', 1);
  const moe: NaiveMoe = {
    experts,
    topK: n('num_experts_per_tok', 8),
    scoring: 'softmax',
    normTopK: c.norm_topk_prob === true,
    normEps: 0,
    scale: 1,
    router: 'mlp.gate.weight',
    gate: 'mlp.experts.{e}.gate_proj.weight',
    up: 'mlp.experts.{e}.up_proj.weight',
    down: 'mlp.experts.{e}.down_proj.weight',
  };
  return {
    layers,
    heads,
    kvHeads: n('num_key_value_heads', 4),
    headDim: n('head_dim', n('hidden_size', 2048) / heads),
    eps: n('rms_norm_eps', 1e-6),
    theta: n('rope_theta', 10000),
    tied: c.tie_word_embeddings === true,
    sparse: (l: number) => !only.includes(l) && experts > 0 && (l + 1) % step === 0,
    moe,
  };
}

function attention(cfg: ReturnType<typeof hf>, source: NamedTensors, l: number, h: Matrix): Matrix {
  const p = `model.layers.${l}.self_attn`;
  const D = cfg.headDim;
  const inv = Array.from({ length: D / 2 }, (_, i) => 1 / cfg.theta ** ((2 * i) / D));
  const rope = (row: number[], pos: number) =>
    row.map((v, d) => {
      const a = pos * inv[d % (D / 2)]!;
      return d < D / 2
        ? v * Math.cos(a) - row[d + D / 2]! * Math.sin(a)
        : v * Math.cos(a) + row[d - D / 2]! * Math.sin(a);
    });
  const split = (x: Matrix, n: number) =>
    Array.from({ length: n }, (_, j) => x.map((r) => r.slice(j * D, (j + 1) * D)));
  const qn = vec(source, `${p}.q_norm.weight`);
  const kn = vec(source, `${p}.k_norm.weight`);
  const q = split(linear(h, rows(source, `${p}.q_proj.weight`)), cfg.heads).map((hd) =>
    hd.map((r, t) => rope(rmsnorm(r, qn, cfg.eps), t)),
  );
  const k = split(linear(h, rows(source, `${p}.k_proj.weight`)), cfg.kvHeads).map((hd) =>
    hd.map((r, t) => rope(rmsnorm(r, kn, cfg.eps), t)),
  );
  const v = split(linear(h, rows(source, `${p}.v_proj.weight`)), cfg.kvHeads);
  const rep = cfg.heads / cfg.kvHeads;
  const out = q.map((qh, n) =>
    qh.map((qi, i) => {
      const kh = k[Math.floor(n / rep)]!;
      const vh = v[Math.floor(n / rep)]!;
      const s = kh.slice(0, i + 1).map((kj) => dot(qi, kj) / Math.sqrt(D));
      const m = Math.max(...s);
      const e = s.map((x) => Math.exp(x - m));
      const z = e.reduce((a, b) => a + b, 0);
      return Array.from({ length: D }, (_, d) => e.reduce((a, pj, j) => a + (pj / z) * vh[j]![d]!, 0));
    }),
  );
  return linear(
    h.map((_, t) => out.flatMap((hd) => hd[t]!)),
    rows(source, `${p}.o_proj.weight`),
  );
}

/** Qwen3MoeForCausalLM's logits [T][V]. */
function naiveQwen3Moe(config: Config, source: NamedTensors, tokens: readonly number[]): Matrix {
  const cfg = hf(config);
  const embed = rows(source, 'model.embed_tokens.weight');
  let x: Matrix = tokens.map((t) => [...embed[t]!]);
  const add = (y: Matrix) => {
    x = x.map((r, t) => r.map((v, i) => v + y[t]![i]!));
  };
  for (let l = 0; l < cfg.layers; l++) {
    const p = `model.layers.${l}`;
    add(
      attention(
        cfg,
        source,
        l,
        x.map((r) => rmsnorm(r, vec(source, `${p}.input_layernorm.weight`), cfg.eps)),
      ),
    );
    const h = x.map((r) => rmsnorm(r, vec(source, `${p}.post_attention_layernorm.weight`), cfg.eps));
    if (cfg.sparse(l)) add(naiveMoe(cfg.moe, source, p, h));
    else {
      const g = linear(h, rows(source, `${p}.mlp.gate_proj.weight`));
      const u = linear(h, rows(source, `${p}.mlp.up_proj.weight`));
      add(
        linear(
          g.map((r, t) => r.map((v, i) => silu(v) * u[t]![i]!)),
          rows(source, `${p}.mlp.down_proj.weight`),
        ),
      );
    }
  }
  const final = x.map((r) => rmsnorm(r, vec(source, 'model.norm.weight'), cfg.eps));
  return linear(final, cfg.tied ? embed : rows(source, 'lm_head.weight'));
}

const argmax = (r: ArrayLike<number>) => Array.from(r).reduce((b, v, i, a) => (v > a[b]! ? i : b), 0);

function expectClose(got: ArrayLike<number>, want: readonly number[]): void {
  expect(got.length).toBe(want.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  expect(scale).toBeGreaterThan(0.5);
  // f32 rounding over three layers of width <= 128: a few 1e-7 of the scale.
  expect(diff).toBeLessThanOrEqual(2e-5 * scale);
}

const CONFIG = tinyConfig('qwen3_moe');
/** Other switches: no renormalisation, a mixture on every second layer, one KV head, an untied head. */
const SWITCHED: Config = {
  ...CONFIG,
  num_hidden_layers: 4,
  num_key_value_heads: 1,
  norm_topk_prob: false,
  decoder_sparse_step: 2,
  mlp_only_layers: [3],
  num_experts_per_tok: 3,
  tie_word_embeddings: false,
};
const PROMPT = [5, 17, 3, 42, 8, 8, 29, 1, 36, 12, 0, 21, 300, 77];

describe('Qwen3-MoE reference forward vs the independent implementation', () => {
  for (const [label, config] of [
    ['fixture', CONFIG],
    ['switched', SWITCHED],
  ] as const) {
    for (const seed of [31, 32]) {
      it(`${label}, seed ${seed}: logits agree, greedy ids equal`, () => {
        const spec = specFromConfig(config);
        const source = randomWeights(spec, seed);
        const want = naiveQwen3Moe(config, source, PROMPT);
        const got = new ReferenceRunner(spec, source).logitsFor(PROMPT);
        expectClose(got, want.flat());
        const V = spec.vocabSize;
        const ids = want.map((_, t) => argmax(got.subarray(t * V, (t + 1) * V)));
        expect(ids).toEqual(want.map(argmax));
      });
    }
  }

  it('routes different tokens to different experts, and a dense layer is dense', () => {
    const spec = specFromConfig(CONFIG);
    expect(spec.moe?.layers).toEqual([true, false, true]);
    const source = randomWeights(spec, 31);
    const H = spec.hidden;
    const chosen = new Set<number>();
    for (const t of PROMPT) {
      const x = Array.from(source.get('model.embed_tokens.weight').data.subarray(t * H, (t + 1) * H));
      for (const e of naiveRoute(hf(CONFIG).moe, source, 'model.layers.0', x).chosen) chosen.add(e);
    }
    expect(chosen.size).toBeGreaterThanOrEqual(4);
  });
});

describe('Qwen3-MoE config and checkpoints', () => {
  it('config.json written from a spec reads back as the same spec', () => {
    for (const config of [CONFIG, SWITCHED]) {
      const spec = specFromConfig(config);
      expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
    }
  });

  async function load(files: Map<string, Uint8Array>): Promise<{ spec: ModelSpec; weights: NamedTensors }> {
    const opened = await openModel(memoryModelFiles('qwen3-moe', files));
    return { spec: opened.spec, weights: mapWeights(await readAllF32(opened.weights)) };
  }

  it('per-expert and Transformers 5 fused experts (gate_up_proj, down_proj) load the same and give the same logits', async () => {
    const { spec, tensors, files } = configFixtureFiles(CONFIG, 5);
    const byName = new Map(tensors.map((t) => [t.name, t]));
    const E = 6;
    const I = 48;
    const H = spec.hidden;
    // Written here, not by weft: [E, 2I, H] with each expert's gate rows then its up rows, and [E, H, I].
    const fused = tensors.filter((t) => !t.name.includes('.mlp.experts.'));
    for (const l of [0, 2]) {
      const at = (e: number, n: string) => byName.get(`model.layers.${l}.mlp.experts.${e}.${n}.weight`)!.data;
      const gateUp = new Float32Array(E * 2 * I * H);
      const down = new Float32Array(E * H * I);
      for (let e = 0; e < E; e++) {
        gateUp.set(at(e, 'gate_proj'), e * 2 * I * H);
        gateUp.set(at(e, 'up_proj'), (e * 2 + 1) * I * H);
        down.set(at(e, 'down_proj'), e * H * I);
      }
      fused.push({ name: `model.layers.${l}.mlp.experts.gate_up_proj`, shape: [E, 2 * I, H], data: gateUp });
      fused.push({ name: `model.layers.${l}.mlp.experts.down_proj`, shape: [E, H, I], data: down });
    }
    const other = new Map(files);
    other.set('model.safetensors', safetensorsBytes(fused, 'F32'));
    const a = await load(files);
    const b = await load(other);
    expect(b.spec).toEqual(a.spec);
    for (const name of [
      'model.layers.2.mlp.experts.5.up_proj.weight',
      'model.layers.0.mlp.experts.3.down_proj.weight',
    ])
      expect(b.weights.get(name).data).toEqual(a.weights.get(name).data);
    const la = new ReferenceRunner(a.spec, a.weights).logitsFor(PROMPT);
    expect(new ReferenceRunner(b.spec, b.weights).logitsFor(PROMPT)).toEqual(la);
    expectClose(la, naiveQwen3Moe(CONFIG, a.weights, PROMPT).flat());
    // A fused stack of the wrong shape is refused by name.
    const short = fused.map((t) =>
      t.name === 'model.layers.2.mlp.experts.down_proj'
        ? { ...t, shape: [E, H, I - 16], data: t.data.subarray(0, E * H * (I - 16)) }
        : t,
    );
    other.set('model.safetensors', safetensorsBytes(short, 'F32'));
    await expect(load(other)).rejects.toThrow(
      /model\.layers\.2\.mlp\.experts\.down_proj.*wrong shape, expected \[6, 64, 48\]/,
    );
  });

  it.each([
    ['num_experts_per_tok', 7, /config\.json: num_experts_per_tok = 7: must be at most num_experts \(6\)/],
    ['mlp_only_layers', [3], /config\.json: mlp_only_layers = \[3\]: must list layer indices below/],
    ['num_experts', -1, /config\.json: num_experts = -1: must be a non-negative integer/],
    ['moe_intermediate_size', 0, /config\.json: moe_intermediate_size = 0: must be a positive integer/],
  ] as const)('refuses %s = %j naming the file, key and value', (key, value, message) => {
    const e = (() => {
      try {
        specFromConfig({ ...CONFIG, [key]: value });
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    expect(e).toBeInstanceOf(ModelFormatError);
    expect((e as Error).message).toMatch(message);
  });

  it('ignores the training-only router keys', () => {
    const spec = specFromConfig(CONFIG);
    expect(specFromConfig({ ...CONFIG, output_router_logits: true, router_aux_loss_coef: 0.5 })).toEqual(
      spec,
    );
  });
});
