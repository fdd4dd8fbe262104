import { InvalidInputError } from '../errors.js';
import { deriveSizes, type ModelSpec } from '../formats/spec.js';
import { createBuffer, mapForRead, STORAGE, writeBuffer } from '../gpu/buffers.js';
import { countsSince, type GpuCounts, zeroCounts } from '../gpu/counters.js';
import { createGpuContext, describeAdapter, type GpuContext } from '../gpu/device.js';
import type { GpuTimer } from '../gpu/timing.js';
import { visWords } from '../kernels/attention/attention_split.js';
import { BindGroupCache } from '../kernels/bind.js';
import { type KvFormat, type KvLayerBuffers, type KvShape, kvWordsPerSlot } from '../kernels/kv/kv.js';
import { RowCompact, RowScatter } from '../kernels/kv/rows.js';
import type { GpuMatrix } from '../kernels/matmul/matmul.js';
import { maskWordsOf } from '../kernels/sample/mask.js';
import { type Children, TOPK_MAX, TopKChildren, unpackChildren } from '../kernels/sample/topk.js';
import type { SteerPlan } from '../kernels/steer/steer.js';
import type { PassBuffers } from '../kernels/tree/tree.js';
import { isHadamardSize, packedWidth, type Quant, type RotationChoice, rotationFor } from '../quant/pack.js';
import { type Block, layerEdges, modelBlocks } from './blocks/blocks.js';
import { type BlockState, type GpuPass, PROFILE_SECTIONS, type ProfileSection } from './blocks/gpu.js';
import { blockMatrices, encodeBlock, hasKvCache } from './blocks/kinds-gpu.js';
import { buildKernels, destroyKernels, type Kernels } from './gpu-kernels.js';
import {
  destroyWeights,
  type GpuWeights,
  MAX_FORWARD_TOKENS,
  type PlaceWeightsOptions,
  placeWeights,
} from './gpu-weights.js';
import type { OpenedModel } from './load.js';
import {
  checkFeatureRange,
  type DecodeSession,
  type ForwardInput,
  type ModelRunner,
  type RankSpec,
  type SamplerSpec,
} from './runner.js';
import { type DraftTree, draftTree } from './tree.js';

// The profiler's sections are the blocks' (blocks/gpu.ts): a profile is read with the runner.
export { PROFILE_SECTIONS, type ProfileSection };

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
  /** A draft head's placement (see model/gpu-head.ts, which makes it); needs `features`. */
  head?: HeadPlacement;
  /** Allocate the weights' buffers without reading them (see PlaceWeightsOptions.allocateOnly). */
  allocateOnly?: boolean;
  /**
   * Keep the features (the residual stream after the last block) of every cache slot beside the
   * KV cache, committed with it, for a draft head ({@link GpuRunner.features}). Costs one scatter
   * per pass and one compaction per tree commit. Default false.
   */
  features?: boolean;
}

/**
 * How a draft head is placed as a one-layer runner: it borrows its target's embedding table, its
 * LM head holds the draft vocabulary's rows, its stages do the rest, and its attention never sees
 * the entry at slot 0 (no feature precedes position 0).
 */
export interface HeadPlacement {
  embed: GpuMatrix;
  lmRows: number;
  stages: HeadStages;
}

/**
 * The waves of a draft head's forward of `tree` after `base` rows: 0 for a row whose input is
 * known before the forward (the target's feature p - 1 when p - 1 < known, or a committed row's
 * output), else one more than its parent's. Rows of one wave run in one pass.
 */
export function headWaves(tree: DraftTree, base: number, known: number): number[] {
  const waves: number[] = [];
  tree.parents.forEach((parent, i) => {
    const p = base + tree.depth[i]!;
    waves.push((p >= 1 && p - 1 < known) || parent < 0 ? 0 : waves[parent]! + 1);
  });
  return waves;
}

/** Activation buffers for up to MAX_FORWARD_TOKENS rows, allocated once. */
interface Activations {
  ids: GPUBuffer; // [T] u32 token ids
  positions: GPUBuffer; // [T] u32 RoPE positions
  slots: GPUBuffer; // [T] u32 cache slots
  vis: GPUBuffer; // [T, 2] u32 each row's visible slots among the 64 up to its own (visWords)
  x: GPUBuffer; // [T, H] residual stream
  h: GPUBuffer; // [T, H] normed
  qkv: GPUBuffer; // [T, qWidth + 2·kvWidth] a stacked q | k | v matmul's output
  q: GPUBuffer; // [T, qWidth] (roped, when from qkv)
  k: GPUBuffer; // [T, kvWidth]
  v: GPUBuffer; // [T, kvWidth]
  qn: GPUBuffer; // [T, qWidth] q after QK-norm
  kn: GPUBuffer; // [T, kvWidth] k after QK-norm
  attn: GPUBuffer; // [T, qWidth]
  tmp: GPUBuffer; // [T, H]
  gate: GPUBuffer; // [T, Ip] (Ip: the MLP width as packed, see placeWeights)
  up: GPUBuffer; // [T, Ip]
  act: GPUBuffer; // [T, Ip] silu(gate) * up
  rows: GPUBuffer; // [T] u32 rows to score
  hr: GPUBuffer; // [T, H] gathered rows
  logits: GPUBuffer; // [T, V]
  masks: GPUBuffer; // [T, ceil(V / 32)] u32 token bitmasks of constrained rows
  samplePositions: GPUBuffer; // [T] u32 position of each sampled token
  out: GPUBuffer; // [T] u32 sampled ids
  commitSlots: GPUBuffer; // [T] u32 source slots of an accepted path
  // [7T] u32 a pass's small inputs, written at once and copied into the buffers above (see
  // GpuRunner.stageInputs): positions [T], slots [T], vis [2T], rows [R], sample positions [R],
  // ids [T] (when the CPU supplies them)
  inputs: GPUBuffer;
  staging: GPUBuffer; // [T] u32, MAP_READ
  // The readback ring of a decode session: step n's id comes back through stepStaging[n % 2].
  stepStaging0: GPUBuffer; // [1] u32, MAP_READ
  stepStaging1: GPUBuffer; // [1] u32, MAP_READ
}

