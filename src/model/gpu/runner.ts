import { InvalidInputError } from '../../errors.js';
import { writeBuffer } from '../../gpu/buffers.js';
import { countsSince, type GpuCounts, zeroCounts } from '../../gpu/counters.js';
import { createGpuContext, describeAdapter, type GpuContext } from '../../gpu/device.js';
import type { GpuTimer } from '../../gpu/timing.js';
import { visWords } from '../../kernels/attention/attention-split.js';
import type { KvFormat } from '../../kernels/kv/kv.js';
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import { maskWordsOf } from '../../kernels/sample/mask.js';
import { type Children, TOPK_MAX, TopKChildren, unpackChildren } from '../../kernels/sample/topk.js';
import type { SteerPlan } from '../../kernels/steer/steer.js';
import type { Quant, RotationChoice } from '../../quant/pack.js';
import { attentionReadBytes } from '../blocks/attention/footprint.js';
import { RING_ROLLBACK } from '../blocks/attention/gpu.js';
import { type BoundBlock, MAX_FORWARD_TOKENS } from '../blocks/gpu.js';
import { isRecurrentBlock } from '../blocks/index.js';
import { modelBlocks } from '../families/index.js';
import type { OpenedModel } from '../load.js';
import {
  checkFeatureRange,
  type DecodeSession,
  type ExpertCacheCounts,
  type ExpertTally,
  type ForwardInput,
  type ModelRunner,
  type RankSpec,
  type SamplerSpec,
} from '../runner.js';
import { isRecurrent, type ModelSpec } from '../spec/spec.js';
import { draftTree } from '../tree.js';
import {
  type Activations,
  allocateActivations,
  type ChildrenRanker,
  checkRunnerShapes,
  type FeatureStore,
  makeChildrenRanker,
  makeFeatureStore,
} from './buffers.js';
import { openDecodeSession } from './decode-session.js';
import type { HeadPlacement } from './draft-stages.js';
import { expertCacheCounts, TallyReader } from './experts.js';
import { buildKernels, destroyKernels } from './kernels.js';
import {
  assertNoSession,
  commitRerun,
  encodeCommits,
  encodeHostPass,
  encodePass,
  type RunnerCursor,
  type RunnerParts,
  readBack,
  readStaging,
  stageInputs,
} from './pass.js';
import { ResidentPasses } from './resident.js';
import { destroyWeights, type PlaceWeightsOptions, placeWeights } from './weights.js';

/** Options of {@link createGpuRunner}. */
export interface GpuRunnerOptions {
  quant: Quant;
  /** KV cache slots. */
  capacity: number;
  gpu?: GpuContext;
  /** Destroy `gpu` with the runner (default: only when the runner created it). */
  ownsContext?: boolean;
  onProgress?: PlaceWeightsOptions['onProgress'];
  /** Activation steering applied in every forward pass (see kernels/steer). */
  steer?: SteerPlan;
  /**
   * `'hadamard'`: rotate the input of every `*_proj` linear online (R·x on the GPU) and pack its
   * weights as W·Rᵀ (see `packLinear`), which spreads outliers before rounding; `'auto'`: only the
   * inputs whose width is a Hadamard size as it stands (see `RotationChoice`). Default `'none'`.
   */
  rotate?: RotationChoice;
  /**
   * `'f16'`: the KV cache holds IEEE halves (rounded to nearest even), which halves its memory and
   * the bytes attention reads. Default `'f32'`.
   */
  kvFormat?: KvFormat;
  /**
   * With an integer `kvFormat`: rotate keys (and the queries) per head before rounding, where the
   * head size is a power of two (default true; see kernels/kv/kv-quant.ts).
   */
  kvRotate?: boolean;
  /** A draft head's placement (see model/draft/gpu-head.ts, which makes it); needs `features`. */
  head?: HeadPlacement;
  /** Allocate the weights' buffers without reading them (see PlaceWeightsOptions.allocateOnly). */
  allocateOnly?: boolean;
  /** GPU bytes a mixture's experts may take (see PlaceWeightsOptions.expertBudget; default all). */
  expertBudget?: number;
  /**
   * Keep the features (the residual stream after the last block) of every cache slot beside the
   * KV cache, committed with it, for a draft head ({@link GpuRunner.features}). Costs one scatter
   * per pass and one compaction per tree commit. Default false.
   */
  features?: boolean;
}

