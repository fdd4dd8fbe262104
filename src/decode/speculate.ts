import { InvalidInputError } from '../errors.js';
import type { ModelRunner, SamplerSpec } from '../model/runner.js';
import { draftTree } from '../model/tree.js';
import { onlyToken } from './constrained.js';
import type { DraftProposal } from './drafter.js';
import { samplingProbs } from './probs.js';
import { rejectionUniform, rejectionVerify } from './rejection.js';
import { longestAcceptedPath } from './tree.js';

/** What one verification pass keeps. */
export interface VerifyStep {
  /** Accepted draft nodes (indices into the proposal), root to leaf. */
  accepted: number[];
  /** Tokens the target emits: the accepted drafts, then its own next choice (correction or bonus). */
  emitted: number[];
}

/**
 * One target pass over `last` (its latest choice, not yet scored) and a draft tree hung below it,
 * with tree attention. The target's choice at every node comes from its own sampler, with noise
 * keyed by absolute position; a draft child is accepted iff it equals the target's choice at its
 * parent (sample-and-match). Only the accepted path's K/V rows are committed. Every emitted token
 * is the target's own choice, so the output is exactly what plain decoding with the same sampler
 * gives, whatever was drafted (lossless, and exact rather than only in distribution).
 */
export async function verify(
  target: ModelRunner,
  last: number,
  draft: DraftProposal,
  sampler: SamplerSpec,
  masks?: Uint32Array,
): Promise<VerifyStep> {
  // Node 0 is `last`; draft node i becomes node i + 1 and its root-level drafts hang below node 0.
  // Under a grammar, `masks` holds each node's allowed tokens (constrainDraft), so every node's
  // choice is the one plain constrained decoding makes after the same path.
  const tokens = [last, ...draft.tokens];
  const parents = [-1, ...draft.parents.map((p) => p + 1)];
  // A chain of forced tokens, each the only one its parent's mask allows, is the target's own choice
  // whatever its logits: it is all accepted, and only its last row needs scoring (jump-forward).
  if (masks && isForcedChain(draft, masks)) {
    const words = masks.length / tokens.length;
    const [next] = await target.forward(
      { tokens, masks: masks.subarray(draft.tokens.length * words) },
      sampler,
      'last',
    );
    target.commit(tokens.map((_, i) => i));
    return { accepted: draft.tokens.map((_, i) => i), emitted: [...draft.tokens, next!] };
  }
  const choices = await target.forward({ tokens, parents, masks }, sampler, 'all');
  const path = longestAcceptedPath(draftTree(draft.parents), draft.tokens, {
    root: choices[0]!,
    nodes: Array.from(choices.subarray(1)),
  });
  target.commit([0, ...path.nodes.map((i) => i + 1)]);
  return { accepted: path.nodes, emitted: path.tokens };
}

/**
 * Whether `draft` is a non-empty chain whose every node is forced: the only token allowed by its
 * parent's row of `masks` ([1 + nodes, words], row 0 for `last`, as {@link verify} takes them).
 */
function isForcedChain(draft: DraftProposal, masks: Uint32Array): boolean {
  const n = draft.tokens.length;
  const words = masks.length / (n + 1);
  return (
    n > 0 &&
    draft.tokens.every(
      (t, i) => draft.parents[i] === i - 1 && onlyToken(masks.subarray(i * words, (i + 1) * words)) === t,
    )
  );
}

/**
 * One target pass over `last` and a chain of drafts, verified by the classic rejection rule
 * (Leviathan et al.; see rejection.ts): draft i is accepted with probability min(1, p_i(x)/q_i(x)),
 * at the first rejection the token comes from norm(max(0, p_i − q_i)), and after a fully accepted
 * chain a bonus token comes from p_k. p are the target's filtered, tempered rows
 * ({@link samplingProbs}), q the drafter's (one-hot when it offers none: a deterministic draft).
 * Uniforms are keyed by (seed, position), so a seed reproduces the text; the text is an exact
 * sample of the target's distribution, but unlike {@link verify} not the same text as plain
 * sampling with that seed. Only for temperature > 0.
 */
export async function verifyChain(
  target: ModelRunner,
  last: number,
  draft: DraftProposal,
  sampler: SamplerSpec,
  rule: typeof rejectionVerify = rejectionVerify,
): Promise<VerifyStep> {
  if (draft.parents.some((p, i) => p !== i - 1))
    throw new InvalidInputError('verifyChain: the rejection rule verifies chains only, got a tree');
  if (!(sampler.temperature > 0))
    throw new InvalidInputError(`verifyChain: needs temperature > 0, got ${sampler.temperature}`);
  if (!target.lastLogits)
    throw new InvalidInputError('verifyChain: the target runner cannot read logits back');
  // `last` stands at position base; draft i at base + 1 + i.
  const base = target.kvLength;
  const tokens = [last, ...draft.tokens];
  await target.forward({ tokens }, sampler, 'all');
  const logits = await target.lastLogits();
  const V = target.spec.vocabSize;
  const p = tokens.map((_, r) => samplingProbs(logits.subarray(r * V, (r + 1) * V), sampler));
  const q =
    draft.probs ??
    draft.tokens.map((x) => {
      const oneHot = new Float64Array(V);
      oneHot[x] = 1;
      return oneHot;
    });
  const step = rule(draft.tokens, q, p, (i, draw) => rejectionUniform(sampler.seed, base + 1 + i, draw));
  const accepted = Array.from({ length: step.accepted }, (_, i) => i);
  target.commit([0, ...accepted.map((i) => i + 1)]);
  return { accepted, emitted: step.emitted };
}
