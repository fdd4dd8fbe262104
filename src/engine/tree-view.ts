import type { DraftProposal } from '../decode/drafter.js';
import type { DraftTreeView } from './types.js';

/**
 * The drafter's probability of each node of `draft` given its parent (see DraftTreeView.probs):
 * exp(score − parent's score) for a tree a model ranked, the probability each token was drawn with
 * for a sampled chain; undefined for drafts with neither (n-grams, trees a grammar cut).
 */
export function nodeProbs(draft: DraftProposal): number[] | undefined {
  const { scores, probs } = draft;
  if (scores && scores.length === draft.tokens.length)
    return scores.map((s, i) => {
      const p = draft.parents[i]!;
      return Math.min(1, Math.exp(s - (p < 0 ? 0 : scores[p]!)));
    });
  if (probs && probs.length === draft.tokens.length) return draft.tokens.map((t, i) => probs[i]![t] ?? 0);
  return undefined;
}

/**
 * The view of one speculative pass that the request's chunk carries: the draft's tokens, parents
 * and accepted path, each token's text (`text` decodes one id), the drafter's probabilities where
 * it has them, and the target's bonus token (the last of `emitted`).
 */
export function draftTreeView(
  draft: DraftProposal,
  step: { readonly accepted: readonly number[]; readonly emitted: readonly number[] },
  text: (id: number) => string,
): DraftTreeView {
  const probs = nodeProbs(draft);
  const bonus = step.emitted.at(-1);
  return {
    tokens: [...draft.tokens],
    parents: [...draft.parents],
    accepted: [...step.accepted],
    texts: draft.tokens.map(text),
    ...(probs ? { probs } : {}),
    ...(bonus === undefined ? {} : { bonus: { token: bonus, text: text(bonus) } }),
  };
}
