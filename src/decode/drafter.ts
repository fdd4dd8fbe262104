import type { ModelRunner, SamplerSpec } from '../model/runner.js';
import { type DraftGrammar, extendLeaves, grammarChain } from './constrained.js';

/**
 * Draft tokens proposed after the current context: nodes in depth-first order, `parents[i]` an
 * earlier node or -1 for a child of the context's last token. Empty when there is nothing to offer.
 */
export interface DraftProposal {
  readonly tokens: readonly number[];
  readonly parents: readonly number[];
  /**
   * For a chain drawn by sampling: `probs[i]` is the distribution node i was drawn from (the
   * drafter's filtered, tempered softmax), as the rejection rule needs. Absent for deterministic
   * drafts (n-grams), which the rule treats as one-hot proposals.
   */
  readonly probs?: readonly Float64Array[];
  /**
   * For a tree a model ranked: each node's score, the sum of the log weights of the children on its
   * path from the root (see `rankChildren`), in f32 as the tree was grown.
   */
  readonly scores?: readonly number[];
  /**
   * Forward passes the drafter's model ran for this proposal, its catch-up on the context
   * included (a model drafter; absent for drafters without a model).
   */
  readonly passes?: number;
}

/** What a whole speculative step did (see {@link Drafter.speculate}). */
export interface SpeculativeStep {
  /** The tree it drafted, depth-first. */
  readonly draft: DraftProposal;
  /** Accepted draft nodes (indices into the tree), root to leaf. */
  readonly accepted: number[];
  /** Tokens the target emits: the accepted drafts, then its own next choice. */
  readonly emitted: number[];
  /** Draft forward passes run: the catch-up on the context, then one per depth. */
  readonly draftPasses: number;
}

/**
 * What a proposal should look like: a 'tree' for sample-and-match verification (greedy and Gumbel
 * sampling), or a 'chain' with its draft probabilities for the classic rejection rule.
 */
export type DraftShape = 'tree' | 'chain';

/** Proposes drafts for speculative decoding. Verification never trusts them: see speculate.ts. */
export interface Drafter {
  readonly name: string;
  /**
   * Up to `budget` draft nodes that may follow `context` (every token so far; its last token is
   * the target's latest choice, not yet scored). Draft models sample with `sampler`, whose noise
   * is keyed by absolute position, so they agree with the target where their distributions do.
   * Under a `grammar` (constrained decoding, trees only) the tree grows on the grammar's paths:
   * nothing it refuses is proposed, and with jump-forward the tokens it forces extend branches
   * beyond the budget (see {@link DraftGrammar}).
   */
  propose(
    context: readonly number[],
    budget: number,
    sampler: SamplerSpec,
    shape?: DraftShape,
    grammar?: DraftGrammar,
  ): Promise<DraftProposal>;
  /**
   * Takes in a prompt before the first speculative step (a draft model runs it through its own
   * cache, in chunks), so that a step's catch-up is only the tokens after it. `beforeChunk` runs
   * before each chunk (the engine checks for an abort there). Optional: drafters without a model
   * have nothing to take in.
   */
  prefill?(prompt: readonly number[], sampler: SamplerSpec, beforeChunk?: () => void): Promise<void>;
  /**
   * One whole speculative step on the device (see DeviceSpeculator): drafts a tree after
   * `context`, verifies it with `target` and commits the accepted path in the target's cache, in
   * one submission with one readback. Resolves to undefined when this drafter and `target` cannot
   * (not on one GPU, no room): the caller then proposes and verifies from the host. Trees only
   * (sample-and-match acceptance), no constraint.
   */
  speculate?(
    target: ModelRunner,
    context: readonly number[],
    budget: number,
    sampler: SamplerSpec,
  ): Promise<SpeculativeStep | undefined>;
  /** Bytes of weights one forward pass of the drafter's model reads, as packed (on the GPU). */
  readonly weightBytesPerPass?: number;
  /** Frees what the drafter holds (a draft model's GPU memory). */
  dispose(): void;
}

/** No drafts. */
export const EMPTY_PROPOSAL: DraftProposal = { tokens: [], parents: [] };

