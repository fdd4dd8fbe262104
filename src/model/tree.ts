// The layout of a draft tree as the forward pass consumes it (positions and which keys each node
// sees); decode/ grows and verifies trees, model/ runs them.
import { InvalidInputError } from '../errors.js';

/**
 * A draft tree laid out in depth-first (pre-)order, the layout tree verification uses. Node i's
 * parent is `parents[i]` (an earlier node, or -1 for a child of the last prefix token, the implicit
 * root). Because of the DFS order, node i's subtree is the index range `[i, end[i]]`, so on the GPU
 * query i may attend to tree key j iff `j <= i <= end[j]` (j is i or an ancestor), plus the prefix.
 */
export interface DraftTree {
  /** Parent of each node: an earlier node index, or -1 under the root. */
  readonly parents: readonly number[];
  /** Depth of each node; children of the root have depth 0. */
  readonly depth: readonly number[];
  /** Last node index of each node's subtree (itself when a leaf). */
  readonly end: readonly number[];
}

/**
 * Builds a {@link DraftTree} from a parent array, checking that it is in depth-first order: every
 * parent precedes its child and is on the path from the root to the previous node (so each subtree
 * is a contiguous range). Throws {@link InvalidInputError} naming the first offending node.
 */
export function draftTree(parents: readonly number[]): DraftTree {
  const n = parents.length;
  const depth: number[] = [];
  const end: number[] = [];
  // The root-to-current path; a new node's parent must be on it (or be the root, -1).
  const path: number[] = [];
  for (let i = 0; i < n; i++) {
    const p = parents[i]!;
    if (!Number.isInteger(p) || p < -1 || p >= i)
      throw new InvalidInputError(`draftTree: parents[${i}] = ${p} must be -1 or an earlier node`);
    while (path.length > 0 && path[path.length - 1] !== p) path.pop();
    if (p !== -1 && path.length === 0)
      throw new InvalidInputError(
        `draftTree: node ${i}'s parent ${p} is not on the path to node ${i - 1}: not depth-first order`,
      );
    path.push(i);
    depth.push(p < 0 ? 0 : depth[p]! + 1);
    end.push(i);
    // Node i extends the subtree of every ancestor on the path.
    for (const a of path) end[a] = i;
  }
  return { parents: [...parents], depth, end };
}

/** A chain of `n` drafts (`parents[i] = i - 1`), the tree of plain speculative decoding. */
export function chainTree(n: number): DraftTree {
  return draftTree(Array.from({ length: n }, (_, i) => i - 1));
}

/** Positions of the nodes after a prefix of `prefixLen` tokens: `prefixLen + depth[i]`. */
export function treePositions(tree: DraftTree, prefixLen: number): number[] {
  return tree.depth.map((d) => prefixLen + d);
}

/** Whether node `query` may attend to node `key`: key is query itself or one of its ancestors. */
export function treeVisible(tree: DraftTree, query: number, key: number): boolean {
  return key <= query && query <= tree.end[key]!;
}

/** The nodes from the root's child down to `node`, in path order. */
export function pathTo(tree: DraftTree, node: number): number[] {
  const path: number[] = [];
  for (let i = node; i >= 0; i = tree.parents[i]!) path.push(i);
  return path.reverse();
}

/** The parent array of a causal chain of `n` tokens: `[-1, 0, 1, ..., n - 2]`. */
export function chainParents(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i - 1);
}
