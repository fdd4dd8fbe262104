// Speculative decoding under a grammar. Two facts keep it exact:
// - a token the grammar's mask allows alone is what plain constrained decoding picks at that point,
//   greedy or sampled, whatever the logits (every other logit is -inf); such forced tokens go into
//   the draft as a chain that verification always accepts, and their K/V rows are written by that
//   same pass (jump-forward without a wasted pass);
// - every other draft node is verified by the target as usual, under the mask of its path, so the
//   emitted ids are plain constrained decoding's whatever was drafted (forced text that several
//   tokenisations could spell is proposed in its canonical spelling, never appended unverified).
import { InvalidInputError } from '../errors.js';

/**
 * Draft tokens after the context in depth-first order, `parents[i]` an earlier node or -1 (a child
 * of the context's last token), as a drafter proposes them (a DraftProposal is one), with the
 * drafter's `scores` where it ranked them.
 */
export interface TokenTree {
  readonly tokens: readonly number[];
  readonly parents: readonly number[];
  readonly scores?: readonly number[];
}

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
  /**
   * The longest text the grammar allows next and nothing else ('' where several texts can follow),
   * XGrammar's jump-forward string. Optional: without it only single forced tokens jump forward.
   */
  jumpForward?(): string;
}

/** The model's tokenizer as jump-forward needs it: the canonical ids of a text, and ids' text. */
export interface Spelling {
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

/**
 * A grammar walked over the paths of a draft tree (token sequences after the context), for one
 * speculative step: it moves between paths by rolling back to the common prefix and accepting the
 * rest, and keeps each path's mask. Every path is relative to the grammar's state when the walk
 * began; {@link GrammarWalk.reset} goes back there, and callers reset before the request's own
 * output advances the grammar.
 */
export class GrammarWalk {
  /** Tokens accepted below the starting state. */
  private readonly at: number[] = [];
  private readonly masks = new Map<string, Uint32Array>();

  constructor(
    readonly grammar: TokenGrammar,
    /** The tokenizer, to spell jump-forward strings; without it only forced tokens jump forward. */
    readonly spelling?: Spelling,
  ) {}

  /**
   * Moves the grammar to the state after `path`. False when the grammar refuses a token of it, or
   * a token follows a completed output; the grammar then stands at the longest allowed prefix.
   */
  goTo(path: readonly number[]): boolean {
    let common = 0;
    while (common < this.at.length && common < path.length && this.at[common] === path[common]) common++;
    this.grammar.rollBack(this.at.length - common);
    this.at.length = common;
    for (let i = common; i < path.length; i++) {
      if (this.grammar.done || !this.grammar.tryAccept(path[i]!)) return false;
      this.at.push(path[i]!);
    }
    return true;
  }

  /** Back to the starting state. */
  reset(): void {
    this.goTo([]);
  }

  /** Whether the output is complete after `path` (its last token ended it). */
  done(path: readonly number[]): boolean {
    if (!this.goTo(path)) throw new InvalidInputError(`grammar walk: path ${path.join(',')} is refused`);
    return this.grammar.done;
  }

  /** Whether the grammar allows `token` after `path` (and the output goes on after it). */
  allows(path: readonly number[], token: number): boolean {
    return this.goTo(path) && this.goTo([...path, token]) && !this.grammar.done;
  }

  /** The longest prefix of `tokens` the grammar allows after `path` (see {@link GrammarWalk.allows}). */
  allowedPrefix(path: readonly number[], tokens: readonly number[]): number[] {
    const out: number[] = [];
    for (const t of tokens) {
      if (!this.allows([...path, ...out], t)) break;
      out.push(t);
    }
    return out;
  }

  /** The mask of the tokens allowed after `path` ([ceil(vocab / 32)] u32; do not modify). */
  async mask(path: readonly number[]): Promise<Uint32Array> {
    const key = path.join(',');
    let m = this.masks.get(key);
    if (!m) {
      if (!this.goTo(path)) throw new InvalidInputError(`grammar walk: path ${key} is refused`);
      m = await this.grammar.mask();
      this.masks.set(key, m);
    }
    return m;
  }

