import { InvalidInputError } from '../errors.js';
import { childrenOfRow, type RankedChild } from '../kernels/sample/topk.js';
import type { GpuRunner } from '../model/gpu/runner.js';
import { CachedPrefix } from '../model/prefix.js';
import type { ModelRunner, SamplerSpec } from '../model/runner.js';
import { type DraftGrammar, extendLeaves, forcedChain, type GrammarWalk } from './constrained.js';
import { DeviceSpeculator, type DeviceStepOptions } from './device-step.js';
import type { Drafter, DraftProposal, DraftShape, SpeculativeStep } from './drafter.js';
import { rankChildren, samplingProbs } from './probs.js';

/** Most children a tree node gets, and most frontier nodes expanded per depth (EAGLE-2's top-k). */
const TREE_WIDTH = 4;
/** Most rows of one draft forward (the GPU runner's limit). */
const MAX_DRAFT_ROWS = 64;

/** Options of {@link ModelDrafter}. */
export interface ModelDrafterOptions {
  /** Tokens per draft prefill pass (default 64). */
  chunk?: number;
  /**
   * Greedy trees weigh children by the draft's distribution sharpened by this factor (default 1;
   * a draft head takes GREEDY_TREE_SHARPEN, see kernels/sample/topk.ts). Lossless whatever it is.
   */
  sharpen?: number;
}

/** A node of a tree being grown: parent is a node index or -1 (child of the context's last token). */
interface GrowNode {
  token: number;
  parent: number;
  depth: number;
  /** Sum of the children's log weights from the root (see {@link rankChildren}). */
  score: number;
  /** Forced by the grammar (jump-forward): its parent's score, no budget. */
  forced?: boolean;
}

/**
 * Drafts with a model: a small separate model sharing the target's tokenizer, or the target's own
 * weights at low precision (self-speculation). It keeps its own KV cache in step with the context:
 * each proposal first trims the cache to the longest prefix still valid (the accepted path) and
 * runs what is new. Then it either
 *
 * - grows a tree best-first (EAGLE-2, arXiv 2406.16858): at each depth the best frontier nodes by
 *   cumulative log weight are expanded with one draft forward (tree attention over the nodes so far)
 *   into their best children under the shared noise, and the `budget` best nodes are kept; or
 * - samples a chain with the target's sampler and returns the distribution of each step (for the
 *   classic rejection rule).
 *
 * Its choices use Gumbel noise keyed by absolute position, the target's, so its first child at every
 * node is its own Gumbel-argmax and it agrees with the target wherever their distributions do.
 */
export class ModelDrafter implements Drafter {
  /** The tokens in the draft cache, kept in step with the context. */
  private readonly cached: CachedPrefix;
  /** The device speculator for the last target (see {@link ModelDrafter.speculate}). */
  private device: { target: ModelRunner; speculator: DeviceSpeculator | undefined } | undefined;

  /** Tokens per draft prefill pass. */
  private readonly chunk: number;
  /** How greedy trees weigh children (RankSpec.sharpen): 1, or a head's sharpening. */
  private readonly sharpen: number;

  constructor(
    readonly name: string,
    private readonly runner: ModelRunner,
    o: ModelDrafterOptions = {},
  ) {
    this.cached = new CachedPrefix(runner);
    this.chunk = o.chunk ?? 64;
    this.sharpen = o.sharpen ?? 1;
  }

  async propose(
    context: readonly number[],
    budget: number,
    sampler: SamplerSpec,
    shape: DraftShape = 'tree',
    grammar?: DraftGrammar,
  ): Promise<DraftProposal> {
    if (grammar && shape === 'chain')
      throw new InvalidInputError(`drafter ${this.name}: chains are not drafted under a grammar`);
    // Jump-forward: the tokens the grammar forces after the context will be accepted, so the draft
    // takes them in as context (its cache keeps them for the next step) and the tree hangs below.
    const lead = grammar?.jumpForward ? await forcedChain(grammar.walk, [], grammar.maxNodes) : [];
    const room = this.runner.capacity - context.length - lead.length;
    const n = Math.min(budget, room, (grammar?.maxNodes ?? budget) - lead.length);
    if (n < 1) return chainOf(lead);
    // Chains take the sampled token after the context; trees rank the last scored row instead
    // (under a grammar, masked by it).
    const rootMask = grammar ? await grammar.walk.mask(lead) : undefined;
    const synced = await this.cached.sync([...context, ...lead], sampler, this.chunk, undefined, rootMask);
    const passes = synced.passes;
    if (shape === 'chain') {
      const drafted = await this.chain(synced.next, n, sampler);
      return { ...drafted, passes: passes + (drafted.passes ?? 0) };
    }
    const drafted = await this.tree(context.length + lead.length, n, sampler, grammar, lead);
    if (!grammar?.jumpForward) return { ...drafted, passes: passes + (drafted.passes ?? 0) };
    // The lead as a chain, the tree below it, and every leaf with the tokens forced after it.
    const tree = {
      tokens: [...lead, ...drafted.tokens],
      parents: [
        ...chainOf(lead).parents,
        ...drafted.parents.map((p) => (p < 0 ? lead.length - 1 : p + lead.length)),
      ],
      scores: [...lead.map(() => 0), ...(drafted.scores ?? [])],
    };
    return { ...(await extendLeaves(grammar, tree)), passes: passes + (drafted.passes ?? 0) };
  }

