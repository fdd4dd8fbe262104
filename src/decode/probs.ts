import { allowedTokens, argmax, gumbelKey, gumbelScore } from '../kernels/sample/gumbel.js';
import type { SamplerSpec } from '../model/runner.js';

/**
 * The distribution a sampler draws from at one row: softmax(ℓ / T) over the tokens that survive
 * top-k / top-p (the same upper set {@link allowedTokens} and the GPU kernel keep), zero elsewhere,
 * in f64. At temperature 0 it is the one-hot of the argmax. This is what the classic rejection rule
 * needs for p (target) and q (draft): the same filtered, tempered row the Gumbel-argmax samples.
 */
export function samplingProbs(logits: ArrayLike<number>, sampler: SamplerSpec): Float64Array {
  const V = logits.length;
  const out = new Float64Array(V);
  if (sampler.temperature <= 0) {
    out[argmax(logits)] = 1;
    return out;
  }
  const ok = allowedTokens(logits, sampler);
  const invT = 1 / sampler.temperature;
  let m = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < V; v++) if (ok[v]) m = Math.max(m, logits[v]!);
  let z = 0;
  for (let v = 0; v < V; v++) {
    if (!ok[v]) continue;
    out[v] = Math.exp((logits[v]! - m) * invT);
    z += out[v]!;
  }
  for (let v = 0; v < V; v++) out[v]! /= z;
  return out;
}

/** One child a drafter offers at a node: a token and the log of its ranking weight. */
export interface RankedChild {
  readonly token: number;
  /** log of the child's weight in (0, 1]; summed along a path it orders best-first trees. */
  readonly logWeight: number;
}

/**
 * The `k` best children of one draft row, best first, for tree drafting with shared noise.
 *
 * Greedy (T = 0): the k largest logits (ties to the lower id), weighted by softmax(ℓ).
 * Sampling: the tokens allowed by top-k / top-p ranked by their perturbed score
 * s_v = ℓ_v / T + G(seed, position, v), the score the target maximises with the same noise, so the
 * first child is exactly the drafter's own Gumbel-argmax (what a chain would propose) and the
 * others are the next best by perturbed score. They are weighted by softmax(s) over the allowed
 * set: with the noise fixed, that is the drafter's belief that the target's coupled choice is v
 * (where draft and target logits are close, the perturbed winner is nearly certain), so cumulative
 * log weights rank nodes by how likely the target's own choices walk into them. Weights are ≤ 1,
 * so a child never outranks its parent and the best N nodes of a tree always include their
 * ancestors.
 */
export function rankChildren(
  logits: ArrayLike<number>,
  position: number,
  sampler: SamplerSpec,
  k: number,
): RankedChild[] {
  const V = logits.length;
  const score = new Float64Array(V).fill(Number.NEGATIVE_INFINITY);
  if (sampler.temperature <= 0) {
    for (let v = 0; v < V; v++) score[v] = logits[v]!;
  } else {
    // The same f32 score sampleRef maximises, so child 0 is sampleRef's token.
    const invT = Math.fround(1 / sampler.temperature);
    const ok = allowedTokens(logits, sampler);
    const key = gumbelKey(sampler.seed, position);
    for (let v = 0; v < V; v++) if (ok[v]) score[v] = gumbelScore(logits[v]!, invT, key, v);
  }
  let m = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < V; v++) m = Math.max(m, score[v]!);
  let z = 0;
  for (let v = 0; v < V; v++) if (score[v]! > Number.NEGATIVE_INFINITY) z += Math.exp(score[v]! - m);
  // Partial selection of the k best, ties to the lower id (as argmax and sampleRef break them).
  const best: number[] = [];
  for (let v = 0; v < V; v++) {
    if (score[v] === Number.NEGATIVE_INFINITY) continue;
    let at = best.length;
    while (at > 0 && score[best[at - 1]!]! < score[v]!) at--;
    if (at < k) {
      best.splice(at, 0, v);
      if (best.length > k) best.pop();
    }
  }
  return best.map((token) => ({ token, logWeight: Math.min(0, score[token]! - m - Math.log(z)) }));
}
