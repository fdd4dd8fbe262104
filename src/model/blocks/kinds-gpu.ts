// Every block kind's GPU side behind one switch: placing its weights, its matrices, its linears,
// its state and its encode. A new kind adds an arm to each (the compiler's exhaustiveness check
// lists them).
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import {
  type AttentionGpuWeights,
  type AttentionKernels,
  attentionKernels,
  attentionMatrices,
  encodeAttention,
  placeAttention,
} from './attention/gpu.js';
import type { Block } from './blocks.js';
import {
  encodeLinear,
  type LinearGpuWeights,
  type LinearKernels,
  linearKernels,
  linearMatrices,
  linearVectors,
  placeLinear,
} from './deltanet/gpu.js';
import type { BlockState, GpuPass, KernelBuilder, Linear, Placer } from './gpu.js';
import {
  encodeMlp,
  type MlpGpuWeights,
  type MlpKernels,
  mlpKernels,
  mlpMatrices,
  placeMlp,
} from './mlp/gpu.js';
import {
  encodeShortConv,
  placeShortConv,
  type ShortConvGpuWeights,
  type ShortConvKernels,
  shortConvKernels,
  shortConvMatrices,
  shortConvVectors,
} from './shortconv/gpu.js';

/** A block's weights on the GPU, tagged with its kind. */
export type GpuBlockWeights = AttentionGpuWeights | LinearGpuWeights | ShortConvGpuWeights | MlpGpuWeights;

/** A block's linears, tagged with its kind. */
export type GpuBlockKernels = AttentionKernels | LinearKernels | ShortConvKernels | MlpKernels;

/** Places a block's tensors (`maxRows`: the rows a pass holds, for per-row bias copies). */
export function placeBlock(placer: Placer, block: Block, maxRows: number): Promise<GpuBlockWeights> {
  switch (block.kind) {
    case 'attention':
      return placeAttention(placer, block, maxRows);
    case 'mlp':
      return placeMlp(placer, block);
    case 'linear':
      return placeLinear(placer, block);
    case 'conv':
      return placeShortConv(placer, block);
  }
}

/** A block's matrices, each once: what a pass reads of its weights, and what unloading destroys. */
export function blockMatrices(w: GpuBlockWeights): GpuMatrix[] {
  switch (w.kind) {
    case 'attention':
      return attentionMatrices(w);
    case 'linear':
      return linearMatrices(w);
    case 'conv':
      return shortConvMatrices(w);
    case 'mlp':
      return mlpMatrices(w);
  }
}

/** A block's other buffers (norm weights, biases), destroyed with its matrices. */
export function blockVectors(w: GpuBlockWeights): GPUBuffer[] {
  if (w.kind === 'mlp') return [w.postNorm, w.outNorm].filter((b) => b !== undefined);
  if (w.kind === 'linear') return linearVectors(w);
  if (w.kind === 'conv') return shortConvVectors(w);
  return [w.inputNorm, w.qkvBias, w.qBias, w.kBias, w.vBias, w.qNorm, w.kNorm, w.outNorm].filter(
    (b) => b !== undefined,
  );
}

/** A block's linears over its matrices. */
export function blockKernels(kb: KernelBuilder, w: GpuBlockWeights): GpuBlockKernels {
  switch (w.kind) {
    case 'attention':
      return attentionKernels(kb, w);
    case 'linear':
      return linearKernels(kb, w);
    case 'conv':
      return shortConvKernels(kb, w);
    case 'mlp':
      return mlpKernels(kb, w);
  }
}

/** Destroys a block's linears. */
export function destroyBlockKernels(k: GpuBlockKernels): void {
  const list = (m: Linear | readonly Linear[]) => ('encode' in m ? [m] : [...m]);
  const linears =
    k.kind === 'attention'
      ? [...list(k.qkv), k.o]
      : k.kind === 'linear'
        ? [k.proj, k.out]
        : k.kind === 'conv'
          ? [k.inProj, k.out]
          : [...list(k.gateUp), k.down];
  for (const l of linears) l.destroy();
}

/** The GPU buffers of a block's state. */
export function stateBuffers(state: BlockState): GPUBuffer[] {
  if (!state) return [];
  if ('windows' in state) return [...state.windows, state.proj];
  return 'pair' in state
    ? [...state.pair.flatMap((s) => [s.conv, s.recurrent]), state.proj]
    : [state.k, state.v];
}

/** Encodes a block over the pass's rows, with its state. */
export function encodeBlock(p: GpuPass, w: GpuBlockWeights, k: GpuBlockKernels, state: BlockState): void {
  if (w.kind === 'attention' && k.kind === 'attention') encodeAttention(p, w, k, state);
  else if (w.kind === 'linear' && k.kind === 'linear') encodeLinear(p, w, k, state);
  else if (w.kind === 'conv' && k.kind === 'conv') encodeShortConv(p, w, k, state);
  else if (w.kind === 'mlp' && k.kind === 'mlp') encodeMlp(p, w, k);
  else throw new Error(`encodeBlock: ${w.kind} weights with ${k.kind} kernels`);
}