  async prefill(prompt: readonly number[], sampler: SamplerSpec, beforeChunk?: () => void): Promise<void> {
    const room = this.runner.capacity - prompt.length;
    if (prompt.length < 1 || room < 1) return;
    await this.cached.sync(prompt, sampler, this.chunk, beforeChunk);
  }

  /**
   * The whole step on the device when the draft runner and `target` are GPU runners on one device
   * (see DeviceSpeculator): the same tree as {@link ModelDrafter.propose} grows, except that its
   * depth is encoded ahead (adapted from the steps before).
   */
  async speculate(
    target: ModelRunner,
    context: readonly number[],
    budget: number,
    sampler: SamplerSpec,
    o: DeviceStepOptions = {},
  ): Promise<SpeculativeStep | undefined> {
    if (!onDevice(this.runner) || !onDevice(target)) return undefined;
    // A recurrent state follows trees on the host's path only (the device step lays rows out itself).
    if (this.runner.recurrent || target.recurrent) return undefined;
    // Paged experts need the host between layers: no device-side step.
    if (this.runner.hostDriven || target.hostDriven) return undefined;
    if (this.device?.target !== target) {
      this.device?.speculator?.dispose();
      this.device = {
        target,
        speculator: await DeviceSpeculator.create(this.runner.resident, target.resident),
      };
    }
    const speculator = this.device.speculator;
    const n = Math.min(budget, this.runner.capacity - context.length);
    if (!speculator?.fits(context, n)) return undefined;
    return speculator.step(this.cached, context, n, sampler, { sharpen: this.sharpen, ...o });
  }

  get weightBytesPerPass(): number | undefined {
    return this.runner.weightBytesPerPass;
  }

  /** Logits of the last draft forward: every scored row, or only `rows` (in that order). */
  private logits(rows?: readonly number[]): Promise<Float32Array> {
    if (!this.runner.lastLogits)
      throw new InvalidInputError(`drafter ${this.name}: its runner cannot read logits back`);
    return this.runner.lastLogits(rows);
  }

  /**
   * The `k` best children of scored `rows` of the last draft forward, at `positions` (see
   * {@link rankChildren}): ranked by the runner where the logits lie when it can
   * (`lastChildren`), else from the rows read back.
   */
  private async children(
    rows: readonly number[],
    positions: readonly number[],
    sampler: SamplerSpec,
    k: number,
  ): Promise<RankedChild[][]> {
    const rank = { ...sampler, sharpen: this.sharpen };
    if (this.runner.lastChildren) {
      const c = await this.runner.lastChildren(rows, positions, rank, k);
      return rows.map((_, i) => childrenOfRow(c, i, k));
    }
    const V = this.runner.spec.vocabSize;
    const logits = await this.logits(rows);
    return rows.map((_, i) => rankChildren(logits.subarray(i * V, (i + 1) * V), positions[i]!, rank, k));
  }

  /** A sampled chain of `n` tokens, with the draft distribution each was drawn from. */
  private async chain(first: number, n: number, sampler: SamplerSpec): Promise<DraftProposal> {
    const V = this.runner.spec.vocabSize;
    const probs = [samplingProbs((await this.logits()).subarray(0, V), sampler)];
    let next = first;
    const chain = [next];
    while (chain.length < n) {
      const out = await this.runner.forward({ tokens: [next] }, sampler, 'last');
      this.runner.commit([0]);
      this.cached.push([next]);
      next = out[0]!;
      chain.push(next);
      probs.push(samplingProbs((await this.logits()).subarray(0, V), sampler));
    }
    return { tokens: chain, parents: chain.map((_, i) => i - 1), probs, passes: chain.length - 1 };
  }

