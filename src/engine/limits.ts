// Whether a model fits a GPU, checked before anything is allocated: every buffer the runner binds
// whole against the adapter's buffer limits, and the whole model against an estimate of device
// memory. The sizes follow what `createGpuRunner` allocates (weights as `packedBytes` counts them,
// the KV cache, the activations of MAX_FORWARD_TOKENS rows); matrices need no check of their own,
// since `uploadMatrix` splits them into parts that fit the binding limit.
import { type BytesPerFormat, DeviceLimitError } from '../errors.js';
import { type KvFormat, kvRows, kvWordsPerSlot } from '../kernels/kv/kv.js';
import { layerKvShape } from '../model/blocks/attention/gpu.js';
import { linearStateBytes, projWidth } from '../model/blocks/deltanet/gpu.js';
import { shortConvStateBytes } from '../model/blocks/shortconv/gpu.js';
import { MAX_FORWARD_TOKENS } from '../model/gpu/weights.js';
import { deriveSizes, layerKind, linearSizes, type ModelSpec } from '../model/spec/spec.js';
import { packedBytes, type WeightFormat } from '../quant/formats.js';

/** The weight formats a model's size is reported in, most precise first. */
export const SIZE_FORMATS = ['f32', 'f16', 'int8', 'int4', 'int2'] as const;

/** The limits of an adapter that decide whether a model fits (a subset of `GPUSupportedLimits`). */
export interface DeviceLimits {
  readonly maxBufferSize: number;
  readonly maxStorageBufferBindingSize: number;
  /** Estimated bytes of memory the device can give the model; Infinity when unknown. */
  readonly deviceMemory: number;
}

/** One GPU buffer the runner allocates and binds whole. */
export interface BoundBuffer {
  /** Its label, e.g. `model.layers.*.k_cache [2048, 8, 128] f32`. */
  readonly what: string;
  readonly bytes: number;
}

/** Bytes a model takes on the GPU in one weight format, and its largest buffers bound whole. */
export interface ModelFootprint {
  /** Packed matrices and f32 vectors (norms, biases). */
  readonly weights: number;
  /** K and V of every attention layer. */
  readonly kvCache: number;
  /** The recurrent layers' states and kept projection rows (0 without such layers). */
  readonly state: number;
  /** Activations of one forward pass, and the logits readback buffer. */
  readonly activations: number;
  /** weights + kvCache + state + activations. */
  readonly total: number;
  /** Buffers bound whole, each of which must fit the buffer and binding limits. */
  readonly bound: readonly BoundBuffer[];
}

/** What the runner's sizes depend on besides the spec. */
export interface FootprintOptions {
  /** Tokens the KV cache holds. */
  readonly context: number;
  readonly kvFormat: KvFormat;
}

/**
 * The bytes `spec` takes on the GPU with every matrix packed in `format` (a GGUF that keeps some
 * matrices in their own formats differs a little), a KV cache of `o.context` tokens and the
 * activations of one forward pass.
 */