/** The buffers of {@link GpuRunner.io}: the pass inputs a tree kernel writes, and what it reads. */
export interface RunnerIo extends PassBuffers {
  logits: GPUBuffer; // [T, V] f32
  out: GPUBuffer; // [T] u32 sampled ids
  commitSlots: GPUBuffer; // [T] u32
}

/**
 * What a draft head (model/gpu-head.ts) puts around its decoder layer: its rows' input in place of
 * the embedding gather, and its LM head's draft-vocabulary rows mapped onto the full vocabulary.
 * A head's row reads another row's output (its parent's), so a tree forward whose rows read rows of
 * the same forward runs in waves (see {@link GpuRunner.forward}).
 */
export interface HeadStages {
  /** The rows' input x [T, H] from their ids, positions, slots and visibility. */
  encodeInput(pass: GPUComputePassEncoder, a: HeadStageBuffers, T: number): void;
  /** logits [R, V] of the scored rows from the LM head's output [R, Vd] in `small`. */
  encodeLogits(pass: GPUComputePassEncoder, logits: GPUBuffer, R: number): void;
  /** [MAX_FORWARD_TOKENS, Vd] the LM head's output. */
  readonly small: GPUBuffer;
  /** Bytes of the stages' own weights one pass reads for one row. */
  readonly weightBytes: number;
  /**
   * Positions below which the rows' inputs come from elsewhere (the target's committed length):
   * a row at position p reads row p - 1 there when p - 1 is below it, else its parent's output.
   */
  known(): number;
  destroy(): void;
}

/** The runner's buffers a {@link HeadStages} input reads and writes. */
export interface HeadStageBuffers {
  ids: GPUBuffer; // [T] u32
  positions: GPUBuffer; // [T] u32
  slots: GPUBuffer; // [T] u32
  vis: GPUBuffer; // [T, 2] u32
  x: GPUBuffer; // [T, H] written
  tmp: GPUBuffer; // [T, H] scratch
  hr: GPUBuffer; // [T, H] scratch
  /** [capacity, H] the runner's own features (its rows' outputs, see GpuRunnerOptions.features). */
  own: GPUBuffer;
}

/** What else {@link GpuRunner.encodePass} is told. */
interface PassOptions {
  /** [R, ceil(V / 32)] allowed-token bits of the scored rows (a constraint). */
  masks?: Uint32Array;
  /** Largest cache slot a row may hold (rows placed by a kernel); default base + T - 1. */
  lastSlot?: number;
  /** false: stop after the logits (a draft pass whose children are ranked instead). */
  sample?: boolean;
  /** false: stop after the layers and the feature scatter (a wave of a head's tree forward). */
  score?: boolean;
  /**
   * false: skip the input and the layers; the rows' final stream is already in `x` (a head's
   * outputs copied from its feature store) and only the scoring runs.
   */
  layers?: boolean;
}

/** A decode step's visibility: one row that sees every slot up to its own (visWords of a chain). */
const DECODE_VIS = [0xffffffff, 0xffffffff];

/** The per-pass u32 arrays the kernels read, as {@link GpuRunner.stageInputs} writes them. */
interface PassInputs {
  positions: ArrayLike<number>; // [T] RoPE positions
  slots: ArrayLike<number>; // [T] cache slots
  vis: ArrayLike<number>; // [2T] visible-slot masks (visWords)
  rows: ArrayLike<number>; // [R] rows to score
  samplePositions: ArrayLike<number>; // [R] position of each sampled token
  /** [T] token ids; absent: the one id is the last pass's sampled id, copied on the GPU. */
  ids?: ArrayLike<number>;
}

/**
 * Runs a model on WebGPU: weights resident in the chosen format, one KV cache buffer pair per
 * layer, activation buffers for up to {@link MAX_FORWARD_TOKENS} tokens, and a kernel instance per
 * call site, all made once. A forward pass is one compute pass and one 4-byte-per-row readback of
 * the sampled ids: logits never leave the GPU, and nothing is created per token.
 */
/** Timed passes of one profiled forward of a model with `layers` layers. */
export function profilePasses(layers: number): number {
  return 3 + 5 * layers;
}

/** One section's GPU time, summed over its passes (every layer's for a layer section). */
export interface SectionTime {
  section: ProfileSection;
  ns: number;
  /** Its share of all sections' time. */
  share: number;
}