  /**
   * A best-first tree of at most `n` drafted nodes after a context of `L` tokens, all committed in
   * the draft cache (its last row's logits are the runner's last scored row). Node positions are
   * `L + depth`; the tree is recomputed from the cache at each round (one forward over the nodes
   * needed), and nothing of it is committed.
   *
   * Under a grammar every row of those forwards is masked by the grammar after its path (the root
   * row by the sync), so the children ranked are tokens it allows; an end token is never proposed
   * (the target picks it itself). Paths start with `lead` (the forced tokens the context ends with,
   * see {@link ModelDrafter.propose}). With jump-forward, a node about to be expanded first takes
   * the chain of tokens the grammar forces after it ("forced" nodes: no draft pass picks them, they
   * keep the parent's score and take no budget) and its children are ranked at the chain's end.
   * The tree keeps the `n` best drafted nodes with the forced ones under them, `maxNodes` less the
   * lead in all.
   */
  private async tree(
    L: number,
    n: number,
    sampler: SamplerSpec,
    g?: DraftGrammar,
    lead: readonly number[] = [],
  ): Promise<DraftProposal> {
    const width = Math.min(TREE_WIDTH, n);
    const nodes: GrowNode[] = [];
    const pathOf = (i: number): number[] => {
      const path: number[] = [];
      for (let a = i; a >= 0; a = nodes[a]!.parent) path.push(nodes[a]!.token);
      return [...lead, ...path.reverse()];
    };
    // The forced chain below node e; returns its last node (e itself without one).
    const extend = async (e: number): Promise<number> => {
      if (!g?.jumpForward) return e;
      let tail = e;
      for (const token of await forcedChain(g.walk, pathOf(e), g.maxNodes)) {
        const { depth, score } = nodes[tail]!;
        tail = nodes.push({ token, parent: tail, depth: depth + 1, score, forced: true }) - 1;
      }
      return tail;
    };
    // Ranked children of node e as new nodes (under a grammar, those after which the output goes on).
    const grow = (e: number, ranked: readonly RankedChild[]): number[] => {
      const parent = e < 0 ? { score: 0, depth: -1 } : nodes[e]!;
      const path = g ? (e < 0 ? lead : pathOf(e)) : [];
      const added: number[] = [];
      for (const c of ranked) {
        if (g && !g.walk.allows(path, c.token)) continue;
        // f32 sums, as the device's tree kernel adds them (so both grow the same tree)
        const score = e < 0 ? c.logWeight : Math.fround(parent.score + c.logWeight);
        added.push(nodes.push({ token: c.token, parent: e, depth: parent.depth + 1, score }) - 1);
      }
      return added;
    };
    // The children of the context's end come from the synced row.
    let frontier = grow(-1, (await this.children([0], [L], sampler, width))[0]!);
    const rowRoom = Math.min(MAX_DRAFT_ROWS, this.runner.capacity - L);
    let passes = 0;
    for (let round = 1; round < n && frontier.length > 0; round++) {
      // A child scores at most its parent, so frontier nodes below the n-th best score overall
      // cannot add a node to the final tree.
      const drafted = nodes.filter((x) => !x.forced);
      const bar = drafted.length >= n ? nthBest(drafted, n) : Number.NEGATIVE_INFINITY;
      // The nodes whose children this round ranks (a chosen node, or the end of its forced chain).
      const expand: number[] = [];
      let rows = new Set<number>();
      for (const i of [...frontier].sort((a, b) => nodes[b]!.score - nodes[a]!.score)) {
        if (expand.length >= width || nodes[i]!.score <= bar) break;
        const tail = await extend(i);
        const withPath = new Set(rows);
        for (let a = tail; a >= 0; a = nodes[a]!.parent) withPath.add(a);
        if (withPath.size > rowRoom) continue;
        rows = withPath;
        expand.push(tail);
      }
      if (expand.length === 0) break;
      // One forward over the expanded nodes and their ancestors, in depth-first order.
      const order = depthFirst(nodes, rows);
      const rowOf = new Map(order.map((node, r) => [node, r]));
      const masks = g ? await rowMasks(g.walk, order.map(pathOf)) : undefined;
      await this.runner.forward(
        {
          tokens: order.map((i) => nodes[i]!.token),
          parents: order.map((i) => (nodes[i]!.parent < 0 ? -1 : rowOf.get(nodes[i]!.parent)!)),
          ...(masks ? { masks } : {}),
        },
        sampler,
        'all',
      );
      passes++;
      // Only the expanded nodes' children come back (their ancestors' rows are not needed).
      const ranked = await this.children(
        expand.map((e) => rowOf.get(e)!),
        expand.map((e) => L + nodes[e]!.depth + 1),
        sampler,
        width,
      );
      frontier = expand.flatMap((e, r) => grow(e, ranked[r]!));
    }
    // Nothing of the tree stays in the draft cache: the next forward overwrites its rows.
    this.runner.trim(L);
    const keep = g ? keptUnder(nodes, n, g.maxNodes - lead.length) : bestNodes(nodes, n);
    const order = depthFirst(nodes, keep);
    const index = new Map(order.map((node, i) => [node, i]));
    return {
      tokens: order.map((i) => nodes[i]!.token),
      parents: order.map((i) => (nodes[i]!.parent < 0 ? -1 : index.get(nodes[i]!.parent)!)),
      scores: order.map((i) => nodes[i]!.score),
      passes,
    };
  }

