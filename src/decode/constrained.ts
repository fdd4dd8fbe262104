import type { DraftProposal } from './drafter.js';

/** What speculative decoding needs of a request's grammar state (see grammar/constraint.ts). */
export interface TokenGrammar {
  /** Bitmask of the tokens allowed next, [ceil(vocab / 32)] u32. */
  mask(): Promise<Uint32Array>;
  /** Advances past `id` if the grammar allows it here; false (and no change) if not. */
  tryAccept(id: number): boolean;
  /** Undoes the last `n` accepted tokens. */
  rollBack(n: number): void;
  /** Whether the output is complete (an end token was accepted). */
  readonly done: boolean;
}

/** A draft tree cut to what a grammar allows, with the mask of every row of its verification pass. */
export interface ConstrainedDraft {
  draft: DraftProposal;
  /**
   * [1 + draft.tokens.length, words] u32: row 0 for `last` (the tokens allowed after the context),
   * row i + 1 for draft node i (those allowed after the path to it), as `verify` scores them.
   */
  masks: Uint32Array;
}

/**
 * Cuts a draft tree to the nodes a grammar allows along their root-to-node path (a node that is not
 * allowed after its path drops with its subtree; so does anything below a completed output) and
 * gives each kept row its mask. The grammar is walked depth first with accept and roll back, and is
 * back at its state on return. Verifying under these masks picks, at every node, exactly the token
 * plain constrained decoding picks after the same path, so the emitted ids do not change.
 */
export async function constrainDraft(grammar: TokenGrammar, draft: DraftProposal): Promise<ConstrainedDraft> {
  const rows: Uint32Array[] = [await grammar.mask()];
  const tokens: number[] = [];
  const parents: number[] = [];
  // Kept index of each proposal node (-1: dropped), and the path of kept nodes the grammar is at.
  const kept: number[] = [];
  const path: number[] = [];
  for (const [i, token] of draft.tokens.entries()) {
    const parent = draft.parents[i]!;
    const parentKept = parent < 0 ? -1 : kept[parent]!;
    kept.push(-1);
    if (parent >= 0 && parentKept < 0) continue;
    // Back up the grammar to the parent's state: pop path nodes that are not the parent.
    let pop = 0;
    while (path.length > 0 && path.at(-1) !== parentKept) {
      path.pop();
      pop++;
    }
    grammar.rollBack(pop);
    if (parentKept >= 0 && grammar.done) continue;
    if (!grammar.tryAccept(token)) continue;
    const index = tokens.push(token) - 1;
    parents.push(parentKept);
    kept[i] = index;
    path.push(index);
    // After a completed output nothing follows; its row is never emitted past, any valid mask does.
    rows.push(grammar.done ? rows[parentKept + 1]! : await grammar.mask());
  }
  grammar.rollBack(path.length);
  const words = rows[0]!.length;
  const masks = new Uint32Array(rows.length * words);
  for (const [r, m] of rows.entries()) masks.set(m, r * words);
  return { draft: { tokens, parents }, masks };
}