export function modelFootprint(spec: ModelSpec, format: WeightFormat, o: FootprintOptions): ModelFootprint {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const V = spec.vocabSize;
  const maxT = MAX_FORWARD_TOKENS;
  const kinds = Array.from({ length: spec.layers }, (_, l) => layerKind(spec, l));
  const attentionLayers = kinds.filter((k) => k === 'attention').length;
  const linearLayers = kinds.filter((k) => k === 'linear').length;
  const convLayers = kinds.filter((k) => k === 'conv').length;
  const mlp = 2 * packedBytes(format, I, H) + packedBytes(format, H, I);
  // q_proj with an output gate holds each head's query and gate rows.
  const attentionMatrices =
    packedBytes(format, (spec.outputGate ? 2 : 1) * qWidth, H) +
    2 * packedBytes(format, kvWidth, H) +
    packedBytes(format, H, qWidth);
  // Norms, and biases repeated for every forward row (see LayerWeights).
  const attentionVectors =
    4 * (2 * H + (spec.qkvBias ? maxT * (qWidth + 2 * kvWidth) : 0) + (spec.qkNorm ? 2 * spec.headDim : 0));
  const none = { matrices: 0, vectors: 0, state: 0 };
  const linear = linearLayers > 0 ? linearFootprint(spec, format) : none;
  const conv = convLayers > 0 ? convFootprint(spec, format) : none;
  const heads = packedBytes(format, V, H) * (spec.tiedEmbeddings ? 1 : 2);
  const weights =
    attentionLayers * (attentionMatrices + attentionVectors) +
    linearLayers * (linear.matrices + linear.vectors) +
    convLayers * (conv.matrices + conv.vectors) +
    spec.layers * mlp +
    heads +
    4 * H;
  const kv = { capacity: o.context, kvHeads: spec.kvHeads, headDim: spec.headDim, format: o.kvFormat };
  const kvLayer = o.context * kvWordsPerSlot(kv) * 4; // [context, kvHeads, headDim]
  // A sliding layer's ring holds its window and a little more, not the context (layerKvShape).
  const kvCache = kinds.reduce(
    (sum, k, l) =>
      sum + (k === 'attention' ? 2 * kvRows(layerKvShape(spec, kv, l)) * kvWordsPerSlot(kv) * 4 : 0),
    0,
  );
  const state = linearLayers * linear.state + convLayers * conv.state;
  const logits = maxT * V * 4; // [maxT, V] f32, and its readback copy
  // (With an output gate the q | k | v row holds the gate too.)
  const gate = spec.outputGate ? qWidth : 0;
  const activations = 4 * maxT * (4 * H + 3 * qWidth + 3 * kvWidth + 3 * I + 8 + gate) + 2 * logits;
  const kvShape = `[${o.context}, ${spec.kvHeads}, ${spec.headDim}] ${o.kvFormat}`;
  return {
    weights,
    kvCache,
    state,
    activations,
    total: weights + kvCache + state + activations,
    bound: [
      ...(attentionLayers > 0 ? [{ what: `model.layers.*.k_cache ${kvShape}`, bytes: kvLayer }] : []),
      { what: `logits [${maxT}, ${V}] f32`, bytes: logits },
    ],
  };
}

/**
 * A linear-attention layer's bytes: its matrices (the fused projection, out_proj), its vectors
 * (input norm, conv, decay, gated norm) and its state (two copies, and the projection rows of
 * MAX_FORWARD_TOKENS rows a commit reads again).
 */
function linearFootprint(
  spec: ModelSpec,
  format: WeightFormat,
): { matrices: number; vectors: number; state: number } {
  const la = spec.linearAttention!;
  const { convChannels: C, valueWidth } = linearSizes(spec);
  const P = projWidth(spec);
  const H = spec.hidden;
  return {
    matrices: packedBytes(format, P, H) + packedBytes(format, H, valueWidth),
    vectors: 4 * (2 * H + C * la.convKernel + 2 * la.valueHeads + la.valueDim), // its two norms among them
    // Two state copies and the kept projection rows; the gathered rows and the mixer's output.
    state: linearStateBytes(spec) + 4 * MAX_FORWARD_TOKENS * P + 4 * MAX_FORWARD_TOKENS * (P + valueWidth),
  };
}

/**
 * A short-convolution layer's bytes: its matrices (in_proj [3H, H], out_proj), its vectors (input
 * norm, conv [H, K]) and its state (two windows of the last K - 1 rows, the in_proj rows of
 * MAX_FORWARD_TOKENS rows a commit reads again; the gathered rows and the mixer's output).
 */
function convFootprint(
  spec: ModelSpec,
  format: WeightFormat,
): { matrices: number; vectors: number; state: number } {
  const H = spec.hidden;
  const K = spec.shortConv!.kernel;
  const rows = 4 * MAX_FORWARD_TOKENS;
  return {
    matrices: packedBytes(format, 3 * H, H) + packedBytes(format, H, H),
    vectors: 4 * (2 * H + H * K), // its two norms among them
    state: shortConvStateBytes(spec) + rows * 3 * H + rows * (3 * H + H),
  };
}