/** The profiler's passes (as {@link GpuTimer.read} returns them) summed per section, in run order. */
export function profileSections(passes: readonly { label: string; ns: number }[]): SectionTime[] {
  const ns = new Map<string, number>();
  for (const p of passes) ns.set(p.label, (ns.get(p.label) ?? 0) + p.ns);
  const total = [...ns.values()].reduce((a, b) => a + b, 0);
  return PROFILE_SECTIONS.filter((s) => ns.has(s)).map((section) => ({
    section,
    ns: ns.get(section)!,
    share: total > 0 ? ns.get(section)! / total : 0,
  }));
}

export class GpuRunner implements ModelRunner {
  private committed = 0;
  private lastTokens = 0;
  private lastBase = 0;
  private lastRows = 0;
  /** MAP_READ copy of the logits buffer for {@link GpuRunner.lastLogits}, made on first use. */
  private logitsStaging: GPUBuffer | undefined;
  /** The kernel and buffers of {@link GpuRunner.lastChildren}, made on first use. */
  private children: ChildrenRanker | undefined;
  private lastCounts: GpuCounts = zeroCounts();
  /** The open decode session: forward, commit and trim throw until it closes. */
  private session: object | undefined;
  /**
   * Bytes of weights one forward pass reads for one token, as packed: every layer's seven linears
   * and the LM head whole (a batch of rows reads each weight once), plus one row of the embedding
   * table (its share of the packed bytes, rounded up).
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

  constructor(
    readonly spec: ModelSpec,
    readonly capacity: number,
    private readonly ctx: GpuContext,
    private readonly ownsContext: boolean,
    private readonly w: GpuWeights,
    private readonly k: Kernels,
    /** The model's blocks, in forward order. */
    private readonly blocks: readonly Block[],
    /** Each block's state: an attention block's K and V caches [capacity, kvHeads, headDim]. */
    private readonly states: readonly BlockState[],
    private readonly a: Activations,
    /** The features of every cache slot, when kept (see {@link GpuRunnerOptions.features}). */
    private readonly feats?: FeatureStore,
    /** A draft head's input and vocabulary stages (model/gpu-head.ts). */
    private readonly stages?: HeadStages,
  ) {
    const linears = w.blocks.flatMap(blockMatrices);
    this.weightBytesPerPass =
      linears.reduce((sum, m) => sum + m.bytes, 0) +
      w.lmHead.bytes +
      Math.ceil(w.embed.bytes / w.embed.rows) +
      (stages?.weightBytes ?? 0);
  }

  /** [capacity, H] the features of every cache slot, when kept (a draft head reads them). */
  get featureStore(): GPUBuffer | undefined {
    return this.feats?.store;
  }

  /** The resident embedding table (a draft head on the same device borrows it). */
  get embedding(): GpuMatrix {
    return this.w.embed;
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
    return this.committed;
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
    this.assertNoSession('forward');
    const T = input.tokens.length;
    const { spec, a } = this;
    if (T < 1 || T > MAX_FORWARD_TOKENS)
      throw new InvalidInputError(`forward: ${T} tokens, must be 1..${MAX_FORWARD_TOKENS}`);
    const base = this.committed;
    if (base + T > this.capacity)
      throw new InvalidInputError(
        `forward: ${base} cached + ${T} new tokens exceed the KV cache of ${this.capacity}`,
      );
    for (const t of input.tokens)
      if (!Number.isInteger(t) || t < 0 || t >= spec.vocabSize)
        throw new InvalidInputError(`forward: token id ${t} is outside the vocabulary of ${spec.vocabSize}`);
    const tree = draftTree(input.parents ?? input.tokens.map((_, i) => i - 1));
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    const R = picked.length;
    const W = maskWordsOf(spec.vocabSize);
    if (input.masks && input.masks.length !== R * W)
      throw new InvalidInputError(
        `forward: masks hold ${input.masks.length} words, need ${R} rows × ${W} (ceil(vocab / 32))`,
      );
    const { ctx } = this;
    const before = ctx.counter.snapshot();
    const waves = this.stages ? headWaves(tree, base, this.stages.known()) : undefined;
    if (waves && Math.max(...waves) > 0) {
      const ids = await this.forwardWaves(input.tokens, tree, waves, picked, base, sampler, input.masks);
      this.lastCounts = countsSince(ctx.counter.snapshot(), before);
      this.lastTokens = T;
      this.lastBase = base;
      this.lastRows = R;
      return ids;
    }
    const enc = ctx.device.createCommandEncoder({ label: 'forward' });
    this.stageInputs(enc, {
      ids: input.tokens,
      positions: tree.depth.map((d) => base + d),
      slots: tree.depth.map((_, i) => base + i),
      vis: visWords(tree.end),
      rows: picked,
      // The token after node i stands at position base + depth(i) + 1: the Gumbel key's position.
      samplePositions: picked.map((i) => base + tree.depth[i]! + 1),
    });
    this.encodePass(enc, T, R, base, sampler, input.masks ? { masks: input.masks } : {});
    enc.copyBufferToBuffer(a.out, 0, a.staging, 0, R * 4);
    ctx.counter.submit([enc.finish()]);
    await mapForRead(ctx, a.staging, 0, R * 4);
    const ids = Int32Array.from(new Uint32Array(a.staging.getMappedRange(0, R * 4)));
    a.staging.unmap();
    this.lastCounts = countsSince(ctx.counter.snapshot(), before);
    this.lastTokens = T;
    this.lastBase = base;
    this.lastRows = R;
    return ids;
  }

  /**
   * A draft head's tree forward whose rows read rows of the same forward (see {@link headWaves}):
   * one submission per wave runs the layer over that wave's rows (their outputs go to the feature
   * store at their slots, where the next wave's rows read them), then one more scores the rows
   * from their outputs. Returns the sampled ids of `picked`.
   */
  private async forwardWaves(
    tokens: readonly number[],
    tree: DraftTree,
    waves: readonly number[],
    picked: readonly number[],
    base: number,
    sampler: SamplerSpec,
    masks: Uint32Array | undefined,
  ): Promise<Int32Array> {
    const { ctx, a, feats } = this;
    if (!feats) throw new InvalidInputError('forward: a draft head keeps its outputs (features: true)');
    const T = tokens.length;
    const vis = visWords(tree.end);
    const rowsOf = (w: number) => tokens.map((_, i) => i).filter((i) => waves[i] === w);
    for (let w = 0; w <= Math.max(...waves); w++) {
      const rows = rowsOf(w);
      const enc = ctx.device.createCommandEncoder({ label: `forward-wave-${w}` });
      this.stageInputs(enc, {
        ids: rows.map((i) => tokens[i]!),
        positions: rows.map((i) => base + tree.depth[i]!),
        slots: rows.map((i) => base + i),
        vis: rows.flatMap((i) => [vis[2 * i]!, vis[2 * i + 1]!]),
        rows: [],
        samplePositions: [],
      });
      this.encodePass(enc, rows.length, 0, base, sampler, { lastSlot: base + rows.at(-1)!, score: false });
      ctx.counter.submit([enc.finish()]);
    }
    const R = picked.length;
    const H = this.spec.hidden;
    const enc = ctx.device.createCommandEncoder({ label: 'forward-scores' });
    this.stageInputs(enc, {
      positions: [],
      slots: [],
      vis: [],
      rows: picked,
      samplePositions: picked.map((i) => base + tree.depth[i]! + 1),
    });
    enc.copyBufferToBuffer(feats.store, base * H * 4, a.x, 0, T * H * 4);
    this.encodePass(enc, T, R, base, sampler, { layers: false, ...(masks ? { masks } : {}) });
    enc.copyBufferToBuffer(a.out, 0, a.staging, 0, R * 4);
    ctx.counter.submit([enc.finish()]);
    await mapForRead(ctx, a.staging, 0, R * 4);
    const ids = Int32Array.from(new Uint32Array(a.staging.getMappedRange(0, R * 4)));
    a.staging.unmap();
    return ids;
  }

  /**
   * Opens a decode session (see {@link ModelRunner.decode}). Step n runs one token at position
   * start + n: step 0 the CPU's `first`, every later step the id the step before it sampled, copied
   * on the GPU (`out → ids`). `next()` submits step n + 1 before it waits for step n's 4-byte
   * readback, so the GPU always has the next step queued while the CPU reads, streams and checks
   * stop conditions; ids come back through a ring of two MAP_READ buffers. A step writes one
   * buffer (its positions and slots); attention reads the context base from the slots.
   */
  decode(first: number, sampler: SamplerSpec, steps: number): DecodeSession {
    this.ctx.assertAlive();
    this.assertNoSession('decode');
    const { ctx, a } = this;
    if (!Number.isInteger(first) || first < 0 || first >= this.spec.vocabSize)
      throw new InvalidInputError(
        `decode: token id ${first} is outside the vocabulary of ${this.spec.vocabSize}`,
      );
    if (!Number.isInteger(steps) || steps < 1)
      throw new InvalidInputError(`decode: steps must be an integer >= 1, got ${steps}`);
    const start = this.committed;
    if (start + steps > this.capacity)
      throw new InvalidInputError(
        `decode: ${start} cached + ${steps} steps exceed the KV cache of ${this.capacity}`,
      );
    const session = {};
    this.session = session;
    this.lastTokens = 0;
    this.lastRows = 0;
    const ring = [a.stepStaging0, a.stepStaging1];
    let before = ctx.counter.snapshot();
    // Step n: one token at position and slot start + n, its successor sampled at start + n + 1.
    const submit = (n: number): void => {
      const base = start + n;
      const enc = ctx.device.createCommandEncoder({ label: `decode-step-${n}` });
      this.stageInputs(enc, {
        ...(n === 0 ? { ids: [first] } : {}),
        positions: [base],
        slots: [base],
        vis: DECODE_VIS,
        rows: [0],
        samplePositions: [base + 1],
      });
      this.encodePass(enc, 1, 1, base, sampler);
      enc.copyBufferToBuffer(a.out, 0, ring[n % 2]!, 0, 4);
      ctx.counter.submit([enc.finish()]);
    };
    submit(0);
    let returned = 0;
    let busy = false;
    return {
      next: async () => {
        if (this.session !== session) throw new InvalidInputError('decode: the session is closed');
        if (busy) throw new InvalidInputError('decode: next() called before the last one returned');
        if (returned >= steps) throw new InvalidInputError(`decode: all ${steps} steps were read`);
        busy = true;
        try {
          const n = returned;
          const staging = ring[n % 2]!;
          const mapped = mapForRead(ctx, staging, 0, 4);
          mapped.catch(() => {}); // awaited below; a throw in submit must not leave it unhandled
          // Step n + 1 reads step n's id on the GPU: queue it before waiting for step n.
          if (n + 1 < steps) submit(n + 1);
          await mapped;
          const id = new Uint32Array(staging.getMappedRange(0, 4))[0]!;
          staging.unmap();
          if (this.session === session) {
            returned++;
            this.committed = start + returned;
          }
          const now = ctx.counter.snapshot();
          this.lastCounts = countsSince(now, before);
          before = now;
          return id;
        } finally {
          busy = false;
        }
      },
      close: () => {
        if (this.session === session) this.session = undefined;
      },
    };
  }

  /**
   * Writes a pass's small inputs to `a.inputs` in one queue write and encodes their copies into the
   * buffers the kernels bind (copies are GPU commands, not host writes). Without `ids`, the pass
   * runs the id the last pass sampled: `out → ids` on the GPU.
   */
  private stageInputs(enc: GPUCommandEncoder, p: PassInputs): void {
    const { a } = this;
    const T = p.positions.length;
    const R = p.rows.length;
    const parts: [GPUBuffer, ArrayLike<number>][] = [
      [a.positions, p.positions],
      [a.slots, p.slots],
      [a.vis, p.vis],
      [a.rows, p.rows],
      [a.samplePositions, p.samplePositions],
      ...(p.ids ? [[a.ids, p.ids] as [GPUBuffer, ArrayLike<number>]] : []),
    ];
    const words = new Uint32Array(4 * T + 2 * R + (p.ids ? T : 0));
    let at = 0;
    for (const [, values] of parts) {
      words.set(values, at);
      at += values.length;
    }
    writeBuffer(this.ctx, a.inputs, words);
    at = 0;
    for (const [dst, values] of parts) {
      if (values.length > 0) enc.copyBufferToBuffer(a.inputs, at * 4, dst, 0, values.length * 4);
      at += values.length;
    }
    if (!p.ids && T > 0) enc.copyBufferToBuffer(a.out, 0, a.ids, 0, 4);
  }

  /**
   * Encodes one forward pass of T tokens after `base` cached ones, scoring R rows into `a.out`:
   * the compute pass alone (its inputs staged, its readback encoded by the caller).
   */
  private encodePass(
    enc: GPUCommandEncoder,
    T: number,
    R: number,
    base: number,
    sampler: SamplerSpec,
    o: PassOptions = {},
  ): void {
    const { masks } = o;
    const { spec, a, k, w } = this;
    const profiler = this.profiler;
    let pass = enc.beginComputePass(profiler ? profiler.passDescriptor('embed') : { label: 'forward' });
    // Profiling: the work from here on goes into its own timed pass.
    const section = (name: ProfileSection): void => {
      if (!profiler) return;
      pass.end();
      pass = enc.beginComputePass(profiler.passDescriptor(name));
    };
    const stages = this.stages;
    if (o.layers === false) {
      // The rows' final stream is in x already.
    } else if (stages && this.feats) {
      const { ids, positions, slots, vis, x, tmp, hr } = a;
      stages.encodeInput(pass, { ids, positions, slots, vis, x, tmp, hr, own: this.feats.store }, T);
    } else {
      k.embed.encode(pass, a.ids, a.x, T);
    }
    const blockPass: GpuPass = {
      get pass() {
        return pass;
      },
      spec,
      T,
      base,
      lastSlot: o.lastSlot,
      a,
      k,
      section,
    };
    for (const [i, block] of (o.layers === false ? [] : this.blocks).entries()) {
      const edges = layerEdges(this.blocks, i);
      const steer = k.steer[block.layer];
      if (edges.first) {
        section('qkv');
        steer?.in?.encode(pass, a.x, T); // steering: the layer's input (SteerPlan.inputs)
      }
      encodeBlock(blockPass, w.blocks[i]!, k.blocks[i]!, this.states[i]);
      if (edges.last) steer?.out?.encode(pass, a.x, T); // steering: the layer's output
    }
    section('head');
    // A draft head's features: the stream after the last block, at the rows' cache slots.
    if (o.layers !== false) this.feats?.scatter.encode(pass, a.x, a.slots, this.feats.store, T);
    if (o.score === false) {
      pass.end();
      return;
    }
    // The scored rows of the stream (the LM head applies the final norm itself: a row's norm does
    // not depend on the others, so gathering first gives the same bits).
    let head = a.x;
    if (R < T) {
      k.gather.encode(pass, a.x, a.rows, a.hr, R);
      head = a.hr;
    }
    if (stages) {
      k.lmHead.encode(pass, head, stages.small, R);
      stages.encodeLogits(pass, a.logits, R);
    } else {
      k.lmHead.encode(pass, head, a.logits, R);
    }
    if (masks) {
      writeBuffer(this.ctx, a.masks, masks);
      k.mask.encode(pass, a.masks, a.logits, R);
    }
    if (o.sample === false) {
      pass.end();
      return;
    }
    section('sample');
    const s = sampler.temperature > 0 ? k.sample.gumbel : k.sample.greedy;
    s.encode(pass, a.logits, a.samplePositions, a.out, R, {
      seed: sampler.seed,
      temperature: sampler.temperature,
      topK: sampler.topK,
      topP: sampler.topP,
    });
    pass.end();
  }

  /**
   * The buffers a kernel outside the runner reads and fills to drive a pass on the device (a draft
   * tree grown there, see decode/device-step.ts): the pass inputs, the logits, the sampled ids and
   * the commit slots.
   */
  get io(): RunnerIo {
    const { a } = this;
    return {
      ids: a.ids,
      positions: a.positions,
      slots: a.slots,
      vis: a.vis,
      samplePositions: a.samplePositions,
      logits: a.logits,
      out: a.out,
      commitSlots: a.commitSlots,
    };
  }

  /**
   * Encodes a chain of `tokens` after the committed rows (one staged write) and commits them, so
   * the runner counts them as soon as this returns and later passes encoded in the same submission
   * stand after them. Scores only the last row (its logits are row 0 of `io.logits`) and samples
   * nothing. For a device step, which reads no id back; the CPU knows the tokens.
   */
  encodeChain(enc: GPUCommandEncoder, tokens: readonly number[], sampler: SamplerSpec): void {
    this.ctx.assertAlive();
    this.assertNoSession('encodeChain');
    const T = tokens.length;
    const base = this.committed;
    if (T < 1 || T > MAX_FORWARD_TOKENS || base + T > this.capacity)
      throw new InvalidInputError(
        `encodeChain: ${T} tokens after ${base} cached must be 1..${Math.min(MAX_FORWARD_TOKENS, this.capacity - base)}`,
      );
    for (const t of tokens)
      if (!Number.isInteger(t) || t < 0 || t >= this.spec.vocabSize)
        throw new InvalidInputError(
          `encodeChain: token id ${t} is outside the vocabulary of ${this.spec.vocabSize}`,
        );
    this.stageInputs(enc, {
      ids: tokens,
      positions: tokens.map((_, i) => base + i),
      slots: tokens.map((_, i) => base + i),
      vis: visWords(tokens.map(() => T - 1)),
      rows: [T - 1],
      samplePositions: [base + T],
    });
    this.encodePass(enc, T, 1, base, sampler, { sample: false });
    this.committed += T;
    this.lastTokens = 0;
    this.lastRows = 0;
  }

  /**
   * Encodes a pass of T rows (all scored) whose inputs a kernel wrote into {@link GpuRunner.io}
   * earlier in the same submission, after the committed rows: rows at slots up to `lastSlot`
   * (default committed + T - 1), sampling every row unless `sample` is false. Commits nothing.
   */
  encodeResident(
    enc: GPUCommandEncoder,
    T: number,
    sampler: SamplerSpec,
    o: { lastSlot?: number; sample?: boolean } = {},
  ): void {
    this.ctx.assertAlive();
    this.assertNoSession('encodeResident');
    if (T < 1 || T > MAX_FORWARD_TOKENS || this.committed + T > this.capacity)
      throw new InvalidInputError(
        `encodeResident: ${T} rows after ${this.committed} cached exceed ${MAX_FORWARD_TOKENS} rows or the cache of ${this.capacity}`,
      );
    this.encodePass(enc, T, T, this.committed, sampler, o);
    this.lastTokens = 0;
    this.lastRows = T;
    this.lastBase = this.committed;
  }

  /**
   * Encodes the commit of a path a kernel wrote into `io.commitSlots` (source slots, increasing,
   * 0xffffffff past the path's end) for at most `count` entries; the CPU learns the path's length
   * from the submission's readback and tells the runner with {@link GpuRunner.adopt}.
   */
  encodeCommit(enc: GPUCommandEncoder, count: number): void {
    const pass = enc.beginComputePass({ label: 'commit' });
    this.encodeCompaction(pass, count);
    pass.end();
  }

  /**
   * Encodes the move of `count` rows at `io.commitSlots` to the committed prefix, in every block's
   * state (an attention block's KV cache) and the feature store.
   */
  private encodeCompaction(pass: GPUComputePassEncoder, count: number): void {
    for (const state of this.states)
      if (state) this.k.compact.encode(pass, [state], this.a.commitSlots, count, this.committed);
    this.feats?.compact.encode(pass, this.feats.store, this.a.commitSlots, count, this.committed);
  }

  /** Records that `n` rows after the committed ones were committed on the device (a path). */
  adopt(n: number): void {
    if (!Number.isInteger(n) || n < 0 || this.committed + n > this.capacity)
      throw new InvalidInputError(
        `adopt: ${n} rows after ${this.committed} exceed the cache of ${this.capacity}`,
      );
    this.committed += n;
    this.lastTokens = 0;
  }

  private assertNoSession(what: string): void {
    if (this.session) throw new InvalidInputError(`${what}: a decode session is open; close it first`);
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
      if (!Number.isInteger(r) || r < 0 || r >= this.lastRows)
        throw new InvalidInputError(`lastLogits: row ${r} is not one of the ${this.lastRows} scored rows`);
    if (rows && rows.length > this.lastRows)
      throw new InvalidInputError(`lastLogits: ${rows.length} rows asked for, ${this.lastRows} scored`);
    const bytes = (rows?.length ?? this.lastRows) * rowBytes;
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
    await mapForRead(this.ctx, staging, 0, bytes);
    const out = new Float32Array(staging.getMappedRange(0, bytes).slice(0));
    staging.unmap();
    return out;
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
      if (!Number.isInteger(r) || r < 0 || r >= this.lastRows)
        throw new InvalidInputError(`lastChildren: row ${r} is not one of the ${this.lastRows} scored rows`);
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
      ...(sampler.sharpen !== undefined ? { sharpen: sampler.sharpen } : {}),
    });
    pass.end();
    const bytes = R * k * 8;
    enc.copyBufferToBuffer(c.out, 0, c.staging, 0, bytes);
    ctx.counter.submit([enc.finish()]);
    await mapForRead(ctx, c.staging, 0, bytes);
    const words = new Uint32Array(c.staging.getMappedRange(0, bytes).slice(0));
    c.staging.unmap();
    return unpackChildren(words, R, k);
  }

  commit(path: readonly number[]): void {
    this.assertNoSession('commit');
    if (this.lastBase !== this.committed)
      throw new InvalidInputError('commit: the cache changed since the last forward');
    for (const i of path)
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    // Rows already in place (a chain's prefix) need no copy.
    if (path.some((node, i) => node !== i)) {
      const slots = Uint32Array.from(path, (i) => this.committed + i);
      writeBuffer(this.ctx, this.a.commitSlots, slots);
      const enc = this.ctx.device.createCommandEncoder({ label: 'commit' });
      const pass = enc.beginComputePass({ label: 'commit' });
      this.encodeCompaction(pass, path.length);
      pass.end();
      this.ctx.counter.submit([enc.finish()]);
    }
    this.committed += path.length;
    this.lastTokens = 0;
  }

  /**
   * Committed features [to - from, H] (see {@link ModelRunner.features}), copied back in one
   * readback. Present only when the runner was created with `features: true`.
   */
  async features(from: number, to: number): Promise<Float32Array> {
    const f = this.feats;
    if (!f) throw new InvalidInputError('features: this runner was created without features: true');
    this.assertNoSession('features');
    checkFeatureRange(from, to, this.committed);
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
    const enc = this.ctx.device.createCommandEncoder({ label: 'features-readback' });
    enc.copyBufferToBuffer(f.store, from * rowBytes, f.staging, 0, bytes);
    this.ctx.counter.submit([enc.finish()]);
    await mapForRead(this.ctx, f.staging, 0, bytes);
    const out = new Float32Array(f.staging.getMappedRange(0, bytes).slice(0));
    f.staging.unmap();
    return out;
  }

  trim(length: number): void {
    this.assertNoSession('trim');
    if (!Number.isInteger(length) || length < 0)
      throw new InvalidInputError(`trim: length ${length} must be >= 0`);
    this.committed = Math.min(this.committed, length);
    this.lastTokens = 0;
  }

  dispose(): void {
    for (const b of Object.values(this.a)) b.destroy();
    this.logitsStaging?.destroy();
    if (this.children) for (const d of Object.values(this.children)) d.destroy();
    for (const c of this.states) for (const b of c ? [c.k, c.v] : []) b.destroy();
    if (this.feats) {
      for (const b of [this.feats.store, this.feats.staging]) b?.destroy();
      this.feats.scatter.destroy();
      this.feats.compact.destroy();
    }
    this.stages?.destroy();
    destroyKernels(this.k);
    destroyWeights(this.w);
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
  const ctx = o.gpu ?? (await createGpuContext());
  const rotate = o.rotate ?? 'none';
  // Checked before any weight is read: a rotation needs Hadamard sizes that the matmul's K blocks
  // of 16 divide (the MLP width is padded to one instead, see placeWeights), and an f16 cache needs
  // an even headDim.
  const { qWidth } = deriveSizes(spec);
  // The residual and attention widths are never padded (only the MLP's is, see placedPad).
  for (const [field, n] of [
    ['hidden_size', spec.hidden],
    ['q width (num_attention_heads * head_dim)', qWidth],
  ] as const)
    if (n % 16 !== 0)
      throw new InvalidInputError(`${field} = ${n} is not a multiple of 16 (the matmul's K block)`);
  if (rotate === 'hadamard')
    for (const [field, n] of [
      ['hidden_size', spec.hidden],
      ['q width (num_attention_heads * head_dim)', qWidth],
    ] as const)
      if (n % 16 !== 0 || !isHadamardSize(n))
        throw new InvalidInputError(
          `rotate hadamard: ${field} = ${n} is not a Hadamard size K·2^m that is a multiple of 16`,
        );
  const kv: KvShape = {
    capacity: o.capacity,
    kvHeads: spec.kvHeads,
    headDim: spec.headDim,
    format: o.kvFormat ?? 'f32',
  };
  kvWordsPerSlot(kv);

  if (o.head && !o.features)
    throw new InvalidInputError('createGpuRunner: a draft head keeps its outputs (features: true)');
  const weights = await placeWeights(ctx, opened, {
    quant: o.quant,
    rotate,
    onProgress: o.onProgress,
    ...(o.head ? { embed: o.head.embed, lmRows: o.head.lmRows } : {}),
    ...(o.allocateOnly ? { allocateOnly: true } : {}),
  });
  const kernels = await buildKernels(ctx, spec, weights, {
    quant: o.quant,
    rotate,
    kv,
    steer: o.steer,
    ...(o.head ? { firstSlot: 1 } : {}),
  });
  const blocks = modelBlocks(spec);
  const states = blocks.map((b) => (hasKvCache(b) ? kvCacheOf(ctx, b.layer, kv) : undefined));
  const acts = allocateActivations(
    ctx,
    spec,
    packedWidth(spec.intermediate, rotationFor(rotate, spec.intermediate)),
  );
  // A draft head's logits are -∞ outside its draft vocabulary: its stages write only those ids.
  if (o.head)
    writeBuffer(ctx, acts.logits, new Float32Array(acts.logits.size / 4).fill(Number.NEGATIVE_INFINITY));
  let feats: FeatureStore | undefined;
  if (o.features) {
    await Promise.all([RowScatter.prepare(ctx), RowCompact.prepare(ctx)]);
    const shape = { capacity: o.capacity, row: spec.hidden };
    const binds = new BindGroupCache(ctx.device);
    feats = {
      store: createBuffer(ctx, o.capacity * spec.hidden * 4, 'features', STORAGE),
      scatter: new RowScatter(ctx, binds, shape),
      compact: new RowCompact(ctx, binds, shape),
      staging: undefined,
    };
  }
  return new GpuRunner(
    spec,
    o.capacity,
    ctx,
    o.ownsContext ?? !o.gpu,
    weights,
    kernels,
    blocks,
    states,
    acts,
    feats,
    o.head?.stages,
  );
}

