import { describe, expect, it } from 'vitest';
import {
  GEMMA4_CONFIGS,
  GEMMA4_MOE,
  GEMMA4_PLE,
  type Gemma4Weights,
  gemma4Weights,
  randomGemma4Weights,
} from '../fixtures/gemma4-config.js';
import {
  type Config,
  type Gemma4Tensor,
  gemma4TensorShapes,
  type Matrix,
  naiveGemma4,
  naiveGemma4Route,
} from '../fixtures/naive-gemma4.js';

// Checks of the independent Gemma 4 oracle (test/fixtures/naive-gemma4.ts) on properties that
// must hold whatever its details: against a token-by-token decode with a KV cache written here
// separately for the plainest Gemma 4 (full attention only, every frequency rotating, no per-layer
// inputs, shared KV or mixture), causality, the sliding window's exact reach, the softcap, K = V
// against a V projection equal to K's, the mixture with silent experts against the dense MLP alone,
// and layer_scalar scaling the whole residual stream (the final norm cancels the last one).

const PROMPT = [3, 17, 42, 5, 60, 1, 9, 33, 12, 50, 8, 22, 41, 7];

const maxAbs = (m: Matrix) => Math.max(...m.flat().map(Math.abs));
function maxDiff(a: Matrix, b: Matrix): number {
  expect(a.length).toBe(b.length);
  return Math.max(...a.flatMap((row, t) => row.map((v, i) => Math.abs(v - b[t]![i]!))));
}

/** The weights with some tensors replaced. */
function withTensors(w: Gemma4Weights, changes: Record<string, Gemma4Tensor>): Gemma4Weights {
  return gemma4Weights({ ...w.tensors, ...changes });
}

const filled = (t: Gemma4Tensor, v: number): Gemma4Tensor => ({
  shape: t.shape,
  data: new Float32Array(t.data.length).fill(v),
});

/**
 * The plainest Gemma 4: three full-attention layers (global_head_dim 10 over 1 KV head for 3
 * heads), proportional RoPE rotating every frequency (base 100, so positions matter), no
 * per-layer inputs, no shared KV, no mixture, softcap 15, tied.
 */
const PLAIN: Config = {
  model_type: 'gemma4_text',
  vocab_size: 29,
  hidden_size: 24,
  intermediate_size: 20,
  num_hidden_layers: 3,
  num_attention_heads: 3,
  num_key_value_heads: 1,
  head_dim: 8,
  global_head_dim: 10,
  layer_types: ['full_attention', 'full_attention', 'full_attention'],
  sliding_window: 4,
  rope_parameters: {
    sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
    full_attention: { rope_type: 'proportional', partial_rotary_factor: 1.0, rope_theta: 100 },
  },
  hidden_size_per_layer_input: 0,
  num_kv_shared_layers: 0,
  final_logit_softcapping: 15,
  rms_norm_eps: 1e-6,
  tie_word_embeddings: true,
};

/**
 * The plain model decoded one token at a time from a KV cache, from the Gemma 4 recipe stated
 * directly: embed · √H; per layer x += n₂(o(attn(q, k, v))) with q = RoPE(n_q(Wq n₁x)),
 * k = RoPE(n_k(Wk n₁x)), v = rms(Wv n₁x), softmax(q·k) unscaled; x += n₄(down(gelu(gate n₃x) ·
 * up n₃x)); x *= layer_scalar; logits c · tanh(embed · n(x) / c). Flat Float64Arrays.
 */
