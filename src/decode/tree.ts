import { InvalidInputError } from '../errors.js';
import type { DraftTree } from '../model/tree.js';

/** The target model's own choices (argmax or Gumbel-argmax) used to verify a tree. */
export interface TargetChoices {
  /** The choice from the last prefix position's logits: the token after the prefix. */
  readonly root: number;
  /** `nodes[i]`: the choice from node i's logits, the token the target wants after node i. */
  readonly nodes: readonly number[];
}

/** What verification keeps: accepted drafts plus the one token the target adds. */
export interface AcceptedPath {
  /** Accepted node indices, root to leaf (empty when the first draft is rejected). */
  readonly nodes: number[];
  /** Emitted tokens: the accepted nodes' tokens, then one correction or bonus token. */
  readonly tokens: number[];
}

/**
 * Sample-and-match verification (ALGORITHMS.md §2). Start at the root with y = the target's choice
 * after the prefix; while a child of the current node carries y, accept that child and set y to the
 * target's choice at it; when no child matches, stop. The emitted tokens are the y's along the way:
 * the accepted drafts, then the last y (a correction when drafts were offered, a bonus after a
 * leaf). Every emitted token is the target's own choice, so the output equals plain decoding with
 * the same choices whatever the drafts were. Needs no draft probabilities. When siblings repeat a
 * token, the first in DFS order is taken.
 */
export function longestAcceptedPath(
  tree: DraftTree,
  tokens: readonly number[],
  choices: TargetChoices,
): AcceptedPath {
  const n = tree.parents.length;
  if (tokens.length !== n || choices.nodes.length !== n)
    throw new InvalidInputError(
      `longestAcceptedPath: ${n} nodes but ${tokens.length} tokens and ${choices.nodes.length} choices`,
    );
  const nodes: number[] = [];
  const emitted: number[] = [];
  let current = -1;
  let y = choices.root;
  // Children of `current` lie in its subtree range; scan forward from the first child, skipping
  // over each child's own subtree via end[].
  for (;;) {
    let match = -1;
    const last = current < 0 ? n - 1 : tree.end[current]!;
    for (let c = current + 1; c <= last; c = tree.end[c]! + 1) {
      if (tokens[c] === y) {
        match = c;
        break;
      }
    }
    emitted.push(y);
    if (match < 0) return { nodes, tokens: emitted };
    nodes.push(match);
    current = match;
    y = choices.nodes[match]!;
  }
}