/** A draft head's features beside the KV cache: [capacity, H] f32, written and committed with it. */
interface FeatureStore {
  store: GPUBuffer;
  scatter: RowScatter;
  compact: RowCompact;
  /** MAP_READ copy for {@link GpuRunner.features}, made on first use. */
  staging: GPUBuffer | undefined;
}

/** {@link GpuRunner.lastChildren}'s kernel and buffers. */
interface ChildrenRanker {
  op: TopKChildren;
  picks: GPUBuffer; // [MAX_FORWARD_TOKENS, 2] u32 (scored row, position of its children)
  out: GPUBuffer; // [MAX_FORWARD_TOKENS, TOPK_MAX, 2] u32 (token, log-weight bits)
  staging: GPUBuffer; // the same, MAP_READ
}

function makeChildrenRanker(ctx: GpuContext, vocab: number): ChildrenRanker {
  const bytes = MAX_FORWARD_TOKENS * TOPK_MAX * 8;
  return {
    op: new TopKChildren(ctx, new BindGroupCache(ctx.device), { vocab, maxRows: MAX_FORWARD_TOKENS }),
    picks: createBuffer(ctx, MAX_FORWARD_TOKENS * 8, 'children-picks'),
    out: createBuffer(ctx, bytes, 'children'),
    staging: ctx.device.createBuffer({
      label: 'children-readback',
      size: bytes,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    }),
  };
}

