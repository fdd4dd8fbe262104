// A small SVG picture of one draft tree: the last committed token on the left, drafted tokens to
// its right by depth, the accepted path highlighted.
import { type DraftTreeView, draftTree } from '../../src/index.js';
import { h, svg } from './dom.js';

const DX = 46;
const DY = 34;
const R = 8;
/** Where the last committed token (the root) sits. */
const X0 = 14;
const Y0 = 24;

/**
 * Row of every node, for a layout where chains run straight: a node continues its parent's row when
 * it is the parent's first child (in depth-first order, exactly when its parent is the node just
 * before it); any other node starts a new row.
 */
export function rows(parents: readonly number[]): number[] {
  const out: number[] = [];
  let next = 0;
  for (const [i, p] of parents.entries()) out[i] = i > 0 && p === i - 1 ? out[i - 1]! : next++;
  return out;
}

/** Column of every node: its depth in the tree (`draftTree`) plus one, the root being column 0. */
export function depths(parents: readonly number[]): number[] {
  return draftTree(parents).depth.map((d) => d + 1);
}

/**
 * Draws `tree` into `box`; without one (speculation off) or with an empty one (the drafter had
 * nothing to propose), says so instead.
 */
export function drawTree(box: HTMLElement, tree: DraftTreeView | undefined): void {
  if (!tree || tree.tokens.length === 0) {
    box.dataset.nodes = '0';
    box.dataset.accepted = '0';
    const why = tree
      ? 'The drafter had nothing to propose (no match in the context yet).'
      : 'No draft tree yet (speculation off).';
    box.replaceChildren(h('p', { class: 'note' }, why));
    return;
  }
  const depth = depths(tree.parents);
  const row = rows(tree.parents);
  const accepted = new Set(tree.accepted);
  const x = depth.map((d) => X0 + d * DX);
  const y = row.map((r) => Y0 + r * DY);
  const width = Math.max(...x) + 30;
  const height = Math.max(...y) + 16;
  const edges = tree.parents.map((p, i) => {
    const on = accepted.has(i) && (p < 0 || accepted.has(p));
    return svg('line', {
      x1: p < 0 ? X0 : x[p]!,
      y1: p < 0 ? Y0 : y[p]!,
      x2: x[i]!,
      y2: y[i]!,
      class: on ? 'edge accepted' : 'edge',
    });
  });
  // Token ids above their circles (the page has no tokenizer; rejected drafts have no text).
  const nodes = tree.tokens.map((token, i) =>
    svg(
      'g',
      { class: accepted.has(i) ? 'node accepted' : 'node', 'data-node': i },
      svg('circle', { cx: x[i]!, cy: y[i]!, r: R }),
      svg('text', { x: x[i]!, y: y[i]! - R - 3, 'text-anchor': 'middle' }, String(token)),
      svg('title', {}, `token ${token}${accepted.has(i) ? ' (accepted)' : ''}`),
    ),
  );
  const root = svg('circle', { cx: X0, cy: Y0, r: R - 3, class: 'root' }, svg('title', {}, 'last token'));
  box.dataset.nodes = String(tree.tokens.length);
  box.dataset.accepted = String(tree.accepted.length);
  box.replaceChildren(
    svg(
      'svg',
      { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' },
      svg('title', {}, `Draft tree: ${tree.tokens.length} drafted tokens, ${tree.accepted.length} accepted`),
      root,
      ...edges,
      ...nodes,
    ),
  );
}
