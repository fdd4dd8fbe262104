import { describe, expect, it } from 'vitest';
import { longestAcceptedPath } from '../../src/decode/tree.js';
import { InvalidInputError } from '../../src/errors.js';
import { chainTree, draftTree, pathTo, treePositions, treeVisible } from '../../src/model/tree.js';
import { seededRandom } from '../fixtures/reference.js';

/** A random tree in DFS order: each node's parent is drawn from the path to the previous node. */
function randomDfsParents(rand: () => number, n: number): number[] {
  const parents: number[] = [];
  const path: number[] = [];
  for (let i = 0; i < n; i++) {
    const keep = Math.floor(rand() * (path.length + 1)); // 0 → a new child of the root
    path.length = keep;
    parents.push(keep === 0 ? -1 : path[keep - 1]!);
    path.push(i);
  }
  return parents;
}

/** Ancestors of a node (excluding itself) by walking parent pointers: the brute-force oracle. */
function ancestors(parents: readonly number[], i: number): number[] {
  const out: number[] = [];
  for (let p = parents[i]!; p >= 0; p = parents[p]!) out.push(p);
  return out;
}

/** Whether every subtree is a contiguous index range starting at its root (DFS pre-order). */
function isDfsOrder(parents: readonly number[]): boolean {
  const n = parents.length;
  for (let j = 0; j < n; j++) {
    const members = [j];
    for (let i = j + 1; i < n; i++) if (ancestors(parents, i).includes(j)) members.push(i);
    if (members.some((m, k) => m !== j + k)) return false;
  }
  return true;
}

describe('draftTree', () => {
  it('computes depth, subtree ends and positions of a hand-drawn tree', () => {
    //   root ─ 0 ─ 1
    //        │   └ 2 ─ 3
    //        └ 4 ─ 5
    const tree = draftTree([-1, 0, 0, 2, -1, 4]);
    expect(tree.depth).toEqual([0, 1, 1, 2, 0, 1]);
    expect(tree.end).toEqual([3, 1, 3, 3, 5, 5]);
    expect(treePositions(tree, 7)).toEqual([7, 8, 8, 9, 7, 8]);
    expect(pathTo(tree, 3)).toEqual([0, 2, 3]);
    expect(treeVisible(tree, 3, 0)).toBe(true);
    expect(treeVisible(tree, 3, 1)).toBe(false);
    expect(treeVisible(tree, 5, 3)).toBe(false);
    expect(chainTree(4).end).toEqual([3, 3, 3, 3]);
    expect(draftTree([]).depth).toEqual([]);
  });

  it('rejects parents that do not precede the child or break depth-first order', () => {
    expect(() => draftTree([0])).toThrow(InvalidInputError);
    expect(() => draftTree([-1, 5])).toThrow(/parents\[1\] = 5/);
    expect(() => draftTree([-1, -2])).toThrow(InvalidInputError);
    expect(() => draftTree([-1, 0.5])).toThrow(InvalidInputError);
    // Node 2 returns to node 0 after the root's second child 1 started: not DFS order.
    expect(() => draftTree([-1, -1, 0])).toThrow(/not depth-first/);
    expect(() => draftTree([-1, 0, 1, 0, 2])).toThrow(/not depth-first/);
  });

  it('property: accepts exactly the DFS-ordered parent arrays', () => {
    const rand = seededRandom(11);
    let accepted = 0;
    for (let trial = 0; trial < 300; trial++) {
      const n = 1 + Math.floor(rand() * 8);
      const parents = Array.from({ length: n }, (_, i) => Math.floor(rand() * (i + 1)) - 1);
      const ok = isDfsOrder(parents);
      if (ok) accepted++;
      if (ok) expect(() => draftTree(parents)).not.toThrow();
      else expect(() => draftTree(parents)).toThrow(InvalidInputError);
    }
    // Both branches were exercised.
    expect(accepted).toBeGreaterThan(20);
    expect(accepted).toBeLessThan(280);
  });

  it('property: on random DFS trees, j ≤ i ≤ end[j] is exactly "j is i or an ancestor"', () => {
    const rand = seededRandom(12);
    for (let trial = 0; trial < 100; trial++) {
      const parents = randomDfsParents(rand, 1 + Math.floor(rand() * 20));
      const tree = draftTree(parents);
      for (let i = 0; i < parents.length; i++) {
        const anc = ancestors(parents, i);
        expect(tree.depth[i]).toBe(anc.length);
        expect(pathTo(tree, i)).toEqual([...anc].reverse().concat(i));
        for (let j = 0; j < parents.length; j++)
          expect(treeVisible(tree, i, j)).toBe(j === i || anc.includes(j));
      }
    }
  });
});