/** A layer's K and V buffers, each [capacity, kvHeads, headDim] in the cache's format. */
function kvCacheOf(ctx: GpuContext, layer: number, kv: KvShape): KvLayerBuffers {
  const bytes = kv.capacity * kvWordsPerSlot(kv) * 4;
  return {
    k: createBuffer(ctx, bytes, `model.layers.${layer}.k_cache`),
    v: createBuffer(ctx, bytes, `model.layers.${layer}.v_cache`),
  };
}

/** The activation buffers, each for {@link MAX_FORWARD_TOKENS} rows; `Ip` is the packed MLP width. */
function allocateActivations(ctx: GpuContext, spec: ModelSpec, Ip: number): Activations {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const maxT = MAX_FORWARD_TOKENS;
  const f = (n: number, label: string) => createBuffer(ctx, maxT * n * 4, label, STORAGE);
  const readback = (size: number, label: string) =>
    ctx.device.createBuffer({ label, size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  return {
    ids: f(1, 'ids'),
    positions: f(1, 'positions'),
    slots: f(1, 'slots'),
    vis: f(2, 'visible-slots'),
    x: f(H, 'x'),
    h: f(H, 'h'),
    qkv: f(qWidth + 2 * kvWidth, 'qkv'),
    q: f(qWidth, 'q'),
    k: f(kvWidth, 'k'),
    v: f(kvWidth, 'v'),
    qn: f(qWidth, 'qn'),
    kn: f(kvWidth, 'kn'),
    attn: f(qWidth, 'attn'),
    tmp: f(H, 'tmp'),
    gate: f(Ip, 'gate'),
    up: f(Ip, 'up'),
    act: f(Ip, 'act'),
    rows: f(1, 'rows'),
    hr: f(H, 'hr'),
    logits: f(spec.vocabSize, 'logits'),
    masks: f(maskWordsOf(spec.vocabSize), 'token-masks'),
    samplePositions: f(1, 'sample-positions'),
    out: f(1, 'sampled'),
    commitSlots: f(1, 'commit-slots'),
    inputs: f(7, 'pass-inputs'),
    staging: readback(maxT * 4, 'sampled-readback'),
    stepStaging0: readback(4, 'decode-readback-0'),
    stepStaging1: readback(4, 'decode-readback-1'),
  };
}
