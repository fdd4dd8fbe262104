import { createBuffer, mapForRead } from '../gpu/buffers.js';
import { BindGroupCache } from '../kernels/bind.js';
import { TOPK_MAX, TopKChildren } from '../kernels/sample/topk.js';
import {
  DeviceTree,
  readTreeResult,
  TREE_MAX_DEPTHS,
  TREE_NMAX,
  TREE_RESULT_WORDS,
  TREE_WIDTH,
} from '../kernels/tree/tree.js';
import { MAX_FORWARD_TOKENS } from '../model/blocks/gpu.js';
import type { ResidentPasses } from '../model/gpu/resident.js';
import type { CachedPrefix } from '../model/prefix.js';
import type { SamplerSpec } from '../model/runner.js';
import type { SpeculativeStep } from './drafter.js';

/** Options of {@link DeviceSpeculator.step}. */
export interface DeviceStepOptions {
  /**
   * Draft passes (depths) to encode. Default: adaptive, from the trees of the steps before (the
   * depth they grew to, one more while they were cut short).
   */
  depths?: number;
  /** How greedy trees weigh children (RankSpec.sharpen; default 1). */
  sharpen?: number;
}

/**
 * Speculative decoding with the whole step on the device, for a draft model (or a low-precision
 * copy of the target) on the same GPU as the target: one submission encodes the draft's catch-up on
 * the context, the best-first growth of the draft tree (per depth: one draft pass over the
 * frontier, its children ranked by TopKChildren, then the GROW kernel appends them and lays out
 * the next frontier's inputs), the PICK of the kept tree as the target's verify pass, the verify
 * pass itself, the ACCEPT kernel's walk of the longest accepted path and the commit of that path's
 * K/V rows in the target's cache. The CPU reads back one result of a few hundred bytes (the
 * tree's tokens, parents and scores, the accepted nodes, the emitted tokens): one round trip per
 * step.
 *
 * The tree is the one ModelDrafter grows on the CPU (same ranking, same f32 scores, same bar and
 * width), except that its growth stops after `depths` passes, encoded ahead: the speculator picks
 * that from the trees before. The draft's tree rows go to scratch slots after the context (the
 * draft cache never commits them), each node at its own slot, seeing its ancestors wherever they
 * lie (attention's visibility masks). Lossless as the CPU step is: every emitted token is the
 * target's own choice with its own sampler.
 */
export class DeviceSpeculator {
  private readonly binds: BindGroupCache;
  private readonly tree: DeviceTree;
  private readonly ranker: TopKChildren;
  private readonly picks: GPUBuffer; // [TREE_WIDTH, 2] u32 rows to rank and their children's position
  private readonly children: GPUBuffer; // [TREE_WIDTH, TREE_WIDTH, 2] u32 ranked children
  private readonly staging: GPUBuffer; // [TREE_RESULT_WORDS] u32, MAP_READ
  /** Depths to encode next (adaptive). */
  private depths = 2;

