// The GPU runner's buffers: its rows for MAX_FORWARD_TOKENS tokens (the ones every block kind
// reads, the pass's inputs, logits and sampled ids), a draft head's feature store, the children
// ranker's scratch, and what a device-side tree kernel reads and writes of them (RunnerIo). Each
// block kind allocates its own scratch rows and state (blocks/).

import { InvalidInputError } from '../../errors.js';
import { createBuffer, STORAGE } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { type KvFormat, type KvShape, kvWordsPerSlot } from '../../kernels/kv/kv.js';
import { isKvInt, kvRotatable } from '../../kernels/kv/kv-quant.js';
import { RowCompact, RowScatter } from '../../kernels/kv/rows.js';
import { maskWordsOf } from '../../kernels/sample/mask.js';
import { TOPK_MAX, TopKChildren } from '../../kernels/sample/topk.js';
import type { PassBuffers } from '../../kernels/tree/tree.js';
import { isHadamardSize, type Quant, type RotationChoice } from '../../quant/pack.js';
import { MAX_FORWARD_TOKENS, type RowBuffers } from '../blocks/gpu.js';
import { deltaNetWidths, deriveSizes, type ModelSpec } from '../spec/spec.js';

/**
 * The runner's rows for up to MAX_FORWARD_TOKENS tokens, allocated once: what every block kind
 * reads ({@link RowBuffers}), and the pass's inputs, scored rows, logits and sampled ids.
 */
export interface Activations extends RowBuffers {
  rows: GPUBuffer; // [T] u32 rows to score
  hr: GPUBuffer; // [T, H] gathered rows
  logits: GPUBuffer; // [T, V]
  masks: GPUBuffer; // [T, ceil(V / 32)] u32 token bitmasks of constrained rows
  samplePositions: GPUBuffer; // [T] u32 position of each sampled token
  out: GPUBuffer; // [T] u32 sampled ids
  commitSlots: GPUBuffer; // [T] u32 source slots of an accepted path
  // [7T + 1] u32 a pass's small inputs, written at once and copied into the buffers above (see
  // stageInputs): positions [T], slots [T], vis [2T], rows [R], sample positions [R], ids [T]
  // (when the CPU supplies them), and T itself (count) for a model with recurrent blocks
  inputs: GPUBuffer;
  staging: GPUBuffer; // [T] u32, MAP_READ
  // The readback ring of a decode session: step n's id comes back through stepStaging[n % 2].
  stepStaging0: GPUBuffer; // [1] u32, MAP_READ
  stepStaging1: GPUBuffer; // [1] u32, MAP_READ
  // With recurrent blocks, what a commit along a tree's path stages (see GpuRunner.commit):
  rerun: GPUBuffer | undefined; // [2 + 2T] u32 staged: n, base, the path's rows, its slots
  rerunCount: GPUBuffer | undefined; // [1] u32 n
  rerunBase: GPUBuffer | undefined; // [1] u32 the committed length
  rerunRows: GPUBuffer | undefined; // [T] u32 the path's rows
}

/** The buffers of `GpuRunner.io`: the pass inputs a tree kernel writes, and what it reads. */
export interface RunnerIo extends PassBuffers {
  logits: GPUBuffer; // [T, V] f32
  out: GPUBuffer; // [T] u32 sampled ids
  commitSlots: GPUBuffer; // [T] u32
}

/** A draft head's features beside the KV cache: [capacity, H] f32, written and committed with it. */
export interface FeatureStore {
  store: GPUBuffer;
  scatter: RowScatter;
  compact: RowCompact;
  /** MAP_READ copy for `GpuRunner.features`, made on first use. */
  staging: GPUBuffer | undefined;
}

/** `GpuRunner.lastChildren`'s kernel and buffers. */
export interface ChildrenRanker {
  op: TopKChildren;
  picks: GPUBuffer; // [MAX_FORWARD_TOKENS, 2] u32 (scored row, position of its children)
  out: GPUBuffer; // [MAX_FORWARD_TOKENS, TOPK_MAX, 2] u32 (token, log-weight bits)
  staging: GPUBuffer; // the same, MAP_READ
}