/**
 * Runs a model on WebGPU: weights resident in the chosen format, one KV cache buffer pair per
 * layer, activation buffers for up to {@link MAX_FORWARD_TOKENS} tokens, and a kernel instance per
 * call site, all made once. A forward pass is one compute pass and one 4-byte-per-row readback of
 * the sampled ids: logits never leave the GPU, and nothing is created per token.
 */
export class GpuRunner implements ModelRunner {
  /** Where the cache stands (shared with {@link GpuRunner.resident}). */
  private readonly cur: RunnerCursor = {
    committed: 0,
    lastTokens: 0,
    lastBase: 0,
    lastRows: 0,
    session: undefined,
    version: 0,
    lastTree: false,
  };
  /** MAP_READ copy of the logits buffer for {@link GpuRunner.lastLogits}, made on first use. */
  private logitsStaging: GPUBuffer | undefined;
  /** The kernel and buffers of {@link GpuRunner.lastChildren}, made on first use. */
  private children: ChildrenRanker | undefined;
  private lastCounts: GpuCounts = zeroCounts();
  /** The most rows committed since the last trim to 0, as of the last trim (see canTrim). */
  private reach = 0;
  /** Trims that dropped committed rows (see {@link GpuRunner.trims}). */
  private dropped = 0;
  /**
   * Bytes of weights one forward pass reads for one token, as packed: every layer's seven linears
   * and the LM head whole (a batch of rows reads each weight once), a mixture layer's chosen
   * experts (topK of them: a pass of many rows reads the union of its rows' choices), plus one row
   * of the embedding table (its share of the packed bytes, rounded up).
   */
  readonly weightBytesPerPass: number;
  /**
   * When set, every forward is encoded as one compute pass per section ({@link PROFILE_SECTIONS}:
   * the embedding; per layer q|k|v with its cache write, attention, o, the gated MLP and down;
   * the head; the sampler), each timed by this timer, so a profile shows where a step's GPU time
   * goes ({@link profileSections}). The dispatches are the same; only the pass boundaries (a few
   * microseconds each on a GPU) are added. The caller reads the timer after each forward, before
   * it holds `capacity` passes.
   */
  profiler: GpuTimer | undefined;

  private readonly ctx: GpuContext;
  private readonly a: Activations;
  private readonly feats: FeatureStore | undefined;
  /** Passes whose inputs a kernel writes on the device, encoded into the caller's submission. */
  readonly resident: ResidentPasses;
  /** Some block needs the host between layers (paged experts: BoundBlock.host): no device loops. */
  readonly hostDriven: boolean;
  private readonly tally: TallyReader;

  constructor(
    readonly spec: ModelSpec,
    readonly capacity: number,
    private readonly parts: RunnerParts,
    private readonly ownsContext: boolean,
  ) {
    ({ ctx: this.ctx, a: this.a, feats: this.feats } = parts);
    this.resident = new ResidentPasses(spec, capacity, parts, this.cur, () => this.profiler);
    this.hostDriven = parts.k.blocks.some((b) => b.host !== undefined);
    this.tally = new TallyReader(this.ctx, parts.k.blocks);
    const linears = parts.w.blocks.flatMap((b) => b.matrices);
    // A token's row of the embedding and of each lookup table (Gemma 4's per-layer inputs).
    const rows = [parts.w.embed, ...parts.w.blocks.flatMap((b) => b.tables ?? [])];
    this.weightBytesPerPass =
      linears.reduce((sum, m) => sum + m.bytes, 0) +
      parts.w.blocks.reduce((sum, b) => sum + (b.expertBytesPerToken ?? 0), 0) +
      parts.w.lmHead.bytes +
      rows.reduce((sum, t) => sum + Math.ceil(t.bytes / t.rows), 0) +
      (parts.stages?.weightBytes ?? 0);
  }

  /** See {@link ModelRunner.expertTally}: the routing table's tallies, in one 12-byte readback. */
  expertTally(): Promise<ExpertTally | undefined> {
    return this.tally.read();
  }

  /** See {@link ModelRunner.expertCache}: the paged mixture layers' caches, summed. */
  expertCache(): ExpertCacheCounts | undefined {
    return expertCacheCounts(this.parts.k.blocks);
  }

  /** See {@link ModelRunner.attentionBytes}. */
  attentionBytes(keys: number): number {
    return attentionReadBytes(this.spec, this.parts.kv, keys);
  }

