// The attention block on the GPU (blocks.ts, attention.ts): its weights as placed, its linears, its
// encode into a forward pass, and its state, the layer's KV cache (written by the pass, compacted
// along an accepted path on commit).

import { InvalidInputError } from '../../../errors.js';
import { type KvShape, MAX_PASS_SLOTS } from '../../../kernels/kv/kv.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { deriveSizes, layerAttention, type ModelSpec } from '../../spec/spec.js';
import { linearsByInput, normNames, outputGateParts } from '../../tensors.js';
import type { AttentionBlock } from '../blocks.js';
import { layerPrefix } from '../blocks.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
import {
  type BlockState,
  type GpuPass,
  isKvCache,
  type KernelBuilder,
  type Linear,
  type Placer,
} from '../gpu.js';

/**
 * Rows a sliding layer's ring keeps beyond its window and one pass's writes: how far back a trim
 * may go and keep the cache (see {@link ringTrimFloor}).
 */
export const RING_ROLLBACK = 64;

/**
 * Layer `layer`'s KV cache shape: the model's, or for a sliding-window layer a ring of its window,
 * one pass's rows and {@link RING_ROLLBACK} more, where that is smaller than the context (its
 * memory then stays the window's however long the context).
 */
export function layerKvShape(spec: ModelSpec, kv: KvShape, layer: number): KvShape {
  const { window } = layerAttention(spec, layer);
  if (window === undefined) return kv;
  const ring = window + MAX_PASS_SLOTS + RING_ROLLBACK;
  return ring < kv.capacity ? { ...kv, ring } : kv;
}

/** The attention block's weights on the GPU, under the checkpoint's names and shapes. */
export interface AttentionGpuWeights {
  readonly kind: 'attention';
  readonly layer: number;
  readonly inputNorm: GPUBuffer; // [H]
  // q_proj, k_proj and v_proj stacked by rows as one matrix whose output row is q | k | v, where
  // their formats agree and each piece ends on a block (concatRows); else the three matrices.
  readonly qkv: GpuMatrix | readonly GpuMatrix[]; // [qWidth + 2·kvWidth, H] | [qWidth, H], [kvWidth, H], [kvWidth, H]
  readonly o: GpuMatrix; // [H, qWidth]
  // The q | k | v bias as one row (the fused kernel adds it), and each bias repeated for
  // MAX_FORWARD_TOKENS rows for the unfused path's in-place adds.
  readonly qkvBias: GPUBuffer | undefined; // [qWidth + 2·kvWidth]
  readonly qBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, qWidth]
  readonly kBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  readonly vBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  readonly qNorm: GPUBuffer | undefined; // [headDim]
  readonly kNorm: GPUBuffer | undefined; // [headDim]
  readonly outNorm: GPUBuffer | undefined; // [H] Gemma's norm of the block's output
}

/** The attention block's linears, bound to its matrices. */
export interface AttentionKernels {
  readonly kind: 'attention';
  // Stacked: [T, H] → [T, qWidth + 2·kvWidth] (q | k | v); else q, k and v: → [T, qWidth], [T, kvWidth] ×2
  readonly qkv: Linear | readonly Linear[];
  readonly o: Linear; // [T, qWidth] → [T, H] (added into x when fused.add)
}

/** Places the block's tensors (`maxRows`: the rows a bias is repeated for). */
export async function placeAttention(
  placer: Placer,
  block: AttentionBlock,
  maxRows: number,
): Promise<AttentionGpuWeights> {
  const { spec } = placer;
  const H = spec.hidden;
  const { qWidth, kvWidth } = deriveSizes(spec);
  const p = layerPrefix(block.layer);
  const linears = linearsByInput(block.layer, spec);
  const norms = normNames(spec, block.layer);
  const [q, k, v] = linears.qkv;
  const biases = ['q', 'k', 'v'].map((x) => `${p}.self_attn.${x}_proj.bias`);
  // With an output gate, q_proj's query rows and gate rows (see outputGateParts) stand apart:
  // the one matmul's output row is q | k | v | gate, as QkvRope and SigmoidGate read it.
  const [query, gate] = outputGateParts(q);
  const pieces: [string, number, number][] = spec.outputGate
    ? [
        [query, qWidth, H],
        [k, kvWidth, H],
        [v, kvWidth, H],
        [gate, qWidth, H],
      ]
    : [
        [q, qWidth, H],
        [k, kvWidth, H],
        [v, kvWidth, H],
      ];
  const qkv = await placer.stacked(`${p}.self_attn.qkv_proj.weight`, pieces);
  if (spec.outputGate && !('parts' in qkv)) {
    for (const m of qkv) m.destroy();
    throw new InvalidInputError(
      `${p}.self_attn: q_proj (with its output gate), k_proj and v_proj cannot be stacked into one matrix in this format`,
    );
  }
  return {
    kind: 'attention',
    layer: block.layer,
    inputNorm: await placer.norm(norms.input, H),
    qkv,
    o: await placer.matrix(linears.o[0], H, qWidth),
    qkvBias: spec.qkvBias
      ? await placer.row(`${p}.self_attn.qkv_proj.bias`, biases, qWidth + 2 * kvWidth)
      : undefined,
    qBias: spec.qkvBias ? await placer.vector(biases[0]!, qWidth, maxRows) : undefined,
    kBias: spec.qkvBias ? await placer.vector(biases[1]!, kvWidth, maxRows) : undefined,
    vBias: spec.qkvBias ? await placer.vector(biases[2]!, kvWidth, maxRows) : undefined,
    qNorm: spec.qkNorm ? await placer.norm(norms.q, spec.headDim) : undefined,
    kNorm: spec.qkNorm ? await placer.norm(norms.k, spec.headDim) : undefined,
    outNorm: spec.sandwichNorms ? await placer.norm(`${p}.post_attention_layernorm.weight`, H) : undefined,
  };
}