  private constructor(
    private readonly draft: ResidentPasses,
    private readonly target: ResidentPasses,
  ) {
    const ctx = draft.gpu;
    this.binds = new BindGroupCache(ctx.device);
    this.tree = new DeviceTree(ctx, this.binds);
    this.ranker = new TopKChildren(ctx, this.binds, { vocab: draft.spec.vocabSize, maxRows: TREE_WIDTH });
    this.picks = createBuffer(ctx, TREE_WIDTH * 8, 'tree-picks');
    this.children = createBuffer(ctx, TREE_WIDTH * TOPK_MAX * 8, 'tree-children');
    this.staging = ctx.device.createBuffer({
      label: 'tree-result-readback',
      size: TREE_RESULT_WORDS * 4,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
  }

  /** A speculator for `draft` and `target`, or undefined when they do not share a device. */
  static async create(draft: ResidentPasses, target: ResidentPasses): Promise<DeviceSpeculator | undefined> {
    if (draft.gpu !== target.gpu || draft.spec.vocabSize !== target.spec.vocabSize) return undefined;
    await Promise.all([DeviceTree.prepare(draft.gpu), TopKChildren.prepare(draft.gpu)]);
    return new DeviceSpeculator(draft, target);
  }

  /**
   * Whether a step over `context` with budget `n` fits: the tree's scratch slots in the draft
   * cache (a full draft pass after the context) and the verify pass in the target's.
   */
  fits(context: readonly number[], n: number): boolean {
    return (
      n >= 1 &&
      n <= TREE_NMAX &&
      this.draft.capacity - context.length >= TREE_WIDTH &&
      this.target.kvLength + n + 1 <= this.target.capacity
    );
  }

  /**
   * One speculative step after `context` (every token so far; its last, `last`, is the target's
   * latest choice and not in the target's cache, whose committed rows are the context's others):
   * `draftCache` brings the draft's cache to the context, the tree of at most `n` nodes is grown
   * and verified, and the accepted path is committed in the target's cache.
   */
  async step(
    draftCache: CachedPrefix,
    context: readonly number[],
    n: number,
    sampler: SamplerSpec,
    o: DeviceStepOptions = {},
  ): Promise<SpeculativeStep> {
    const { draft, target, tree, ranker } = this;
    const ctx = draft.gpu;
    // The draft's catch-up: the context's tokens its cache lacks (at least the last one), in the
    // same submission unless they exceed one pass (a long prompt's first step).
    let fresh = draftCache.trimTo(context);
    let catchUp = 0;
    if (fresh.length > MAX_FORWARD_TOKENS) {
      catchUp = (await draftCache.sync(context.slice(0, -1), sampler, MAX_FORWARD_TOKENS)).passes;
      fresh = draftCache.trimTo(context);
    }
    const L = context.length;
    const width = Math.min(TREE_WIDTH, n);
    const maxSlots = Math.min(64, draft.capacity - L);
    // Draft passes after the root's ranking: at most n - 1 (the CPU loop's bound), each using up
    // to `width` scratch slots.
    const depths = Math.max(
      0,
      Math.min(o.depths ?? this.depths, n - 1, TREE_MAX_DEPTHS, Math.floor(maxSlots / width)),
    );
    const bytes = TREE_RESULT_WORDS * 4;
    // One submission runs the draft and the target kernels with several value sets each.
    ctx.counter.beginBatch();
    try {
      const enc = ctx.device.createCommandEncoder({ label: 'speculative-step' });
      draft.encodeChain(enc, fresh, sampler);
      draftCache.push(fresh);
      tree.setStep({ L, n, width, maxSlots, tb: target.kvLength, last: context[L - 1]! });
      const rank = {
        seed: sampler.seed,
        temperature: sampler.temperature,
        topK: sampler.topK,
        topP: sampler.topP,
        sharpen: o.sharpen ?? 1,
      };
      let pass = enc.beginComputePass({ label: 'tree-root' });
      tree.encodeInit(pass, this.picks);
      ranker.encode(pass, draft.io.logits, this.picks, this.children, 1, width, rank);
      tree.encodeGrow(pass, this.children, this.picks, draft.io);
      pass.end();
      for (let d = 1; d <= depths; d++) {
        draft.encodeResident(enc, width, sampler, { lastSlot: L + maxSlots - 1, sample: false });
        pass = enc.beginComputePass({ label: `tree-depth-${d}` });
        ranker.encode(pass, draft.io.logits, this.picks, this.children, width, width, rank);
        tree.encodeGrow(pass, this.children, this.picks, draft.io);
        pass.end();
      }
      pass = enc.beginComputePass({ label: 'tree-pick' });
      tree.encodePick(pass, target.io);
      pass.end();
      target.encodeResident(enc, n + 1, sampler);
      pass = enc.beginComputePass({ label: 'tree-accept' });
      tree.encodeAccept(pass, target.io.out, target.io.commitSlots);
      pass.end();
      target.encodeCommit(enc, n + 1);
      enc.copyBufferToBuffer(tree.result, 0, this.staging, 0, bytes);
      ctx.counter.submit([enc.finish()]);
    } finally {
      ctx.counter.endBatch();
    }
    await mapForRead(ctx, this.staging, 0, bytes);
    const r = readTreeResult(new Uint32Array(this.staging.getMappedRange(0, bytes).slice(0)));
    this.staging.unmap();
    target.adopt(r.accepted.length + 1);
    // Next time: as many passes as this tree used (GROWs that picked a frontier), one more while
    // it was cut short.
    this.depths = r.done ? Math.max(1, r.grown) : depths + 1;
    return {
      draft: { tokens: r.tokens, parents: r.parents, scores: r.scores },
      accepted: r.accepted,
      emitted: r.emitted,
      draftPasses: catchUp + 1 + depths,
    };
  }

  dispose(): void {
    this.tree.destroy();
    this.ranker.destroy();
    for (const b of [this.picks, this.children, this.staging]) b.destroy();
  }
}
