import type { ModelRunner, SamplerSpec } from '../model/runner.js';
import type { DraftProposal } from './drafter.js';
import { draftTree, longestAcceptedPath } from './tree.js';

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
): Promise<VerifyStep> {
  // Node 0 is `last`; draft node i becomes node i + 1 and its root-level drafts hang below node 0.
  const tokens = [last, ...draft.tokens];
  const parents = [-1, ...draft.parents.map((p) => p + 1)];
  const choices = await target.forward({ tokens, parents }, sampler, 'all');
  const path = longestAcceptedPath(draftTree(draft.parents), draft.tokens, {
    root: choices[0]!,
    nodes: Array.from(choices.subarray(1)),
  });
  target.commit([0, ...path.nodes.map((i) => i + 1)]);
  return { accepted: path.nodes, emitted: path.tokens };
}