/** A second model placed on the same device (a draft model or a self-draft), with its footprint. */
export interface Companion {
  /** What it is, e.g. `draft model kjv-draft at f16`. */
  readonly what: string;
  readonly footprint: ModelFootprint;
}

/**
 * The first limit `f` (with `companion`'s buffers and bytes beside it) exceeds, as the error's
 * fields, or undefined when both fit.
 */
function exceeded(
  f: ModelFootprint,
  format: WeightFormat,
  limits: DeviceLimits,
  companion?: Companion,
): { limit: string; what: string; needed: number; available: number } | undefined {
  const bound = [
    ...f.bound,
    ...(companion?.footprint.bound ?? []).map((b) => ({ ...b, what: `${companion!.what}: ${b.what}` })),
  ];
  for (const b of bound) {
    if (b.bytes > limits.maxBufferSize)
      return { limit: 'maxBufferSize', what: b.what, needed: b.bytes, available: limits.maxBufferSize };
    if (b.bytes > limits.maxStorageBufferBindingSize)
      return {
        limit: 'maxStorageBufferBindingSize',
        what: b.what,
        needed: b.bytes,
        available: limits.maxStorageBufferBindingSize,
      };
  }
  const total = f.total + (companion?.footprint.total ?? 0);
  if (total > limits.deviceMemory) {
    const model = `the whole model at ${format} (weights ${f.weights}, KV cache ${f.kvCache}, activations ${f.activations} bytes)`;
    return {
      limit: 'device memory',
      what: companion ? `${model} with its ${companion.what} (${companion.footprint.total} bytes)` : model,
      needed: total,
      available: limits.deviceMemory,
    };
  }
  return undefined;
}

/**
 * Throws {@link DeviceLimitError} unless `spec` in weight `format` fits `limits`: every buffer
 * bound whole within maxBufferSize and maxStorageBufferBindingSize, and the total within the
 * device memory estimate. A `companion` (the drafter's model, placed on the same device) adds its
 * buffers and bytes. The error gives the model's bytes in every format of {@link SIZE_FORMATS}
 * and the most precise format smaller than `format` that would fit beside the same companion.
 */
export function checkDeviceFit(
  spec: ModelSpec,
  format: WeightFormat,
  o: FootprintOptions,
  limits: DeviceLimits,
  companion?: Companion,
): void {
  const asked = modelFootprint(spec, format, o);
  const over = exceeded(asked, format, limits, companion);
  if (!over) return;
  const total = (f: WeightFormat) => modelFootprint(spec, f, o).total;
  const sizes: BytesPerFormat = {
    f32: total('f32'),
    f16: total('f16'),
    int8: total('int8'),
    int4: total('int4'),
    int2: total('int2'),
  };
  const fits = SIZE_FORMATS.find(
    (f) => sizes[f] < asked.total && exceeded(modelFootprint(spec, f, o), f, limits, companion) === undefined,
  );
  throw new DeviceLimitError(over.limit, over.what, over.needed, over.available, sizes, fits);
}

/**
 * An estimate of the memory a browser's GPU can give a model: `navigator.deviceMemory` (the
 * device's RAM in GiB as the browser reports it, rounded down and capped at 8) where the browser
 * has it, which is what integrated and mobile GPUs share; Infinity elsewhere (Node, Firefox,
 * Safari), where only the buffer limits are checked. `createEngine({ deviceMemory })` overrides it.
 */
export function estimateDeviceMemory(): number {
  const gib = typeof navigator === 'undefined' ? undefined : Reflect.get(navigator, 'deviceMemory');
  return typeof gib === 'number' && gib > 0 ? gib * 2 ** 30 : Number.POSITIVE_INFINITY;
}