/**
 * Prompt lookup / n-gram drafting: find earlier occurrences of the context's last n tokens
 * (longest n first, most recent first) and propose what followed them. Distinct continuations
 * share their common prefix in a small tree; the most recent gets the longest branch.
 *
 * Under a grammar each continuation is cut where the grammar first refuses it, before it takes any
 * of the budget (a continuation refused at once does not count, and shorter n-grams are tried).
 * With jump-forward the tree hangs below the tokens the grammar forces after the context; the
 * canonical spelling of the text it forces after them is the first continuation; and every leaf
 * goes on with the tokens forced after it.
 */
export class NgramDrafter implements Drafter {
  readonly name = 'ngram';

  constructor(
    /** Longest suffix to match. */
    private readonly maxN = 4,
    /** Most distinct continuations to branch into. */
    private readonly maxBranches = 4,
  ) {}

  async propose(
    context: readonly number[],
    budget: number,
    _sampler?: SamplerSpec,
    shape: DraftShape = 'tree',
    grammar?: DraftGrammar,
  ): Promise<DraftProposal> {
    const proposal = grammar
      ? await this.underGrammar(context, budget, grammar)
      : trie(this.lookup(context, budget), budget);
    return shape === 'chain' ? firstChain(proposal) : proposal;
  }

  /**
   * Continuations of the longest suffix of `context` that recurs (newest first), each cut by
   * `cut` (under a grammar: to its allowed prefix); empty where none is left.
   */
  private lookup(
    context: readonly number[],
    budget: number,
    cut: (c: number[]) => number[] = (c) => c,
  ): number[][] {
    const L = context.length;
    for (let n = Math.min(this.maxN, L - 1); n >= 1; n--) {
      const conts: number[][] = [];
      // Occurrences ending at e (exclusive) with e < L, newest first.
      for (let e = L - 1; e >= n && conts.length < this.maxBranches; e--) {
        let same = true;
        for (let j = 1; j <= n && same; j++) same = context[e - j] === context[L - j];
        if (same) {
          const c = cut(context.slice(e, Math.min(L, e + budget)));
          if (c.length > 0) conts.push(c);
        }
      }
      if (conts.length > 0) return conts;
    }
    return [];
  }

  /** The n-gram tree grown on the grammar's paths (see the class comment). */
  private async underGrammar(
    context: readonly number[],
    budget: number,
    g: DraftGrammar,
  ): Promise<DraftProposal> {
    const { walk } = g;
    const root = g.jumpForward ? await grammarChain(walk, [], g.maxNodes) : { tokens: [], forced: 0 };
    const lead = root.tokens.slice(0, root.forced);
    const spelled = root.tokens.slice(root.forced);
    const room = Math.min(budget, g.maxNodes - lead.length);
    const conts = [
      ...(spelled.length > 0 ? [spelled] : []),
      ...this.lookup([...context, ...lead], room, (c) => walk.allowedPrefix(lead, c)),
    ];
    const below = trie(conts, room);
    // The forced lead as a chain, the tree below its last token.
    const tokens = [...lead, ...below.tokens];
    const parents = [
      ...lead.map((_, i) => i - 1),
      ...below.parents.map((p) => (p < 0 ? lead.length - 1 : p + lead.length)),
    ];
    const tree = { tokens, parents };
    return g.jumpForward ? extendLeaves(g, tree) : tree;
  }

  dispose(): void {}
}

/** The first root-to-leaf path of a depth-first tree: nodes 0..m with `parents[i] = i - 1`. */
export function firstChain(p: DraftProposal): DraftProposal {
  let m = 0;
  while (m < p.parents.length && p.parents[m] === m - 1) m++;
  return { tokens: p.tokens.slice(0, m), parents: p.parents.slice(0, m) };
}

/** Merges token sequences into a tree in depth-first order, at most `budget` nodes. */
export function trie(sequences: readonly (readonly number[])[], budget: number): DraftProposal {
  interface Node {
    token: number;
    children: Node[];
  }
  const root: Node = { token: -1, children: [] };
  let count = 0;
  for (const seq of sequences) {
    let at = root;
    for (const t of seq) {
      let child = at.children.find((c) => c.token === t);
      if (!child) {
        if (count >= budget) break;
        child = { token: t, children: [] };
        at.children.push(child);
        count++;
      }
      at = child;
    }
  }
  const tokens: number[] = [];
  const parents: number[] = [];
  const walk = (node: Node, parent: number) => {
    for (const c of node.children) {
      const index = tokens.push(c.token) - 1;
      parents.push(parent);
      walk(c, index);
    }
  };
  walk(root, -1);
  return { tokens, parents };
}