export function makeChildrenRanker(ctx: GpuContext, vocab: number): ChildrenRanker {
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

/** The runner's rows, each for {@link MAX_FORWARD_TOKENS} tokens; `recurrent`: some block's state is. */
export function allocateActivations(ctx: GpuContext, spec: ModelSpec, recurrent: boolean): Activations {
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
    tmp: f(H, 'tmp'),
    count: recurrent ? createBuffer(ctx, 4, 'pass-rows', STORAGE) : undefined,
    // A commit along a tree's path: [n, base, rows (n), slots (n)] written at once, then copied.
    rerun: recurrent ? createBuffer(ctx, (2 + 2 * maxT) * 4, 'rerun-commit', STORAGE) : undefined,
    rerunCount: recurrent ? createBuffer(ctx, 4, 'rerun-commit-count', STORAGE) : undefined,
    rerunBase: recurrent ? createBuffer(ctx, 4, 'rerun-commit-base', STORAGE) : undefined,
    rerunRows: recurrent ? createBuffer(ctx, maxT * 4, 'rerun-commit-rows', STORAGE) : undefined,
    rows: f(1, 'rows'),
    hr: f(H, 'hr'),
    logits: f(spec.vocabSize, 'logits'),
    masks: f(maskWordsOf(spec.vocabSize), 'token-masks'),
    samplePositions: f(1, 'sample-positions'),
    out: f(1, 'sampled'),
    commitSlots: f(1, 'commit-slots'),
    inputs: createBuffer(ctx, (maxT * 7 + 1) * 4, 'pass-inputs', STORAGE),
    staging: readback(maxT * 4, 'sampled-readback'),
    stepStaging0: readback(4, 'decode-readback-0'),
    stepStaging1: readback(4, 'decode-readback-1'),
  };
}

/** An empty feature store of `capacity` rows of `hidden` floats, with its scatter and compaction. */
export async function makeFeatureStore(
  ctx: GpuContext,
  capacity: number,
  hidden: number,
): Promise<FeatureStore> {
  await Promise.all([RowScatter.prepare(ctx), RowCompact.prepare(ctx)]);
  const shape = { capacity, row: hidden };
  const binds = new BindGroupCache(ctx.device);
  return {
    store: createBuffer(ctx, capacity * hidden * 4, 'features', STORAGE),
    scatter: new RowScatter(ctx, binds, shape),
    compact: new RowCompact(ctx, binds, shape),
    staging: undefined,
  };
}

/**
 * Checks, before any weight is read, what a runner needs of the model (widths the matmul's K
 * blocks of 16 divide; Hadamard sizes for a rotation, whose MLP width is padded to one instead, see
 * placeWeights; an even headDim for an f16 cache) and of its options, and returns the KV cache's
 * shape.
 */
export function checkRunnerShapes(
  spec: ModelSpec,
  o: {
    readonly quant: Quant;
    readonly rotate?: RotationChoice;
    readonly capacity: number;
    readonly kvFormat?: KvFormat;
    readonly kvRotate?: boolean;
    readonly head?: unknown;
    readonly features?: boolean;
  },
): KvShape {
  const { qWidth } = deriveSizes(spec);
  // The residual and attention widths are never padded (only the MLP's is, see placedPad).
  const widths = [
    ['hidden_size', spec.hidden],
    ['q width (num_attention_heads * head_dim)', qWidth],
  ] as const;
  for (const [field, n] of widths) {
    if (n % 16 !== 0)
      throw new InvalidInputError(`${field} = ${n} is not a multiple of 16 (the matmul's K block)`);
    if (o.rotate === 'hadamard' && !isHadamardSize(n))
      throw new InvalidInputError(
        `rotate hadamard: ${field} = ${n} is not a Hadamard size K·2^m that is a multiple of 16`,
      );
  }
  if (o.head && !o.features)
    throw new InvalidInputError('createGpuRunner: a draft head keeps its outputs (features: true)');
  // The kernel has no biases; LFM2's published checkpoints have none (conv_bias false).
  if (spec.shortConv?.bias)
    throw new InvalidInputError(
      `a ${spec.family} model's short-convolution layers with biases (conv_bias) run on the CPU reference only (--device cpu)`,
    );
  if (spec.deltaNet) {
    // The delta rule's output is out_proj's input as it stands: never padded.
    const { valueWidth } = deltaNetWidths(spec);
    if (valueWidth % 16 !== 0)
      throw new InvalidInputError(
        `linear value width (linear_num_value_heads * linear_value_head_dim) = ${valueWidth} is not a multiple of 16 (the matmul's K block)`,
      );
    if (o.quant === 'w8a8' || (o.rotate ?? 'none') !== 'none')
      throw new InvalidInputError(
        `a ${spec.family} model runs on the GPU without input rotations and W8A8 so far (quant ${o.quant}, rotate ${o.rotate ?? 'none'}): use f32, f16, int8, q4_0, int4 or int2 with rotate 'none'`,
      );
  }
  const kv: KvShape = {
    capacity: o.capacity,
    kvHeads: spec.kvHeads,
    headDim: spec.headDim,
    format: o.kvFormat ?? 'f32',
    // An integer cache rotates its keys unless told not to (a layer whose heads cannot be rotated
    // keeps them plain: layerKvShape).
    ...(isKvInt(o.kvFormat) && (o.kvRotate ?? true) && kvRotatable(spec.headDim) ? { rotate: true } : {}),
  };
  kvWordsPerSlot(kv);
  return kv;
}