describe('longestAcceptedPath (sample-and-match)', () => {
  it('walks a hand-drawn tree', () => {
    // Tokens:  root ─ 10 ─ 11
    //               │    └ 12 ─ 13
    //               └ 20 ─ 21
    const tree = draftTree([-1, 0, 0, 2, -1, 4]);
    const tokens = [10, 11, 12, 13, 20, 21];
    // Target wants 10, then 12, then 13, then 99: accepts 0, 2, 3 and adds the bonus 99.
    expect(longestAcceptedPath(tree, tokens, { root: 10, nodes: [12, 0, 13, 99, 0, 0] })).toEqual({
      nodes: [0, 2, 3],
      tokens: [10, 12, 13, 99],
    });
    // Target wants 20 then 7: accepts node 4, then corrects to 7.
    expect(longestAcceptedPath(tree, tokens, { root: 20, nodes: [0, 0, 0, 0, 7, 0] })).toEqual({
      nodes: [4],
      tokens: [20, 7],
    });
    // First draft rejected: only the correction.
    expect(longestAcceptedPath(tree, tokens, { root: 5, nodes: [0, 0, 0, 0, 0, 0] })).toEqual({
      nodes: [],
      tokens: [5],
    });
    // An empty tree emits the root choice.
    expect(longestAcceptedPath(draftTree([]), [], { root: 3, nodes: [] })).toEqual({
      nodes: [],
      tokens: [3],
    });
    expect(() => longestAcceptedPath(tree, [1], { root: 0, nodes: [] })).toThrow(InvalidInputError);
  });

  it('property: emits the target’s own greedy continuation and stops exactly where the tree diverges', () => {
    const rand = seededRandom(13);
    const vocab = 4; // small, so drafts often match
    // A deterministic "target": next token as a hash of the context.
    const target = (context: readonly number[]): number => {
      let h = 2166136261;
      for (const t of context) h = Math.imul(h ^ t, 16777619) >>> 0;
      return h % vocab;
    };
    let longest = 0;
    for (let trial = 0; trial < 300; trial++) {
      const parents = randomDfsParents(rand, 1 + Math.floor(rand() * 16));
      const tree = draftTree(parents);
      const tokens = parents.map(() => Math.floor(rand() * vocab));
      const prefix = [Math.floor(rand() * vocab), Math.floor(rand() * vocab)];
      const pathTokens = (i: number) => pathTo(tree, i).map((j) => tokens[j]!);
      const choices = {
        root: target(prefix),
        nodes: parents.map((_, i) => target([...prefix, ...pathTokens(i)])),
      };
      const got = longestAcceptedPath(tree, tokens, choices);

      // Plain decoding with the same target, as long as the emitted sequence.
      const plain: number[] = [];
      while (plain.length < got.tokens.length) plain.push(target([...prefix, ...plain]));
      expect(got.tokens).toEqual(plain);
      expect(got.nodes.length + 1).toBe(got.tokens.length);
      // The accepted nodes form a root-to-node path carrying the emitted drafts.
      const lastNode = got.nodes[got.nodes.length - 1];
      if (lastNode !== undefined) {
        expect(pathTo(tree, lastNode)).toEqual(got.nodes);
        expect(pathTokens(lastNode)).toEqual(got.tokens.slice(0, -1));
      }
      // Maximal: no child of the last accepted node (or of the root) carries the final token.
      const parentOfNext = lastNode ?? -1;
      const final = got.tokens[got.tokens.length - 1];
      for (let c = 0; c < parents.length; c++)
        if (parents[c] === parentOfNext) expect(tokens[c]).not.toBe(final);
      longest = Math.max(longest, got.nodes.length);
    }
    expect(longest).toBeGreaterThanOrEqual(3);
  });
});
