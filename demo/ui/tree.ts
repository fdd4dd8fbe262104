// The draft trees of the last few target passes: each an SVG picture with the last committed token
// (●) on the left and the drafted tokens to its right by depth, labelled with their text; the
// accepted path filled, the target's bonus token after it dashed. A node's id and the drafter's
// probability show on hover or focus; the trees can be stepped through and zoomed.
import { type DraftTreeView, draftTree } from '../../src/index.js';
import { h, svg } from './dom.js';

/** Node box width and height, column and row pitch. */
const W = 66;
const H = 20;
const DX = 84;
const DY = 28;
/** Where the last committed token (the root) sits. */
const X0 = 10;
const Y0 = 16;
/** Most characters of a node's label, the ellipsis included. */
const LABEL = 8;
/** Trees kept for stepping back. */
const HISTORY = 8;
const ZOOMS = [0.5, 0.75, 1, 1.25, 1.5, 2];

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
 * A token's text as a short label: spaces as `·`, newlines as `↵`, tabs as `⇥`, other control
 * characters as `�`, cut to `max` characters with an ellipsis.
 */
export function tokenLabel(text: string, max = LABEL): string {
  const shown = Array.from(text, (c) =>
    c === ' ' ? '·' : c === '\n' ? '↵' : c === '\t' ? '⇥' : c === '\r' ? '␍' : c < ' ' ? '�' : c,
  );
  return shown.length > max ? `${shown.slice(0, max - 1).join('')}…` : shown.join('');
}

/** One node's description: its text, id, the drafter's probability, and what the pass did with it. */
function describe(token: number, text: string | undefined, prob: number | undefined, role: string): string {
  const shown = text === undefined ? '' : `“${tokenLabel(text, 24)}” · `;
  const p =
    prob === undefined ? 'no draft probability (not a model’s draft)' : `draft p = ${prob.toFixed(3)}`;
  return `${shown}id ${token} · ${p} · ${role}`;
}

/** A node: a box with its label, focusable, its description in a tooltip and on `detail`. */
function nodeBox(
  cx: number,
  cy: number,
  label: string,
  about: string,
  attrs: Record<string, string | number>,
): SVGGElement {
  return svg(
    'g',
    { ...attrs, tabindex: -1, role: 'img', 'aria-label': about, 'data-about': about },
    svg('title', {}, about),
    svg('rect', { x: cx - W / 2, y: cy - H / 2, width: W, height: H, rx: 5 }),
    svg('text', { x: cx, y: cy + 4, 'text-anchor': 'middle' }, label),
  );
}

/**
 * Draws `tree` into `box`; without one (speculation off) or with an empty one (the drafter had
 * nothing to propose), says so instead. Hovering or focusing a node writes its description into
 * `detail`; arrow keys move the focus between nodes. `zoom` scales the picture (the box scrolls).
 */
export function drawTree(
  box: HTMLElement,
  tree: DraftTreeView | undefined,
  detail?: HTMLElement,
  zoom = 1,
): void {
  if (!tree || tree.tokens.length === 0) {
    box.dataset.nodes = '0';
    box.dataset.accepted = '0';
    const why = tree
      ? 'The drafter had nothing to propose (no match in the context yet).'
      : 'No draft tree yet (speculation off).';
    box.replaceChildren(h('p', { class: 'note' }, why));
    if (detail) detail.textContent = '';
    return;
  }
  const depth = depths(tree.parents);
  const row = rows(tree.parents);
  const accepted = new Set(tree.accepted);
  const x = depth.map((d) => X0 + d * DX);
  const y = row.map((r) => Y0 + r * DY);
  // The bonus token: after the accepted path's last node (or the root), in that node's row when
  // the node has no drafted child (its first child would stand there), else in a row of its own.
  const last = tree.accepted.at(-1);
  const bonusX = X0 + (last === undefined ? 1 : depth[last]! + 1) * DX;
  const free = last !== undefined && !tree.parents.includes(last);
  const bonusY = Y0 + (free ? row[last]! : Math.max(...row) + 1) * DY;
  const from = (p: number) => (p < 0 ? { x: X0 + 6, y: Y0 } : { x: x[p]! + W / 2, y: y[p]! });
  const edges = tree.parents.map((p, i) => {
    const on = accepted.has(i) && (p < 0 || accepted.has(p));
    const a = from(p);
    return svg('line', {
      x1: a.x,
      y1: a.y,
      x2: x[i]! - W / 2,
      y2: y[i]!,
      class: on ? 'edge accepted' : 'edge',
    });
  });
  const nodes = tree.tokens.map((token, i) => {
    const text = tree.texts?.[i];
    const role = accepted.has(i) ? 'accepted' : 'rejected';
    const about = describe(token, text, tree.probs?.[i], role);
    const label = text === undefined ? `#${token}` : tokenLabel(text);
    return nodeBox(x[i]!, y[i]!, label, about, {
      class: accepted.has(i) ? 'node accepted' : 'node',
      'data-node': i,
      'data-token': token,
    });
  });
  const parts: SVGElement[] = [...edges];
  if (tree.bonus) {
    const a = from(last ?? -1);
    parts.push(
      svg('line', { x1: a.x, y1: a.y, x2: bonusX - W / 2, y2: bonusY, class: 'edge bonus' }),
      nodeBox(
        bonusX,
        bonusY,
        tokenLabel(tree.bonus.text),
        `bonus: “${tokenLabel(tree.bonus.text, 24)}” · id ${tree.bonus.token} · the target’s own next token after the accepted path`,
        { class: 'bonus', 'data-token': tree.bonus.token },
      ),
    );
  }
  const width = Math.max(...x, bonusX) + W / 2 + 8;
  const height = Math.max(...y, tree.bonus ? bonusY : 0) + H / 2 + 6;
  const root = svg('circle', { cx: X0, cy: Y0, r: 5, class: 'root' }, svg('title', {}, 'last token'));
  const picture = svg(
    'svg',
    {
      viewBox: `0 0 ${width} ${height}`,
      width: Math.round(width * zoom),
      height: Math.round(height * zoom),
      role: 'group',
    },
    svg('title', {}, `Draft tree: ${tree.tokens.length} drafted tokens, ${tree.accepted.length} accepted`),
    root,
    ...parts,
    ...nodes,
  );
  box.dataset.nodes = String(tree.tokens.length);
  box.dataset.accepted = String(tree.accepted.length);
  box.dataset.bonus = tree.bonus ? '1' : '0';
  box.replaceChildren(picture);
  const focusable = [...picture.querySelectorAll<SVGGElement>('g[data-about]')];
  focusable[0]?.setAttribute('tabindex', '0');
  if (detail)
    detail.textContent = 'Hover or focus a token (arrow keys move) for its id and draft probability.';
  const tell = (g: SVGGElement) => {
    if (detail) detail.textContent = g.dataset.about ?? '';
  };
  for (const [i, g] of focusable.entries()) {
    g.addEventListener('mouseenter', () => tell(g));
    g.addEventListener('focus', () => tell(g));
    g.addEventListener('keydown', (e) => {
      const step =
        e.key === 'ArrowDown' || e.key === 'ArrowRight'
          ? 1
          : e.key === 'ArrowUp' || e.key === 'ArrowLeft'
            ? -1
            : 0;
      const next = focusable[i + step];
      if (step === 0 || !next) return;
      e.preventDefault();
      g.setAttribute('tabindex', '-1');
      next.setAttribute('tabindex', '0');
      next.focus();
    });
  }
}