  dispose(): void {
    this.device?.speculator?.dispose();
    this.runner.dispose();
  }
}

/**
 * The `n` best nodes by score; ties go to the shallower, then the earlier node, so a parent (whose
 * score is never below its child's) always precedes its children and the set is ancestor-closed.
 */
function bestNodes(nodes: readonly GrowNode[], n: number): Set<number> {
  const ranked = nodes
    .map((_, i) => i)
    .sort((a, b) => nodes[b]!.score - nodes[a]!.score || nodes[a]!.depth - nodes[b]!.depth || a - b);
  return new Set(ranked.slice(0, n));
}

/**
 * Under a grammar: the `n` best drafted nodes (as {@link bestNodes} ranks them) and the forced
 * nodes below kept ones, at most `maxNodes`, taken in creation order (a parent before its
 * children) so that the set is ancestor-closed.
 */
function keptUnder(nodes: readonly GrowNode[], n: number, maxNodes: number): Set<number> {
  const drafted = nodes.map((_, i) => i).filter((i) => !nodes[i]!.forced);
  const best = new Set(
    drafted
      .sort((a, b) => nodes[b]!.score - nodes[a]!.score || nodes[a]!.depth - nodes[b]!.depth || a - b)
      .slice(0, n),
  );
  const keep = new Set<number>();
  for (const [i, x] of nodes.entries()) {
    if (keep.size >= maxNodes) break;
    if ((x.forced || best.has(i)) && (x.parent < 0 || keep.has(x.parent))) keep.add(i);
  }
  return keep;
}

/** `tokens` as a chain proposal. */
function chainOf(tokens: readonly number[]): DraftProposal {
  return { tokens: [...tokens], parents: tokens.map((_, i) => i - 1) };
}

/** The masks of `paths` one after another, [paths.length, words] u32. */
async function rowMasks(walk: GrammarWalk, paths: readonly (readonly number[])[]): Promise<Uint32Array> {
  // One after another: the walk moves the grammar to each path.
  const rows: Uint32Array[] = [];
  for (const p of paths) rows.push(await walk.mask(p));
  const words = rows[0]?.length ?? 0;
  const out = new Uint32Array(rows.length * words);
  for (const [r, m] of rows.entries()) out.set(m, r * words);
  return out;
}

/** The n-th best score. */
function nthBest(nodes: readonly GrowNode[], n: number): number {
  return nodes.map((x) => x.score).sort((a, b) => b - a)[n - 1]!;
}

/**
 * The nodes of an ancestor-closed subset in depth-first order, siblings in creation order (best
 * child first, so the drafter's own choices form the first path).
 */
function depthFirst(nodes: readonly GrowNode[], subset: ReadonlySet<number>): number[] {
  const children = new Map<number, number[]>();
  for (const i of [...subset].sort((a, b) => a - b)) {
    const p = nodes[i]!.parent;
    const list = children.get(p) ?? [];
    children.set(p, list);
    list.push(i);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(-1);
  return out;
}

/**
 * Whether a runner is a GPU runner with device-resident passes (checked by shape, so the GPU
 * runner's module stays a chunk the engine loads when it places a model on the GPU).
 */
function onDevice(r: ModelRunner): r is GpuRunner {
  return 'resident' in r && r.resident !== undefined;
}
