import { describe, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { HeadRunner } from '../../src/model/draft/head.js';
import { openMtpHead } from '../../src/model/draft/mtp.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, type NamedTensors, readAllF32, type Tensor } from '../../src/model/weights.js';
import {
  chunkedDelta,
  type DeltaInputs,
  gatedAttention,
  type Matrix,
  matmulT,
  matrix,
  naiveQwen35,
  recurrentDelta,
  rmsnorm,
  silu,
  vector,
} from '../fixtures/naive-qwen35.js';
import { randomWeights, seededRandom, tinyHybridSpec } from '../fixtures/reference.js';
import { qwen35FixtureFiles } from '../fixtures/write.js';

// An independent oracle for the Qwen3.5 reference forward (src/model/reference/reference.ts with the Gated
// DeltaNet block of src/model/blocks/deltanet/reference.ts and the gated attention of blocks/attention.ts),
// written from Hugging Face's `Qwen3_5TextModel` and not from weft's code: whole sequence at once,
// f64 throughout, matrices as number[][], weights read by name from the source. The linear layers
// run the *chunked* gated delta rule (the form of transformers' `torch_chunk_gated_delta_rule`:
// per chunk a cumulative log-decay, a pairwise decay mask, a unit lower-triangular (UT / WY) solve
// for the intra-chunk corrections, and the state carried between chunks), while weft steps the
// recurrence token by token, so the two sides share no algorithm for the delta rule either. The
// chunked form is itself checked against the plain recurrence, in f64, below.

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

// The reference computes in f32 (f32 weights, every intermediate rounded to f32), so each logit
// carries relative rounding errors of a few f32 ulps (2^-24 ≈ 6e-8) per operation, over three
// layers of dot products of width <= 40, norms, a softmax and up to eleven delta-rule steps, each
// amplified by at most O(1) through the normalised layers: a few 1e-7 of the logits' scale (the
// largest |logit|, ~30 here) is what f32 gives (3e-7 measured once the two sides agree), 1e-6 would
// already be unusual. 2e-5 · max|logit| leaves a wide margin over that and is still four orders
// below what a wrong decay, gate, norm or rotation does (the sensitivity test: 6-10% of the scale).
const TOL = 2e-5;

const spec = tinyHybridSpec;

describe('Qwen3.5 reference forward vs the independent chunked matrix implementation', () => {
  const cases: [number, number[]][] = [
    [31, [3, 1, 4, 1, 5, 9, 2, 6, 5, 35]],
    [32, [42, 0, 17, 8, 8, 23, 1, 40, 11, 2, 30]],
  ];
  for (const [seed, tokens] of cases) {
    it(`seed ${seed}: logits of a ${tokens.length}-token sequence agree (delta rule in chunks of 4)`, () => {
      const source = randomWeights(spec, seed);
      const want = naiveQwen35(spec, source, tokens, 4).flat();
      const got = new ReferenceRunner(spec, source).logitsFor(tokens);
      const { maxDiff, scale } = compare(got, want);
      expect(scale).toBeGreaterThan(0.5);
      expect(maxDiff).toBeLessThanOrEqual(TOL * scale);
    });
  }

  it('seed 31: the residual stream after every layer agrees (where a disagreement starts)', () => {
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const trace: Matrix[] = [];
    naiveQwen35(spec, source, tokens, 4, trace);
    const runner = new ReferenceRunner(spec, source);
    const outputs: Float32Array[] = [];
    runner.residualHook = {
      output: (layer, x) => {
        outputs[layer] = x.slice();
      },
    };
    runner.logitsFor(tokens);
    for (let l = 0; l < spec.layers; l++) {
      const { maxDiff, scale } = compare(outputs[l]!, trace[l]!.flat());
      expect(maxDiff, `layer ${l} (${spec.layerKinds![l]}) output`).toBeLessThanOrEqual(TOL * scale);
    }
  });

  it('the chunked delta rule equals the plain recurrence in f64 (chunks of 4, 3 and one chunk)', () => {
    // Stand-alone: random heads with strong and weak decays, over several padded chunks.
    const rand = seededRandom(7);
    const T = 11;
    const dk = 6;
    const dv = 5;
    const l2 = (x: number[]): number[] => {
      const n = Math.sqrt(x.reduce((a, v) => a + v * v, 0));
      return x.map((v) => v / n);
    };
    const rows = (d: number): Matrix =>
      Array.from({ length: T }, () => Array.from({ length: d }, () => 2 * rand() - 1));
    const inputs: DeltaInputs = {
      q: rows(dk).map((r) => l2(r).map((v) => v / Math.sqrt(dk))),
      k: rows(dk).map(l2),
      v: rows(dv),
      beta: Array.from({ length: T }, () => rand()),
      g: Array.from({ length: T }, () => -3 * rand()),
    };
    const want = recurrentDelta(inputs).flat();
    for (const C of [4, 3, 16]) {
      const { maxDiff, scale } = compare(chunkedDelta(inputs, C).flat(), want);
      expect(scale).toBeGreaterThan(0.1);
      expect(maxDiff).toBeLessThanOrEqual(1e-12 * scale);
    }
    // And through the whole model: the logits of either form agree to f64 rounding.
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const recurrent = naiveQwen35(spec, source, tokens, 'recurrent').flat();
    const { maxDiff, scale } = compare(naiveQwen35(spec, source, tokens, 4).flat(), recurrent);
    expect(maxDiff).toBeLessThanOrEqual(1e-12 * scale);
  });

  it('is sensitive: A_log of one layer moved by 0.5 changes the logits beyond the tolerance', () => {
    const source = randomWeights(spec, 31);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 35];
    const base = new ReferenceRunner(spec, source).logitsFor(tokens);
    for (const layer of [0, 2]) {
      const record: Record<string, Tensor> = {};
      for (const name of weightShapes(spec).keys()) record[name] = source.get(name);
      const name = `model.layers.${layer}.linear_attn.A_log`;
      const t = source.get(name);
      record[name] = { shape: t.shape, data: t.data.map((v) => v + 0.5) };
      const perturbed = mapWeights(record);
      const moved = new ReferenceRunner(spec, perturbed).logitsFor(tokens);
      const { maxDiff, scale } = compare(moved, base);
      expect(maxDiff, `layer ${layer}: the perturbation's effect`).toBeGreaterThan(10 * TOL * scale);
      // The oracle follows the reference there too.
      const want = naiveQwen35(spec, perturbed, tokens, 4).flat();
      const check = compare(moved, want);
      expect(check.maxDiff, `layer ${layer}: oracle vs reference, perturbed`).toBeLessThanOrEqual(
        TOL * check.scale,
      );
    }
  });
});