/** The page's elements of the tree view. */
export interface TreeViewElements {
  readonly box: HTMLElement;
  readonly detail: HTMLElement;
  readonly position: HTMLElement;
  readonly earlier: HTMLButtonElement;
  readonly later: HTMLButtonElement;
  readonly zoomOut: HTMLButtonElement;
  readonly zoomIn: HTMLButtonElement;
}

/**
 * The trees of the last {@link HISTORY} passes that drafted something, one shown at a time: it
 * follows the newest unless the reader stepped back to an earlier one.
 */
export class TreeHistory {
  private trees: { tree: DraftTreeView; pass: number }[] = [];
  private at = -1;
  private zoom = ZOOMS.indexOf(1);
  /** Whether the request saw a pass whose drafter proposed nothing. */
  private sawEmpty = false;

  constructor(private readonly e: TreeViewElements) {
    e.earlier.addEventListener('click', () => this.step(-1));
    e.later.addEventListener('click', () => this.step(1));
    e.zoomOut.addEventListener('click', () => this.scale(-1));
    e.zoomIn.addEventListener('click', () => this.scale(1));
    this.show();
  }

  /** Forgets the trees (a new request, a new model). */
  clear(): void {
    this.trees = [];
    this.at = -1;
    this.sawEmpty = false;
    this.show();
  }

  /** Adds the tree of decode pass `pass`; empty trees only say that nothing was drafted. */
  add(tree: DraftTreeView, pass: number): void {
    if (tree.tokens.length === 0) {
      this.sawEmpty = true;
      if (this.trees.length === 0) this.show();
      return;
    }
    const following = this.at === this.trees.length - 1;
    this.trees.push({ tree, pass });
    if (this.trees.length > HISTORY) {
      this.trees.shift();
      if (!following) this.at = Math.max(0, this.at - 1);
    }
    if (following) this.at = this.trees.length - 1;
    this.show();
  }

  private step(by: number): void {
    this.at = Math.min(this.trees.length - 1, Math.max(0, this.at + by));
    this.show();
  }

  private scale(by: number): void {
    this.zoom = Math.min(ZOOMS.length - 1, Math.max(0, this.zoom + by));
    this.show();
  }

  private show(): void {
    const { box, detail, position, earlier, later, zoomIn, zoomOut } = this.e;
    const shown = this.trees[this.at];
    const empty: DraftTreeView = { tokens: [], parents: [], accepted: [] };
    drawTree(box, shown?.tree ?? (this.sawEmpty ? empty : undefined), detail, ZOOMS[this.zoom]);
    box.dataset.pass = shown ? String(shown.pass) : '';
    position.textContent = shown
      ? `Pass ${shown.pass} · tree ${this.at + 1} of ${this.trees.length}`
      : 'No trees yet';
    earlier.disabled = this.at <= 0;
    later.disabled = this.at >= this.trees.length - 1;
    zoomOut.disabled = this.zoom === 0;
    zoomIn.disabled = this.zoom === ZOOMS.length - 1;
  }
}