  /** Bytes the attention layers' K and V buffers hold (see {@link ModelRunner.kvBytes}). */
  get kvBytes(): number {
    return this.parts.k.blocks.reduce((sum, b) => sum + b.kvBytes, 0);
  }

  /** [capacity, H] the features of every cache slot, when kept (a draft head reads them). */
  get featureStore(): GPUBuffer | undefined {
    return this.feats?.store;
  }

  /**
   * The KV cache target layer `layer` holds (undefined for a layer that shares another's or holds
   * none): its buffers and shape, which a drafter on the same device reads (Gemma 4's assistant).
   */
  kvCache(layer: number): NonNullable<BoundBlock['kv']> | undefined {
    return this.parts.k.blocks.find((b) => b.kv?.layer === layer)?.kv;
  }

  /** The resident embedding table (a draft head on the same device borrows it). */
  get embedding(): GpuMatrix {
    return this.parts.w.embed;
  }

  /**
   * What the last {@link GpuRunner.forward} asked of the device, from its first buffer write to
   * its readback of the sampled ids (zeros before the first); in a decode session, what the device
   * was asked between the last two ids returned (or since the session opened): in steady state one
   * step, its readback and the submission of the step after it.
   */
  get lastForward(): GpuCounts {
    return { ...this.lastCounts };
  }

  /** Totals of the device this runner runs on (shared with any other runner placed on it). */
  deviceCounts(): GpuCounts {
    return this.ctx.counter.snapshot();
  }

  get kvLength(): number {
    return this.cur.committed;
  }

  /**
   * Trims that dropped committed rows, so far: while it stays the same, committed rows only grow
   * and never change (a reader of the cache, the assistant's, keeps what it read until it moves).
   */
  get trims(): number {
    return this.dropped;
  }

  get device(): { adapter: string; kernels: 'gpu' | 'serial' } {
    return { adapter: describeAdapter(this.ctx.adapter), kernels: this.ctx.kernels };
  }

  /** The device this runner runs on (a draft runner placed beside a target shares it). */
  get gpu(): GpuContext {
    return this.ctx;
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    this.ctx.assertAlive();
    assertNoSession(this.cur, 'forward');
    const T = input.tokens.length;
    const { spec, a } = this;
    if (T < 1 || T > MAX_FORWARD_TOKENS)
      throw new InvalidInputError(`forward: ${T} tokens, must be 1..${MAX_FORWARD_TOKENS}`);
    const base = this.cur.committed;
    if (base + T > this.capacity)
      throw new InvalidInputError(
        `forward: ${base} cached + ${T} new tokens exceed the KV cache of ${this.capacity}`,
      );
    for (const t of input.tokens)
      if (!Number.isInteger(t) || t < 0 || t >= spec.vocabSize)
        throw new InvalidInputError(`forward: token id ${t} is outside the vocabulary of ${spec.vocabSize}`);
    const tree = draftTree(input.parents ?? input.tokens.map((_, i) => i - 1));
    const isTree = tree.depth.some((d, i) => d !== i);
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    const R = picked.length;
    const W = maskWordsOf(spec.vocabSize);
    if (input.masks && input.masks.length !== R * W)
      throw new InvalidInputError(
        `forward: masks hold ${input.masks.length} words, need ${R} rows × ${W} (ceil(vocab / 32))`,
      );
    const { ctx } = this;
    const before = ctx.counter.snapshot();
    // A draft head's tree whose rows read rows of the same forward runs in waves (lazily loaded).
    const stages = this.parts.stages ? await import('./head-waves.js') : undefined;
    const waves =
      stages && this.parts.stages ? stages.headWaves(tree, base, this.parts.stages.known()) : undefined;
    if (stages && waves && Math.max(...waves) > 0) {
      const ids = await stages.forwardWaves(this.parts, this.profiler, tree, waves, {
        tokens: input.tokens,
        picked,
        base,
        sampler,
        masks: input.masks,
      });
      this.lastCounts = countsSince(ctx.counter.snapshot(), before);
      this.cur.lastTokens = T;
      this.cur.lastBase = base;
      this.cur.lastRows = R;
      return ids;
    }
    const enc = ctx.device.createCommandEncoder({ label: 'forward' });
    stageInputs(this.ctx, this.a, enc, {
      ids: input.tokens,
      positions: tree.depth.map((d) => base + d),
      slots: tree.depth.map((_, i) => base + i),
      vis: visWords(tree.end),
      rows: picked,
      // The token after node i stands at position base + depth(i) + 1: the Gumbel key's position.
      samplePositions: picked.map((i) => base + tree.depth[i]! + 1),
    });
    const o = {
      ...(input.masks ? { masks: input.masks } : {}),
      version: this.cur.version,
      tree: isTree,
      prefill: input.prefill === true && !isTree,
    };
    // A model with blocks that need the host between layers (paged experts) ends in another encoder.
    let last = enc;
    if (this.hostDriven) last = await encodeHostPass(this.parts, enc, T, R, base, sampler, o);
    else encodePass(this.parts, this.profiler, enc, T, R, base, sampler, o);
    last.copyBufferToBuffer(a.out, 0, a.staging, 0, R * 4);
    ctx.counter.submit([last.finish()]);
    const ids = new Int32Array(await readStaging(ctx, a.staging, R * 4));
    this.lastCounts = countsSince(ctx.counter.snapshot(), before);
    this.cur.lastTokens = T;
    this.cur.lastBase = base;
    this.cur.lastRows = R;
    this.cur.lastTree = isTree;
    return ids;
  }

