// A draft head for the tiny Gemma 4 (`fixtureFiles('gemma4', 'f32', HEAD_SEED)`), trained here on
// the target itself, for the tests of speculation with a head over Gemma 4 (gemma4.head.test.ts on
// the CPU reference, gemma4.head.gpu.test.ts on the GPU). The head's layer is left out (o_proj and
// down_proj zero, so its output is its input z) and its input projection fc is the ridge
// least-squares map from [rmsnorm(E[x_p]) ; rmsnorm(f_{p-1})] to the target's own next feature f_p
// (RMS-normed: the head scores through the target's final norm, so only f_p's direction counts),
// fitted on the target's greedy and sampled continuations of random prompts. Its draft vocabulary
// is the whole target vocabulary.
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { writeSafetensors } from '../../src/formats/safetensors.js';
import { headShapes, headSpecFromConfig } from '../../src/model/draft/head.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { fixtureFiles, headFixtureFiles } from '../fixtures/write.js';
import { rng } from './random.js';

/** The seed of the tiny Gemma 4 target the head is trained for. */
export const HEAD_SEED = 7;

/** x / rms(x) (RMSNorm without a weight, ε 1e-6). */
function normed(x: Float32Array): Float32Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const r = 1 / Math.sqrt(ss / x.length + 1e-6);
  return x.map((v) => v * r);
}

/** Solves A X = B in place for X (A [n, n], B [n, m], row-major; Gaussian elimination with pivoting). */
function solve(a: Float64Array, b: Float64Array, n: number, m: number): Float64Array {
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(a[r * n + c]!) > Math.abs(a[p * n + c]!)) p = r;
    for (const [mat, w] of [
      [a, n],
      [b, m],
    ] as const)
      for (let k = 0; k < w; k++) {
        const t = mat[c * w + k]!;
        mat[c * w + k] = mat[p * w + k]!;
        mat[p * w + k] = t;
      }
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = a[r * n + c]! / a[c * n + c]!;
      if (f === 0) continue;
      for (let k = c; k < n; k++) a[r * n + k]! -= f * a[c * n + k]!;
      for (let k = 0; k < m; k++) b[r * m + k]! -= f * b[c * m + k]!;
    }
  }
  for (let r = 0; r < n; r++) for (let k = 0; k < m; k++) b[r * m + k]! /= a[r * n + r]!;
  return b;
}

/** The files of the head the header describes: config.json and model.safetensors. */
export async function trainedHeadFiles(): Promise<Map<string, Uint8Array>> {
  const { files } = fixtureFiles('gemma4', 'f32', HEAD_SEED);
  const opened = await openModel(memoryModelFiles('gemma4', files));
  const weights = await readAllF32(opened.weights);
  const spec = opened.spec;
  const H = spec.hidden;
  const V = spec.vocabSize;
  const target = new ReferenceRunner(spec, mapWeights(weights), { capacity: 128 });
  const embed = weights['model.embed_tokens.weight']!.data; // [V, H]
  // Sequences: random prompts of 8 continued by the target for 56 tokens, greedily or at T = 1.
  const rand = rng(HEAD_SEED + 100);
  const inputs: Float32Array[] = [];
  const outputs: Float32Array[] = [];
  for (let s = 0; s < 16; s++) {
    const ids = Array.from({ length: 8 }, () => Math.floor(rand() * V));
    let logits = target.logitsFor(ids);
    for (let i = 0; i < 56; i++) {
      const last = logits.subarray(logits.length - V);
      let next = 0;
      if (s % 2 === 0) for (let v = 1; v < V; v++) next = last[v]! > last[next]! ? v : next;
      else {
        const max = Math.max(...last);
        const p = last.map((l) => Math.exp(l - max));
        let u = rand() * p.reduce((a, b) => a + b, 0);
        while (next < V - 1 && u > p[next]!) u -= p[next++]!;
      }
      ids.push(next);
      logits = target.prefill([next]);
    }
    const f = await target.features(0, ids.length);
    for (let p = 1; p < ids.length; p++) {
      const x = normed(embed.subarray(ids[p]! * H, (ids[p]! + 1) * H));
      const u = new Float32Array(2 * H);
      u.set(x);
      u.set(normed(f.subarray((p - 1) * H, p * H)), H);
      inputs.push(u);
      outputs.push(normed(f.subarray(p * H, (p + 1) * H)));
    }
  }
  // fcᵀ = (U Uᵀ + λ I)⁻¹ U Yᵀ over the samples (U [2H, N], Y [H, N]).
  const n = 2 * H;
  const uu = new Float64Array(n * n);
  const uy = new Float64Array(n * H);
  for (let s = 0; s < inputs.length; s++) {
    const u = inputs[s]!;
    const y = outputs[s]!;
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) uu[i * n + j]! += u[i]! * u[j]!;
      for (let j = 0; j < H; j++) uy[i * H + j]! += u[i]! * y[j]!;
    }
  }
  for (let i = 0; i < n; i++) uu[i * n + i]! += 1e-2 * inputs.length;
  const fcT = solve(uu, uy, n, H); // [2H, H]
  const fc = new Float32Array(H * n);
  for (let o = 0; o < H; o++) for (let i = 0; i < n; i++) fc[o * n + i] = fcT[i * H + o]!;

  const head = headFixtureFiles('gemma4', HEAD_SEED, 1);
  const config = JSON.parse(new TextDecoder().decode(head.get('config.json')!));
  const shapes = headShapes(headSpecFromConfig(config, 'head/config.json'));
  const d2t = Int32Array.from({ length: V }, (_, j) => j);
  const tensors = [...shapes].map(([name, shape]) => {
    const size = shape.reduce((a, b) => a * b, 1);
    const data =
      name === 'fc.weight'
        ? fc
        : name.endsWith('norm.weight') || name.startsWith('norm_')
          ? new Float32Array(size).fill(1)
          : new Float32Array(size); // the layer's projections: zero, so g = z
    return name === 'd2t'
      ? { name, dtype: 'I32' as const, shape, data: new Uint8Array(d2t.buffer) }
      : { name, dtype: 'F32' as const, shape, data: new Uint8Array(data.buffer) };
  });
  return new Map([
    ['config.json', head.get('config.json')!],
    ['model.safetensors', writeSafetensors(tensors)],
  ]);
}
