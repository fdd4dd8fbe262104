// Whether a model fits a GPU, checked before anything is allocated: every buffer the runner binds
// whole against the adapter's buffer limits, and the whole model against an estimate of device
// memory. The sizes follow what `createGpuRunner` allocates (weights as `packedBytes` counts them,
// the KV cache, the activations of MAX_FORWARD_TOKENS rows); matrices need no check of their own,
// since `uploadMatrix` splits them into parts that fit the binding limit.
import { type BytesPerFormat, DeviceLimitError } from '../errors.js';
import { MAX_FORWARD_TOKENS } from '../model/blocks/gpu.js';
import { blocksFootprint } from '../model/blocks/index.js';
import type { BoundBuffer, FootprintOptions } from '../model/blocks/kind.js';
import { modelBlocks } from '../model/families/index.js';
import type { ModelSpec } from '../model/spec/spec.js';
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

/**
 * The bytes `spec` takes on the GPU with every matrix packed in `format` (a GGUF that keeps some
 * matrices in their own formats differs a little), a KV cache of `o.context` tokens and the
 * activations of one forward pass: its blocks' through their kinds (`blocksFootprint`: weights, KV
 * cache, recurrent state, scratch rows), and the embedding, LM head, final norm and the rows every
 * pass uses.
 */
export function modelFootprint(spec: ModelSpec, format: WeightFormat, o: FootprintOptions): ModelFootprint {
  const H = spec.hidden;
  const V = spec.vocabSize;
  const maxT = MAX_FORWARD_TOKENS;
  const blocks = blocksFootprint(spec, modelBlocks(spec), format, o);
  const heads = packedBytes(format, V, H) * (spec.tiedEmbeddings ? 1 : 2);
  const weights = blocks.weights + heads + 4 * H;
  const logits = maxT * V * 4; // [maxT, V] f32, and its readback copy
  // x, h, tmp, the gathered rows and the pass's small inputs; the kinds' scratch rows.
  const activations = 4 * maxT * (4 * H + 8) + blocks.activations + 2 * logits;
  return {
    weights,
    kvCache: blocks.kvCache,
    state: blocks.state,
    activations,
    total: weights + blocks.kvCache + blocks.state + activations,
    bound: [...blocks.bound, { what: `logits [${maxT}, ${V}] f32`, bytes: logits }],
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
  throw new DeviceLimitError(over.limit, over.what, over.needed, over.available, sizes, fits, {
    ...(over.limit === 'device memory' ? expertBudgetHint(spec, format, o, asked, over.available) : {}),
  });
}

/**
 * For a mixture over the device memory: the expert budget that fits it at `format` (the memory
 * left by everything but the experts), where one holding topK experts per layer does.
 */
function expertBudgetHint(
  spec: ModelSpec,
  format: WeightFormat,
  o: FootprintOptions,
  f: ModelFootprint,
  available: number,
): { also?: string } {
  const m = spec.moe;
  if (!m || o.expertBudget !== undefined) return {};
  const layers = m.layers.filter(Boolean).length;
  const all = modelFootprint(spec, format, { ...o, expertBudget: 0 });
  const experts = f.total - all.total;
  const budget = available - all.total;
  const least = layers * m.topK * (experts / (layers * m.experts));
  if (budget < least) return {};
  return {
    also: `expertBudget: ${Math.floor(budget)} (of ${experts} bytes of experts) would fit, the rest paged from CPU memory`,
  };
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