/**
 * The MTP layer's logits for the token after `next`, from the context's residual streams x
 * [L][H] (the target's, before its final norm), independently: entry p (1..L) embeds token p
 * (`next` at L) and reads the target's normed hidden state at p - 1, fc · [norm_e(E[x_p]);
 * norm_h(norm_final(x_{p-1}))], then one gated-attention decoder layer over the entries (causal)
 * with its MLP, mtp.norm and the tied LM head. Zero-centred norms throughout.
 */
function naiveMtp(
  spec: ModelSpec,
  source: NamedTensors,
  tokens: readonly number[],
  next: number,
  x: Matrix,
): number[] {
  const eps = spec.rmsEps;
  const embed = matrix(source, 'model.embed_tokens.weight');
  const mtp: NamedTensors = { get: (n) => source.get(n.replace(/^model\.layers\.0\./, 'mtp.layers.0.')) };
  const ids = [...tokens.slice(1), next];
  const final = vector(source, 'model.norm.weight');
  let z: Matrix = ids.map((id, i) => {
    const e = rmsnorm(embed[id]!, vector(source, 'mtp.pre_fc_norm_embedding.weight'), eps, true);
    const h = rmsnorm(
      rmsnorm(x[i]!, final, eps, true),
      vector(source, 'mtp.pre_fc_norm_hidden.weight'),
      eps,
      true,
    );
    return [...e, ...h];
  });
  z = matmulT(z, matrix(source, 'mtp.fc.weight'));
  const add = (y: Matrix): void => {
    z = z.map((row, t) => row.map((v, i) => v + y[t]![i]!));
  };
  const p = 'mtp.layers.0';
  add(
    gatedAttention(
      spec,
      mtp,
      0,
      z.map((row) => rmsnorm(row, vector(source, `${p}.input_layernorm.weight`), eps, true)),
    ),
  );
  const h2 = z.map((row) => rmsnorm(row, vector(source, `${p}.post_attention_layernorm.weight`), eps, true));
  const gate = matmulT(h2, matrix(source, `${p}.mlp.gate_proj.weight`));
  const up = matmulT(h2, matrix(source, `${p}.mlp.up_proj.weight`));
  add(
    matmulT(
      gate.map((row, t) => row.map((v, i) => silu(v) * up[t]![i]!)),
      matrix(source, `${p}.mlp.down_proj.weight`),
    ),
  );
  const last = rmsnorm(z.at(-1)!, vector(source, 'mtp.norm.weight'), eps, true);
  return matmulT([last], embed)[0]!;
}

describe('Qwen3.5 MTP draft head vs the independent implementation', () => {
  it('the head’s logits for the token after next agree', async () => {
    const { files } = qwen35FixtureFiles(5);
    const opened = await openModel(memoryModelFiles('qwen35', files));
    const source = mapWeights(await readAllF32(opened.weights));
    const s = opened.spec;
    const context = [5, 17, 99, 3, 250, 11, 42];
    const target = new ReferenceRunner(s, source);
    target.prefill(context);
    const head = new HeadRunner(
      await openMtpHead({ name: 'qwen35', spec: s, weights: opened.weights }),
      target,
      64,
    );
    const next = 77;
    await head.forward({ tokens: [...context, next] }, GREEDY, 'last');
    const got = await head.lastLogits();
    const trace: Matrix[] = [];
    naiveQwen35(s, source, context, 'recurrent', trace);
    const want = naiveMtp(s, source, context, next, trace.at(-1)!);
    const { maxDiff, scale } = compare(got, want);
    expect(scale).toBeGreaterThan(0.5);
    expect(maxDiff).toBeLessThanOrEqual(TOL * scale);
  });
});
