// One forward pass of the GPU runner, encoded: its small inputs staged in one queue write, then
// the embedding (or a draft head's input), the block list, the LM head, a constraint's masks and
// the sampler, in one compute pass (or one per profiled section).
import { InvalidInputError } from '../../errors.js';
import { mapForRead, writeBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import type { GpuTimer } from '../../gpu/timing.js';
import type { KvShape } from '../../kernels/kv/kv.js';
import { type Block, layerEdges } from '../blocks/blocks.js';
import type { CommitInputs, GpuPass, ProfileSection } from '../blocks/gpu.js';
import type { SamplerSpec } from '../runner.js';
import type { ModelSpec } from '../spec/spec.js';
import type { Activations, FeatureStore } from './buffers.js';
import type { HeadStages } from './draft-stages.js';
import type { Kernels } from './kernels.js';
import type { GpuWeights } from './weights.js';

/** What a pass runs on: the runner's device, weights, kernels (each block bound, with its state) and buffers. */
export interface RunnerParts {
  ctx: GpuContext;
  spec: ModelSpec;
  w: GpuWeights;
  k: Kernels;
  /** The model's blocks, in forward order (`k.blocks[i]` is block i bound). */
  blocks: readonly Block[];
  a: Activations;
  /** The features of every cache slot, when kept (see GpuRunnerOptions.features). */
  feats?: FeatureStore;
  /** A draft head's input and vocabulary stages (model/draft/gpu-head.ts). */
  stages?: HeadStages;
  /** The KV cache's shape and format (each layer's: layerKvShape). */
  kv: KvShape;
}

/** What else {@link encodePass} is told. */
export interface PassOptions {
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
  /** The version of the committed linear-attention state the pass starts from (default 0). */
  version?: number;
  /** The rows are a draft tree (depth first), not a chain (default false). */
  tree?: boolean;
  /** The rows are a prompt chunk: the linears may take their prefill GEMM (default false). */
  prefill?: boolean;
}

/** The per-pass u32 arrays the kernels read, as {@link stageInputs} writes them. */
export interface PassInputs {
  positions: ArrayLike<number>; // [T] RoPE positions
  slots: ArrayLike<number>; // [T] cache slots
  vis: ArrayLike<number>; // [2T] visible-slot masks (visWords)
  rows: ArrayLike<number>; // [R] rows to score
  samplePositions: ArrayLike<number>; // [R] position of each sampled token
  /** [T] token ids; absent: the one id is the last pass's sampled id, copied on the GPU. */
  ids?: ArrayLike<number>;
}

/** A decode step's visibility: one row that sees every slot up to its own (visWords of a chain). */
export const DECODE_VIS = [0xffffffff, 0xffffffff];

/**
 * Writes a pass's small inputs to `a.inputs` in one queue write and encodes their copies into the
 * buffers the kernels bind (copies are GPU commands, not host writes). Without `ids`, the pass
 * runs the id the last pass sampled: `out → ids` on the GPU.
 */
export function stageInputs(ctx: GpuContext, a: Activations, enc: GPUCommandEncoder, p: PassInputs): void {
  const T = p.positions.length;
  const parts: [GPUBuffer, ArrayLike<number>][] = [
    // T, for the kernels that walk the rows in order (a recurrent layer's).
    ...(a.count ? [[a.count, [T]] as [GPUBuffer, ArrayLike<number>]] : []),
    [a.positions, p.positions],
    [a.slots, p.slots],
    [a.vis, p.vis],
    [a.rows, p.rows],
    [a.samplePositions, p.samplePositions],
    ...(p.ids ? [[a.ids, p.ids] as [GPUBuffer, ArrayLike<number>]] : []),
  ];
  const words = new Uint32Array(parts.reduce((n, [, v]) => n + v.length, 0));
  let at = 0;
  for (const [, values] of parts) {
    words.set(values, at);
    at += values.length;
  }
  writeBuffer(ctx, a.inputs, words);
  at = 0;
  for (const [dst, values] of parts) {
    if (values.length > 0) enc.copyBufferToBuffer(a.inputs, at * 4, dst, 0, values.length * 4);
    at += values.length;
  }
  if (!p.ids && T > 0) enc.copyBufferToBuffer(a.out, 0, a.ids, 0, 4);
}

/**
 * Encodes one forward pass of T tokens after `base` cached ones, scoring R rows into `a.out`:
 * the compute pass alone (its inputs staged, its readback encoded by the caller). With a
 * `profiler`, each section ({@link ProfileSection}) is its own timed compute pass. A model whose
 * blocks need the host between layers (a mixture paging its experts) runs {@link encodeHostPass}.
 */
export function encodePass(
  r: RunnerParts,
  profiler: GpuTimer | undefined,
  enc: GPUCommandEncoder,
  T: number,
  R: number,
  base: number,
  sampler: SamplerSpec,
  o: PassOptions = {},
): void {
  const p = beginPass(r, profiler, enc, T, base, o);
  for (const [i, block] of (o.layers === false ? [] : r.blocks).entries()) {
    if (r.k.blocks[i]!.host)
      throw new InvalidInputError(
        `forward: layer ${block.layer}'s ${block.kind} block needs the host between layers (its experts are paged): only host-driven forwards run it`,
      );
    encodeBlock(r, p, i);
  }
  finishPass(r, p, R, sampler, o);
}

/**
 * {@link encodePass} for a model with blocks that need the host between layers (see
 * BoundBlock.host): each such block may submit what is encoded so far and wait for the device (a
 * readback) before encoding the rest. Returns the encoder the pass ends in, where the caller
 * encodes its readback.
 */
export async function encodeHostPass(
  r: RunnerParts,
  enc: GPUCommandEncoder,
  T: number,
  R: number,
  base: number,
  sampler: SamplerSpec,
  o: PassOptions = {},
): Promise<GPUCommandEncoder> {
  const p = beginPass(r, undefined, enc, T, base, o);
  for (const [i] of (o.layers === false ? [] : r.blocks).entries()) {
    const host = r.k.blocks[i]!.host;
    if (host) await host(p.block, p.flush);
    else encodeBlock(r, p, i);
  }
  finishPass(r, p, R, sampler, o);
  return p.enc;
}

/** A pass being encoded: its current encoder and compute pass, and what its blocks see. */
interface OpenPass {
  enc: GPUCommandEncoder;
  pass: GPUComputePassEncoder;
  readonly block: GpuPass;
  section(name: ProfileSection): void;
  /** Ends the compute pass, submits the encoder and opens new ones (host-driven passes only). */
  flush(): Promise<void>;
}

/** Opens the pass and encodes its input: the embedding, or a draft head's input stage. */
function beginPass(
  r: RunnerParts,
  profiler: GpuTimer | undefined,
  enc: GPUCommandEncoder,
  T: number,
  base: number,
  o: PassOptions,
): OpenPass {
  const { spec, a, k, stages, feats, ctx } = r;
  const p: OpenPass = {
    enc,
    pass: enc.beginComputePass(profiler ? profiler.passDescriptor('embed') : { label: 'forward' }),
    // Profiling: the work from here on goes into its own timed pass.
    section: (name) => {
      if (!profiler) return;
      p.pass.end();
      p.pass = p.enc.beginComputePass(profiler.passDescriptor(name));
    },
    flush: async () => {
      p.pass.end();
      ctx.counter.submit([p.enc.finish()]);
      p.enc = ctx.device.createCommandEncoder({ label: 'forward' });
      p.pass = p.enc.beginComputePass({ label: 'forward' });
    },
    block: {
      get pass() {
        return p.pass;
      },
      spec,
      T,
      base,
      lastSlot: o.lastSlot,
      a,
      k: k.common,
      version: o.version ?? 0,
      tree: o.tree ?? false,
      prefill: o.prefill ?? false,
      section: (name) => p.section(name),
    },
  };
  if (o.layers === false) {
    // The rows' final stream is in x already.
  } else if (stages && feats) {
    const { ids, positions, slots, vis, x, tmp, hr } = a;
    stages.encodeInput(p.pass, { ids, positions, slots, vis, x, tmp, hr, own: feats.store }, T);
  } else {
    k.embed.encode(p.pass, a.ids, a.x, T);
  }
  return p;
}

/** Encodes block i, with the steering of its layer's input and output. */
function encodeBlock(r: RunnerParts, p: OpenPass, i: number): void {
  const { a, k } = r;
  const block = r.blocks[i]!;
  const edges = layerEdges(r.blocks, i);
  const steer = k.steer[block.layer];
  // Steering: the layer's input (SteerPlan.inputs), timed with the section before it (a block
  // opens its own sections).
  if (edges.first) steer?.in?.encode(p.pass, a.x, p.block.T);
  k.blocks[i]!.encode(p.block);
  if (edges.last) steer?.out?.encode(p.pass, a.x, p.block.T); // steering: the layer's output
}

/** Encodes the pass's end: the features, the LM head, a constraint's masks and the sampler. */
function finishPass(r: RunnerParts, p: OpenPass, R: number, sampler: SamplerSpec, o: PassOptions): void {
  const { masks } = o;
  const { a, k, stages, feats } = r;
  const T = p.block.T;
  p.section('head');
  // A draft head's features: the stream after the last block, at the rows' cache slots.
  if (o.layers !== false) feats?.scatter.encode(p.pass, a.x, a.slots, feats.store, T);
  if (o.score === false) {
    p.pass.end();
    return;
  }
  // The scored rows of the stream (the LM head applies the final norm itself: a row's norm does
  // not depend on the others, so gathering first gives the same bits).
  let head = a.x;
  if (R < T) {
    k.gather.encode(p.pass, a.x, a.rows, a.hr, R);
    head = a.hr;
  }
  if (stages) {
    k.lmHead.encode(p.pass, head, stages.small, R);
    stages.encodeLogits(p.pass, a.logits, R);
  } else {
    k.lmHead.encode(p.pass, head, a.logits, R);
    k.softcap?.encode(p.pass, a.logits, R * r.spec.vocabSize); // Gemma 4: c · tanh(logits / c)
  }
  if (masks) {
    writeBuffer(r.ctx, a.masks, masks);
    k.mask.encode(p.pass, a.masks, a.logits, R);
  }
  if (o.sample === false) {
    p.pass.end();
    return;
  }
  p.section('sample');
  const s = sampler.temperature > 0 ? k.sample.gumbel : k.sample.greedy;
  s.encode(p.pass, a.logits, a.samplePositions, a.out, R, {
    seed: sampler.seed,
    temperature: sampler.temperature,
    topK: sampler.topK,
    topP: sampler.topP,
  });
  p.pass.end();
}

/**
 * Copies `bytes` of `src` (from `srcOffset`) into the MAP_READ buffer `staging`, waits for it and
 * returns a copy of the bytes: one submission, one readback.
 */
export async function readBack(
  ctx: GpuContext,
  src: GPUBuffer,
  srcOffset: number,
  staging: GPUBuffer,
  bytes: number,
  label: string,
): Promise<ArrayBuffer> {
  const enc = ctx.device.createCommandEncoder({ label });
  enc.copyBufferToBuffer(src, srcOffset, staging, 0, bytes);
  ctx.counter.submit([enc.finish()]);
  return await readStaging(ctx, staging, bytes);
}

/** Maps the first `bytes` of a MAP_READ buffer whose copy was submitted, and returns a copy. */
export async function readStaging(ctx: GpuContext, staging: GPUBuffer, bytes: number): Promise<ArrayBuffer> {
  await mapForRead(ctx, staging, 0, bytes);
  const out = staging.getMappedRange(0, bytes).slice(0);
  staging.unmap();
  return out;
}

/** Where a runner's cache stands; the runner and its {@link ResidentPasses} share one. */
export interface RunnerCursor {
  /** Rows committed to the cache. */
  committed: number;
  /** Tokens of the last forward (a commit picks among them); 0 once they cannot be committed. */
  lastTokens: number;
  /** The committed length the last forward ran after. */
  lastBase: number;
  /** Rows the last forward scored (their logits are in `a.logits`). */
  lastRows: number;
  /**
   * The version of the committed linear-attention state (see LinearStatePair): a pass reads this
   * one and writes the next, and committing its chain steps to it.
   */
  version: number;
  /** The last forward's rows were a tree (its pass wrote no linear-attention state). */
  lastTree: boolean;
  /** The open decode session: forward, commit and trim throw until it closes. */
  session: object | undefined;
}

export function assertNoSession(cur: RunnerCursor, what: string): void {
  if (cur.session) throw new InvalidInputError(`${what}: a decode session is open; close it first`);
}

/**
 * Encodes what committing a path does to every block's state (an attention block's KV cache
 * compacts its moved rows, a recurrent state runs the path again: see CommitInputs) and to the
 * feature store, whose moved rows compact as a KV cache's.
 */
export function encodeCommits(r: RunnerParts, pass: GPUComputePassEncoder, c: CommitInputs): void {
  for (const b of r.k.blocks) b.commit(pass, c);
  if (c.moved) r.feats?.compact.encode(pass, r.feats.store, c.slots, c.count, c.committed);
}

/**
 * Commits a path of the last forward that its pass did not leave the recurrent state after (a
 * tree's, or a chain's prefix), in one write and one submission: the path's rows and slots
 * staged, then every block's commit (the KV caches compacted along it, each recurrent state run
 * along it as a chain into its other copy). Steps the cursor's length and state version.
 */
export function commitRerun(r: RunnerParts, cur: RunnerCursor, path: readonly number[]): void {
  const { a, ctx } = r;
  const { rerun, rerunCount, rerunBase, rerunRows } = a;
  if (!rerun || !rerunCount || !rerunBase || !rerunRows)
    throw new Error('commit: the runner has no recurrent-state buffers');
  const n = path.length;
  const base = cur.committed;
  writeBuffer(ctx, rerun, Uint32Array.from([n, base, ...path, ...path.map((i) => base + i)]));
  const enc = ctx.device.createCommandEncoder({ label: 'commit' });
  enc.copyBufferToBuffer(rerun, 0, rerunCount, 0, 4);
  enc.copyBufferToBuffer(rerun, 4, rerunBase, 0, 4);
  enc.copyBufferToBuffer(rerun, 8, rerunRows, 0, n * 4);
  enc.copyBufferToBuffer(rerun, 8 + n * 4, a.commitSlots, 0, n * 4);
  const pass = enc.beginComputePass({ label: 'commit' });
  encodeCommits(r, pass, {
    slots: a.commitSlots,
    count: n,
    committed: base,
    moved: path.some((node, i) => node !== i),
    rerun: { rows: rerunRows, count: rerunCount, base: rerunBase, n, version: cur.version },
  });
  pass.end();
  ctx.counter.submit([enc.finish()]);
  cur.committed += n;
  cur.version++;
  cur.lastTokens = 0;
}