  /** Opens a decode session (see {@link ModelRunner.decode} and {@link openDecodeSession}). */
  decode(first: number, sampler: SamplerSpec, steps: number): DecodeSession {
    return openDecodeSession(this.parts, this.cur, first, sampler, steps, {
      capacity: this.capacity,
      profiler: () => this.profiler,
      onCounts: (counts) => {
        this.lastCounts = counts;
      },
    });
  }

  /**
   * Logits [R, V] of the rows the last forward scored (or of `rows` only, in that order), copied to
   * the CPU. Plain and Gumbel decoding never read logits back; the rejection rule and best-first
   * tree drafting do (see {@link ModelRunner.lastLogits}). The staging buffer is made on first use
   * and kept, so a speculative loop creates nothing per pass.
   */
  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    this.ctx.assertAlive();
    const rowBytes = this.spec.vocabSize * 4;
    for (const r of rows ?? [])
      if (!Number.isInteger(r) || r < 0 || r >= this.cur.lastRows)
        throw new InvalidInputError(
          `lastLogits: row ${r} is not one of the ${this.cur.lastRows} scored rows`,
        );
    if (rows && rows.length > this.cur.lastRows)
      throw new InvalidInputError(`lastLogits: ${rows.length} rows asked for, ${this.cur.lastRows} scored`);
    const bytes = (rows?.length ?? this.cur.lastRows) * rowBytes;
    if (bytes === 0) return new Float32Array(0);
    this.logitsStaging ??= this.ctx.device.createBuffer({
      label: 'logits-readback',
      size: this.a.logits.size,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const staging = this.logitsStaging;
    const enc = this.ctx.device.createCommandEncoder({ label: 'logits-readback' });
    if (!rows) enc.copyBufferToBuffer(this.a.logits, 0, staging, 0, bytes);
    for (const [i, r] of (rows ?? []).entries())
      enc.copyBufferToBuffer(this.a.logits, r * rowBytes, staging, i * rowBytes, rowBytes);
    this.ctx.counter.submit([enc.finish()]);
    return new Float32Array(await readStaging(this.ctx, staging, bytes));
  }

  /**
   * The k (≤ {@link TOPK_MAX}) best children of scored rows of the last forward, ranked on the GPU
   * by {@link TopKChildren} from the logits where they lie (see {@link ModelRunner.lastChildren}):
   * one write of the rows and positions, one pass, and one readback of 8 bytes per child. The
   * kernel and its buffers are made on first use and kept.
   */
  async lastChildren(
    rows: readonly number[],
    positions: readonly number[],
    sampler: RankSpec,
    k: number,
  ): Promise<Children> {
    this.ctx.assertAlive();
    const R = rows.length;
    if (R < 1 || R > MAX_FORWARD_TOKENS)
      throw new InvalidInputError(`lastChildren: ${R} rows, must be 1..${MAX_FORWARD_TOKENS}`);
    if (positions.length !== R)
      throw new InvalidInputError(`lastChildren: ${R} rows but ${positions.length} positions`);
    for (const r of rows)
      if (!Number.isInteger(r) || r < 0 || r >= this.cur.lastRows)
        throw new InvalidInputError(
          `lastChildren: row ${r} is not one of the ${this.cur.lastRows} scored rows`,
        );
    if (!Number.isInteger(k) || k < 1 || k > TOPK_MAX)
      throw new InvalidInputError(`lastChildren: k must be 1..${TOPK_MAX}, got ${k}`);
    const { ctx } = this;
    if (!this.children) {
      await TopKChildren.prepare(ctx);
      this.children = makeChildrenRanker(ctx, this.spec.vocabSize);
    }
    const c = this.children;
    writeBuffer(ctx, c.picks, Uint32Array.from(rows.flatMap((r, i) => [r, positions[i]!])));
    const enc = ctx.device.createCommandEncoder({ label: 'children' });
    const pass = enc.beginComputePass({ label: 'children' });
    c.op.encode(pass, this.a.logits, c.picks, c.out, R, k, {
      seed: sampler.seed,
      temperature: sampler.temperature,
      topK: sampler.topK,
      topP: sampler.topP,
      sharpen: sampler.sharpen,
    });
    pass.end();
    const bytes = R * k * 8;
    enc.copyBufferToBuffer(c.out, 0, c.staging, 0, bytes);
    ctx.counter.submit([enc.finish()]);
    return unpackChildren(new Uint32Array(await readStaging(ctx, c.staging, bytes)), R, k);
  }

  commit(path: readonly number[]): void {
    assertNoSession(this.cur, 'commit');
    if (this.cur.lastBase !== this.cur.committed)
      throw new InvalidInputError('commit: the cache changed since the last forward');
    for (const i of path)
      if (!Number.isInteger(i) || i < 0 || i >= this.cur.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.cur.lastTokens} tokens)`,
        );
    // A chain's whole pass wrote the state after it: committing it is a version step. Any other
    // path (a tree's, a chain's prefix) runs again as a chain from the committed state.
    if (this.recurrent && path.length > 0) {
      const whole =
        !this.cur.lastTree && path.length === this.cur.lastTokens && path.every((n, i) => n === i);
      if (!whole) {
        commitRerun(this.parts, this.cur, path);
        return;
      }
      this.cur.version++;
    }
    // Rows already in place (a chain's prefix) need no copy.
    if (path.some((node, i) => node !== i)) {
      const slots = Uint32Array.from(path, (i) => this.cur.committed + i);
      writeBuffer(this.ctx, this.a.commitSlots, slots);
      const enc = this.ctx.device.createCommandEncoder({ label: 'commit' });
      const pass = enc.beginComputePass({ label: 'commit' });
      encodeCommits(this.parts, pass, {
        slots: this.a.commitSlots,
        count: path.length,
        committed: this.cur.committed,
        moved: true,
      });
      pass.end();
      this.ctx.counter.submit([enc.finish()]);
    }
    this.cur.committed += path.length;
    this.cur.lastTokens = 0;
  }

  /**
   * Committed features [to - from, H] (see {@link ModelRunner.features}), copied back in one
   * readback. Present only when the runner was created with `features: true`.
   */
  async features(from: number, to: number): Promise<Float32Array> {
    const f = this.feats;
    if (!f) throw new InvalidInputError('features: this runner was created without features: true');
    assertNoSession(this.cur, 'features');
    checkFeatureRange(from, to, this.cur.committed);
    const rowBytes = this.spec.hidden * 4;
    const bytes = (to - from) * rowBytes;
    if (bytes === 0) return new Float32Array(0);
    if (!f.staging || f.staging.size < bytes) {
      f.staging?.destroy();
      f.staging = this.ctx.device.createBuffer({
        label: 'features-readback',
        size: Math.max(bytes, 64 * rowBytes),
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
    }
    return new Float32Array(
      await readBack(this.ctx, f.store, from * rowBytes, f.staging, bytes, 'features-readback'),
    );
  }

  /**
   * What the recurrent blocks hold on the GPU: their states (both copies, every layer) and, per row
   * of a pass (a draft tree's node), the projection rows a commit reads again; no state per tree
   * node. Undefined without recurrent blocks.
   */
  get recurrentMemory(): { stateBytes: number; bytesPerTreeNode: number } | undefined {
    const held = this.parts.k.blocks.flatMap((b) => (b.recurrent ? [b.recurrent] : []));
    if (held.length === 0) return undefined;
    return {
      stateBytes: held.reduce((n, r) => n + r.stateBytes, 0),
      bytesPerTreeNode: held.reduce((n, r) => n + r.bytesPerTreeNode, 0),
    };
  }

  /** Whether the model has recurrent layers (see {@link ModelRunner.recurrent}). */
  get recurrent(): boolean {
    return isRecurrent(this.spec);
  }

  /**
   * Whether {@link GpuRunner.trim} to `length` keeps the rows before it (see
   * {@link ModelRunner.canTrim}). Always for 0 and for no change. A recurrent state holds only the
   * end of the sequence: nothing else. A sliding layer's ring holds the slots up to the most rows
   * committed since the last trim to 0, and one pass more, in its window + one pass +
   * RING_ROLLBACK rows: a trim keeps the window before `length` while it goes back at most
   * RING_ROLLBACK rows from there.
   */
  canTrim(length: number): boolean {
    if (length === 0 || length >= this.cur.committed) return true;
    if (this.recurrent) return false;
    const ring = this.parts.k.blocks.some((b) => b.ring);
    return !ring || length >= Math.max(this.reach, this.cur.committed) - RING_ROLLBACK;
  }

  trim(length: number): void {
    assertNoSession(this.cur, 'trim');
    if (!Number.isInteger(length) || length < 0)
      throw new InvalidInputError(`trim: length ${length} must be >= 0`);
    // A pass at position 0 starts its recurrent state from zeros: dropping every row is enough.
    if (this.recurrent && !this.canTrim(length))
      throw new InvalidInputError(
        `trim: a ${this.spec.family} model's recurrent state cannot roll back to ${length} of ${this.cur.committed} tokens (only to 0)`,
      );
    if (!this.canTrim(length))
      throw new InvalidInputError(
        `trim: the sliding-window layers keep a ring of their window and ${RING_ROLLBACK} rows more, so the cache can go back ${RING_ROLLBACK} tokens from ${Math.max(this.reach, this.cur.committed)}, not to ${length} (trim to 0 instead)`,
      );
    this.reach = length === 0 ? 0 : Math.max(this.reach, this.cur.committed);
    if (length < this.cur.committed) this.dropped++;
    this.cur.committed = Math.min(this.cur.committed, length);
    this.cur.lastTokens = 0;
  }

  dispose(): void {
    for (const b of Object.values(this.a)) b?.destroy();
    this.logitsStaging?.destroy();
    this.tally.destroy();
    if (this.children) for (const d of Object.values(this.children)) d.destroy();
    if (this.feats) {
      for (const b of [this.feats.store, this.feats.staging]) b?.destroy();
      this.feats.scatter.destroy();
      this.feats.compact.destroy();
    }
    this.parts.stages?.destroy();
    destroyKernels(this.parts.k);
    destroyWeights(this.parts.w);
    if (this.ownsContext) this.ctx.destroy();
  }
}