function plainDecode(w: Gemma4Weights, tokens: readonly number[]): Matrix {
  const H = 24;
  const D = 10;
  const NH = 3;
  const I = 20;
  const V = 29;
  const eps = 1e-6;
  const f = (name: string) => Float64Array.from(w.get(name).data);
  const norm = (x: Float64Array, g?: Float64Array) => {
    let s = 0;
    for (const v of x) s += v * v;
    const r = 1 / Math.sqrt(s / x.length + eps);
    return x.map((v, i) => v * r * (g ? g[i]! : 1));
  };
  const matvec = (m: Float64Array, x: Float64Array, rows: number) => {
    const cols = x.length;
    const out = new Float64Array(rows);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[r]! += m[r * cols + c]! * x[c]!;
    return out;
  };
  const gelu = (v: number) => 0.5 * v * (1 + Math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  const rotate = (x: Float64Array, pos: number) => {
    const y = new Float64Array(D);
    for (let i = 0; i < D / 2; i++) {
      const angle = pos * 100 ** (-(2 * i) / D);
      const [a, b] = [x[i]!, x[i + D / 2]!];
      y[i] = a * Math.cos(angle) - b * Math.sin(angle);
      y[i + D / 2] = b * Math.cos(angle) + a * Math.sin(angle);
    }
    return y;
  };
  const embed = f('model.embed_tokens.weight');
  const cacheK: Float64Array[][] = [[], [], []];
  const cacheV: Float64Array[][] = [[], [], []];
  return tokens.map((tok, pos) => {
    let x = embed.slice(tok * H, (tok + 1) * H).map((v) => v * Math.fround(Math.sqrt(H)));
    for (let l = 0; l < 3; l++) {
      const p = `model.layers.${l}`;
      const h = norm(x, f(`${p}.input_layernorm.weight`));
      const q = matvec(f(`${p}.self_attn.q_proj.weight`), h, NH * D);
      const k = norm(matvec(f(`${p}.self_attn.k_proj.weight`), h, D), f(`${p}.self_attn.k_norm.weight`));
      const v = norm(matvec(f(`${p}.self_attn.v_proj.weight`), h, D));
      cacheK[l]!.push(rotate(k, pos));
      cacheV[l]!.push(v);
      const heads = new Float64Array(NH * D);
      for (let n = 0; n < NH; n++) {
        const qh = rotate(norm(q.slice(n * D, (n + 1) * D), f(`${p}.self_attn.q_norm.weight`)), pos);
        const scores = cacheK[l]!.map((kj) => kj.reduce((s, kv, d) => s + kv * qh[d]!, 0));
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        cacheV[l]!.forEach((vj, j) => {
          for (let d = 0; d < D; d++) heads[n * D + d]! += (e[j]! / z) * vj[d]!;
        });
      }
      const attn = norm(
        matvec(f(`${p}.self_attn.o_proj.weight`), heads, H),
        f(`${p}.post_attention_layernorm.weight`),
      );
      x = x.map((v, i) => v + attn[i]!);
      const h2 = norm(x, f(`${p}.pre_feedforward_layernorm.weight`));
      const g = matvec(f(`${p}.mlp.gate_proj.weight`), h2, I);
      const u = matvec(f(`${p}.mlp.up_proj.weight`), h2, I);
      const act = g.map((gv, i) => gelu(gv) * u[i]!);
      const mlp = norm(
        matvec(f(`${p}.mlp.down_proj.weight`), act, H),
        f(`${p}.post_feedforward_layernorm.weight`),
      );
      const scalar = w.get(`${p}.layer_scalar`).data[0]!;
      x = x.map((v, i) => (v + mlp[i]!) * scalar);
    }
    const logits = matvec(embed, norm(x, f('model.norm.weight')), V);
    return Array.from(logits, (z) => 15 * Math.tanh(z / 15));
  });
}

describe('the Gemma 4 oracle (test/fixtures/naive-gemma4.ts)', () => {
  it('reads exactly the tensors of its shape list, every one', () => {
    for (const config of Object.values(GEMMA4_CONFIGS)) {
      const w = randomGemma4Weights(config, 1);
      const read = new Set<string>();
      const recording = {
        get: (name: string) => {
          read.add(name);
          return w.get(name);
        },
      };
      naiveGemma4(config, recording, PROMPT.slice(0, 3));
      expect([...read].sort()).toEqual(
        gemma4TensorShapes(config)
          .map(([n]) => n)
          .sort(),
      );
    }
    // KV-shared layers have no K/V projections; K = V full layers no v_proj.
    const names = gemma4TensorShapes(GEMMA4_PLE).map(([n]) => n);
    expect(names).toContain('model.layers.3.self_attn.k_proj.weight');
    expect(names).not.toContain('model.layers.4.self_attn.k_proj.weight');
    expect(names).toContainEqual('model.layers.4.mlp.gate_proj.weight');
    expect(
      gemma4TensorShapes(GEMMA4_PLE).find(([n]) => n === 'model.layers.4.mlp.gate_proj.weight')![1],
    ).toEqual([80, 48]);
    const moe = gemma4TensorShapes(GEMMA4_MOE).map(([n]) => n);
    expect(moe).toContain('model.layers.0.self_attn.v_proj.weight');
    expect(moe).not.toContain('model.layers.1.self_attn.v_proj.weight');
  });

  it('equals a token-by-token decode of the plainest Gemma 4 written separately', () => {
    const w = randomGemma4Weights(PLAIN, 11);
    const want = plainDecode(
      w,
      PROMPT.slice(0, 10).map((t) => t % 29),
    );
    const got = naiveGemma4(
      PLAIN,
      w,
      PROMPT.slice(0, 10).map((t) => t % 29),
    );
    expect(maxAbs(want)).toBeGreaterThan(0.5);
    expect(maxDiff(got, want)).toBeLessThan(1e-12 * maxAbs(want));
  });

  it('is causal: later tokens leave earlier logits as they were', () => {
    for (const config of Object.values(GEMMA4_CONFIGS)) {
      const w = randomGemma4Weights(config, 2);
      const a = naiveGemma4(config, w, PROMPT);
      const b = naiveGemma4(config, w, [...PROMPT.slice(0, 8), 11, 0, 4, 2, 30, 19]);
      expect(b.slice(0, 8)).toEqual(a.slice(0, 8));
      expect(maxDiff(b.slice(8), a.slice(8))).toBeGreaterThan(1e-3);
    }
  });

  it('reaches exactly window - 1 tokens back on each sliding layer', () => {
    // Two sliding layers of window 3, then the (forced) full one: after layer 1, position t sees
    // tokens t - 4 .. t (p - p' < 3 twice), so token 0 reaches position 4 and no further.
    const config: Config = {
      ...GEMMA4_PLE,
      num_hidden_layers: 3,
      layer_types: ['sliding_attention', 'sliding_attention', 'full_attention'],
      sliding_window: 3,
      num_kv_shared_layers: 0,
    };
    const w = randomGemma4Weights(config, 3);
    const ta: Matrix[] = [];
    const tb: Matrix[] = [];
    naiveGemma4(config, w, PROMPT, ta);
    naiveGemma4(config, w, [70, ...PROMPT.slice(1)], tb);
    const moved = (layer: number, t: number) => maxDiff([ta[layer]![t]!], [tb[layer]![t]!]);
    expect(moved(0, 2)).toBeGreaterThan(1e-6);
    expect(moved(0, 3)).toBe(0);
    expect(moved(1, 4)).toBeGreaterThan(1e-6);
    for (let t = 5; t < PROMPT.length; t++) expect(moved(1, t)).toBe(0);
    // The full layer sees all of it.
    expect(moved(2, PROMPT.length - 1)).toBeGreaterThan(1e-6);
  });

  it('caps the logits at c · tanh(logits / c)', () => {
    const w = randomGemma4Weights(GEMMA4_PLE, 4);
    const raw = naiveGemma4({ ...GEMMA4_PLE, final_logit_softcapping: null }, w, PROMPT);
    const capped = naiveGemma4({ ...GEMMA4_PLE, final_logit_softcapping: 2 }, w, PROMPT);
    expect(maxAbs(raw)).toBeGreaterThan(2);
    expect(maxAbs(capped)).toBeLessThan(2);
    const want = raw.map((row) => row.map((z) => 2 * Math.tanh(z / 2)));
    expect(maxDiff(capped, want)).toBeLessThan(1e-12);
  });

  it('takes V from k_proj on full layers with attention_k_eq_v', () => {
    // With as many global KV heads as local ones, K = V equals a v_proj holding k_proj's weights.
    const kEqV: Config = { ...GEMMA4_MOE, num_global_key_value_heads: 2 };
    const w = randomGemma4Weights(kEqV, 5);
    const separate: Config = { ...kEqV, attention_k_eq_v: false };
    const copies: Record<string, Gemma4Tensor> = {};
    for (const l of [1, 3])
      copies[`model.layers.${l}.self_attn.v_proj.weight`] = w.get(
        `model.layers.${l}.self_attn.k_proj.weight`,
      );
    const want = naiveGemma4(separate, withTensors(w, copies), PROMPT);
    const got = naiveGemma4(kEqV, w, PROMPT);
    expect(maxDiff(got, want)).toBe(0);
  });

  it('routes on the residual: top-k of the softmax, renormalised, times per_expert_scale', () => {
    const w = randomGemma4Weights(GEMMA4_MOE, 6);
    const scale = w.get('model.layers.2.router.per_expert_scale').data;
    for (let s = 0; s < 5; s++) {
      const x = Array.from({ length: 40 }, (_, i) => Math.sin(7 * s + i));
      const { probs, chosen, weights } = naiveGemma4Route(GEMMA4_MOE, w, 2, x);
      expect(chosen.length).toBe(2);
      expect(probs[chosen[0]!]!).toBeGreaterThanOrEqual(probs[chosen[1]!]!);
      const rest = probs.filter((_, e) => !chosen.includes(e));
      expect(Math.max(...rest)).toBeLessThanOrEqual(probs[chosen[1]!]!);
      const unscaled = weights.map((v, j) => v / scale[chosen[j]!]!);
      expect(unscaled[0]! + unscaled[1]!).toBeCloseTo(1, 12);
      // RMS-normed first: the scale of x does not matter.
      expect(
        naiveGemma4Route(
          GEMMA4_MOE,
          w,
          2,
          x.map((v) => 9 * v),
        ).chosen,
      ).toEqual(chosen);
    }
  });

  it('with silent experts and a unit post_feedforward_layernorm_1, the mixture adds nothing', () => {
    const w = randomGemma4Weights(GEMMA4_MOE, 7);
    const changes: Record<string, Gemma4Tensor> = {};
    for (let l = 0; l < 4; l++) {
      const p = `model.layers.${l}`;
      changes[`${p}.experts.down_proj`] = filled(w.get(`${p}.experts.down_proj`), 0);
      changes[`${p}.post_feedforward_layernorm_1.weight`] = filled(
        w.get(`${p}.post_feedforward_layernorm_1.weight`),
        1,
      );
    }
    const silent = naiveGemma4(GEMMA4_MOE, withTensors(w, changes), PROMPT);
    const dense = naiveGemma4({ ...GEMMA4_MOE, enable_moe_block: false }, w, PROMPT);
    // norm(norm(h)) differs from norm(h) by eps only.
    expect(maxDiff(silent, dense)).toBeLessThan(1e-5 * maxAbs(dense));
    // The experts do matter otherwise.
    expect(maxDiff(naiveGemma4(GEMMA4_MOE, w, PROMPT), dense)).toBeGreaterThan(1e-2);
  });

  it('multiplies the whole residual stream by layer_scalar (the final norm cancels the last)', () => {
    const w = randomGemma4Weights(GEMMA4_PLE, 8);
    const last = `model.layers.6.layer_scalar`;
    const base = naiveGemma4(GEMMA4_PLE, w, PROMPT);
    const scaled = naiveGemma4(GEMMA4_PLE, withTensors(w, { [last]: filled(w.get(last), 3) }), PROMPT);
    expect(maxDiff(scaled, base)).toBeLessThan(1e-6 * maxAbs(base));
    const middle = `model.layers.3.layer_scalar`;
    const moved = naiveGemma4(GEMMA4_PLE, withTensors(w, { [middle]: filled(w.get(middle), 3) }), PROMPT);
    expect(maxDiff(moved, base)).toBeGreaterThan(1e-2);
  });

  it('reads a gemma4 (ForConditionalGeneration) config by its text_config', () => {
    const wrapped = GEMMA4_CONFIGS.wrapped;
    const w = randomGemma4Weights(wrapped, 9);
    const text = wrapped.text_config as Config;
    expect(
      naiveGemma4(
        wrapped,
        w,
        PROMPT.map((t) => t % 64),
      ),
    ).toEqual(
      naiveGemma4(
        text,
        w,
        PROMPT.map((t) => t % 64),
      ),
    );
  });
});