  /**
   * The token the grammar forces after `path`: the only one its mask allows, when the output goes
   * on after it (a forced end token is left to the target's own choice); else -1.
   */
  async forced(path: readonly number[]): Promise<number> {
    const t = onlyToken(await this.mask(path));
    return t >= 0 && this.allows(path, t) ? t : -1;
  }
}

/** The one token a mask allows, or -1 when it allows none or several. */
export function onlyToken(mask: Uint32Array): number {
  let token = -1;
  for (const [w, bits] of mask.entries()) {
    if (bits === 0) continue;
    // More than one bit in this word, or a second word with bits: several tokens.
    if (token >= 0 || (bits & (bits - 1)) !== 0) return -1;
    token = w * 32 + (31 - Math.clz32(bits));
  }
  return token;
}

/** The tokens the grammar forces one after another after `path`, at most `max`. */
export async function forcedChain(
  walk: GrammarWalk,
  path: readonly number[],
  max: number,
): Promise<number[]> {
  const out: number[] = [];
  while (out.length < max) {
    const t = await walk.forced([...path, ...out]);
    if (t < 0) break;
    out.push(t);
  }
  return out;
}

/**
 * The canonical spelling of the text the grammar forces after `path` (its jump-forward string),
 * as far as the grammar allows it token by token, at most `max` ids. Backs off to nothing when the
 * tokenizer does not spell the text back exactly, and drops the last token when the boundary after
 * it is ambiguous: when the grammar also allows, in its place, a longer token that runs past the
 * forced text (the model might merge it with what follows). Only a proposal: verification decides.
 */
export async function spelledChain(
  walk: GrammarWalk,
  path: readonly number[],
  max: number,
): Promise<number[]> {
  const { spelling } = walk;
  if (!spelling || max < 1 || !walk.goTo(path)) return [];
  const text = walk.grammar.jumpForward?.() ?? '';
  if (text === '') return [];
  const ids = spelling.encode(text);
  if (ids.length === 0 || spelling.decode(ids) !== text) return [];
  const out: number[] = [];
  for (const id of ids.slice(0, max)) {
    if (!walk.allows([...path, ...out], id)) break;
    out.push(id);
  }
  if (out.length === ids.length) {
    const before = [...path, ...out.slice(0, -1)];
    const rest = spelling.decode(out.slice(-1)).length;
    if (allowsLonger(await walk.mask(before), rest, (t) => spelling.decode([t]).length)) out.pop();
  }
  return out;
}

/**
 * Whether `mask`, at a point where `n` characters of forced text remain, allows a token longer than
 * them. Its other tokens spell prefixes of that text, one per length at most, so more than `n`
 * allowed tokens means a longer one; otherwise their `length`s (few) tell.
 */
function allowsLonger(mask: Uint32Array, n: number, length: (token: number) => number): boolean {
  const allowed: number[] = [];
  for (const [w, word] of mask.entries()) {
    for (let bits = word; bits !== 0; bits &= bits - 1) {
      allowed.push(w * 32 + (31 - Math.clz32(bits & -bits)));
      if (allowed.length > n) return true;
    }
  }
  return allowed.some((t) => length(t) > n);
}

/**
 * Jump-forward after `path`: the forced tokens, then the canonical spelling of the forced text
 * (see {@link spelledChain}), then forced tokens again, and so on, at most `max` ids. `forced` is
 * how many lead ids are forced (always accepted); the rest are proposals.
 */
export async function grammarChain(
  walk: GrammarWalk,
  path: readonly number[],
  max: number,
): Promise<{ tokens: number[]; forced: number }> {
  const tokens = await forcedChain(walk, path, max);
  const forced = tokens.length;
  for (;;) {
    const spelled = await spelledChain(walk, [...path, ...tokens], max - tokens.length);
    if (spelled.length === 0) break;
    tokens.push(...spelled);
    tokens.push(...(await forcedChain(walk, [...path, ...tokens], max - tokens.length)));
  }
  return { tokens, forced };
}

/**
 * The draft of a step without a drafter under jump-forward: the grammar's chain after the context
 * (see {@link grammarChain}), at most `g.maxNodes` ids.
 */
export async function jumpDraft(g: DraftGrammar): Promise<TokenTree> {
  const { tokens } = await grammarChain(g.walk, [], g.maxNodes);
  return { tokens, parents: tokens.map((_, i) => i - 1) };
}

/**
 * How a drafter builds its tree under a grammar: never proposing what the grammar refuses along a
 * path, and with `jumpForward`, extending branches by the tokens the grammar forces, which cost no
 * draft pass and no budget (they are always accepted), up to `maxNodes` nodes in all.
 */
export interface DraftGrammar {
  /** The grammar at the end of the context, walked over the tree's paths. */
  readonly walk: GrammarWalk;
  /** Whether forced tokens extend branches for free (jump-forward). */
  readonly jumpForward: boolean;
  /** Most nodes of the tree, forced ones included (the verification pass's rows, the cache's room). */
  readonly maxNodes: number;
}

/**
 * `tree` (depth-first) with each leaf followed by the tokens the grammar forces after it, as long
 * as the tree stays within `g.maxNodes` nodes: they are always accepted, so they cost no budget.
 */
export async function extendLeaves(g: DraftGrammar, tree: TokenTree): Promise<TokenTree> {
  const n = tree.tokens.length;
  // A tree without nodes: the chain forced after the context.
  if (n === 0) {
    const chain = await forcedChain(g.walk, [], g.maxNodes);
    return { tokens: chain, parents: chain.map((_, i) => i - 1) };
  }
  const isParent = new Set(tree.parents);
  const paths: number[][] = [];
  const tokens: number[] = [];
  const parents: number[] = [];
  const scores: number[] = [];
  // Index in the output of each input node; a leaf's chain follows it directly, so the output
  // stays depth-first.
  const at: number[] = [];
  for (let i = 0; i < n; i++) {
    const p = tree.parents[i]!;
    const path = [...(p < 0 ? [] : paths[p]!), tree.tokens[i]!];
    const score = tree.scores?.[i] ?? 0;
    paths.push(path);
    at.push(tokens.push(tree.tokens[i]!) - 1);
    parents.push(p < 0 ? -1 : at[p]!);
    scores.push(score);
    if (isParent.has(i)) continue;
    // Room left: maxNodes less the nodes out so far and the input nodes still to come.
    const room = g.maxNodes - tokens.length - (n - at.length);
    for (const t of await forcedChain(g.walk, path, room)) {
      parents.push(tokens.push(t) - 2);
      scores.push(score);
    }
  }
  return { tokens, parents, ...(tree.scores ? { scores } : {}) };
}

/** A draft tree cut to what a grammar allows, with the mask of every row of its verification pass. */
export interface ConstrainedDraft {
  draft: TokenTree;
  /**
   * [1 + draft.tokens.length, words] u32: row 0 for `last` (the tokens allowed after the context),
   * row i + 1 for draft node i (those allowed after the path to it), as `verify` scores them.
   */
  masks: Uint32Array;
}

/**
 * Cuts a draft tree to the nodes a grammar allows along their root-to-node path (a node that is not
 * allowed after its path drops with its subtree; so does anything below a completed output) and
 * gives each kept row its mask. Masks come from `walk`, which is back at its starting state on
 * return. Verifying under these masks picks, at every node, exactly the token plain constrained
 * decoding picks after the same path, so the emitted ids do not change. A grammar-aware drafter's
 * tree (see {@link DraftGrammar}) loses nothing here: its masks are the walk's already.
 */
export async function constrainDraft(walk: GrammarWalk, draft: TokenTree): Promise<ConstrainedDraft> {
  const rows: Uint32Array[] = [await walk.mask([])];
  const tokens: number[] = [];
  const parents: number[] = [];
  const scores: number[] = [];
  // Kept index of each proposal node (-1: dropped), and the path of each kept node.
  const kept: number[] = [];
  const paths: number[][] = [];
  for (const [i, token] of draft.tokens.entries()) {
    const parent = draft.parents[i]!;
    const parentKept = parent < 0 ? -1 : kept[parent]!;
    kept.push(-1);
    if (parent >= 0 && parentKept < 0) continue;
    const path = [...(parentKept < 0 ? [] : paths[parentKept]!), token];
    if (!walk.goTo(path)) continue;
    const index = tokens.push(token) - 1;
    parents.push(parentKept);
    scores.push(draft.scores?.[i] ?? 0);
    paths.push(path);
    kept[i] = index;
    // After a completed output nothing follows; its row is never emitted past, any valid mask does.
    rows.push(walk.done(path) ? rows[parentKept + 1]! : await walk.mask(path));
  }
  walk.reset();
  const words = rows[0]!.length;
  const masks = new Uint32Array(rows.length * words);
  for (const [r, m] of rows.entries()) masks.set(m, r * words);
  return { draft: { tokens, parents, ...(draft.scores ? { scores } : {}) }, masks };
}