/**
 * Places an opened model on the GPU in the chosen format and returns its runner: checks the
 * options, places the weights tensor by tensor ({@link placeWeights}), builds the forward's kernels
 * ({@link buildKernels}), then allocates the KV cache and the activation buffers.
 */
export async function createGpuRunner(
  opened: Pick<OpenedModel, 'spec' | 'weights' | 'packed'>,
  o: GpuRunnerOptions,
): Promise<GpuRunner> {
  const { spec } = opened;
  const rotate = o.rotate ?? 'none';
  const kv = checkRunnerShapes(spec, o);
  const ctx = o.gpu ?? (await createGpuContext());
  const weights = await placeWeights(ctx, opened, {
    quant: o.quant,
    rotate,
    onProgress: o.onProgress,
    embed: o.head?.embed,
    lmRows: o.head?.lmRows,
    allocateOnly: o.allocateOnly,
    expertBudget: o.expertBudget,
  });
  const kernels = await buildKernels(ctx, spec, weights, {
    quant: o.quant,
    rotate,
    kv,
    steer: o.steer,
    ...(o.head ? { firstSlot: 1 } : {}),
  });
  const blocks = modelBlocks(spec);
  const acts = allocateActivations(ctx, spec, blocks.some(isRecurrentBlock));
  // A draft head's logits are -∞ outside its draft vocabulary: its stages write only those ids.
  if (o.head)
    writeBuffer(ctx, acts.logits, new Float32Array(acts.logits.size / 4).fill(Number.NEGATIVE_INFINITY));
  const feats = o.features ? await makeFeatureStore(ctx, o.capacity, spec.hidden) : undefined;
  const parts: RunnerParts = { ctx, spec, w: weights, k: kernels, blocks, a: acts, feats, kv };
  if (o.head) parts.stages = o.head.stages;
  return new GpuRunner(spec, o.capacity, parts, o.ownsContext ?? !o.gpu);
}