/** The block's matrices, each once (stacked or not). */
export function attentionMatrices(w: AttentionGpuWeights): GpuMatrix[] {
  return [...('parts' in w.qkv ? [w.qkv] : w.qkv), w.o];
}

/** The block's linears: a stacked q | k | v takes the input norm (the fused kernel after it does the rest). */
export function attentionKernels(kb: KernelBuilder, w: AttentionGpuWeights): AttentionKernels {
  return {
    kind: 'attention',
    qkv: 'parts' in w.qkv ? kb.linear(w.qkv, kb.norm(w.inputNorm)) : w.qkv.map((m) => kb.linear(m)),
    // With a norm of its output (Gemma), o stores and the norm-add kernel adds.
    o: kb.linear(w.o, w.outNorm ? {} : { epilogue: 'add' }),
  };
}

/**
 * Encodes the block over the pass's rows: q | k | v from one stacked matmul (the input norm folded
 * in) and one kernel for bias, QK-norm, RoPE and the KV write; or, for matrices that could not be
 * stacked, each step; then attention over `cache` and x += o(attn).
 */
export function encodeAttention(
  p: GpuPass,
  w: AttentionGpuWeights,
  k: AttentionKernels,
  cache: BlockState,
): void {
  if (!isKvCache(cache)) throw new Error('encodeAttention: an attention block has a KV cache');
  const { a, T, spec } = p;
  const { qWidth, kvWidth } = deriveSizes(spec);
  const kinds = p.k.attn[w.layer];
  if (!kinds) throw new Error(`encodeAttention: layer ${w.layer} has no attention kernels`);
  p.section('qkv');
  let qIn = a.q;
  if ('encode' in k.qkv) {
    k.qkv.encode(p.pass, k.qkv.fused.norm ? a.x : normedInput(p, w.inputNorm), a.qkv, T);
    const weights = w.qkvBias
      ? { bias: w.qkvBias }
      : w.qNorm && w.kNorm
        ? { qNorm: w.qNorm, kNorm: w.kNorm }
        : {};
    kinds.qkvRope.encode(p.pass, a.qkv, a.positions, a.slots, a.q, cache, T, weights);
  } else {
    const hq = normedInput(p, w.inputNorm);
    const [lq, lk, lv] = k.qkv;
    lq!.encode(p.pass, hq, a.q, T);
    lk!.encode(p.pass, hq, a.k, T);
    lv!.encode(p.pass, hq, a.v, T);
    if (w.qBias && w.kBias && w.vBias) {
      p.k.addQ.encode(p.pass, w.qBias, a.q, T * qWidth);
      p.k.addKv.encode(p.pass, w.kBias, a.k, T * kvWidth);
      p.k.addKv.encode(p.pass, w.vBias, a.v, T * kvWidth);
    }
    let kIn = a.k;
    if (p.k.qNorm && p.k.kNorm && w.qNorm && w.kNorm) {
      p.k.qNorm.encode(p.pass, a.q, w.qNorm, a.qn, T * spec.heads);
      p.k.kNorm.encode(p.pass, a.k, w.kNorm, a.kn, T * spec.kvHeads);
      qIn = a.qn;
      kIn = a.kn;
    }
    kinds.rope.encode(p.pass, qIn, kIn, a.positions, T);
    kinds.kvWrite.encode(p.pass, kIn, a.v, a.slots, cache, T);
  }
  p.section('attention');
  kinds.attention.encode(
    p.pass,
    qIn,
    cache.k,
    cache.v,
    a.vis,
    a.slots,
    a.positions,
    a.attn,
    T,
    p.base,
    p.lastSlot,
  );
  p.section('o');
  // Qwen3.5: attention · sigmoid(gate), the gate read from the q | k | v | gate row.
  if (spec.outputGate) {
    if (!p.k.gate) throw new Error('encodeAttention: an output-gated model has the gate kernel');
    p.k.gate.encode(p.pass, a.attn, a.qkv, T);
  }
  encodeResidual(p, k.o, rotatedInput(p, p.k.rot?.heads, a.attn), w.outNorm);
}
