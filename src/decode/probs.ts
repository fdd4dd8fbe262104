import { allowedTokens, argmax } from '../kernels/sample/gumbel.js';
import { childrenRef, type RankedChild } from '../kernels/sample/topk.js';
import type { RankSpec, SamplerSpec } from '../model/runner.js';

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
 * ancestors. The computation is {@link childrenRef}, the reference of the GPU kernel that runners
 * with `lastChildren` run instead (kernels/sample/topk).
 */
export function rankChildren(
  logits: ArrayLike<number>,
  position: number,
  sampler: RankSpec,
  k: number,
): RankedChild[] {
  return childrenRef(logits, position, sampler, k);
}
