// The attention block on the GPU: its weights as placed, its kernels (the model's, made once: one
// RoPE/KV/attention set per kind of layer, the QK-norms, the bias adds, the output gate, and the
// q | k | v scratch rows), its state (the layer's KV cache, a ring for a sliding layer), its encode
// into a forward pass, and its commit (the cache compacted along an accepted path).
import { InvalidInputError } from '../../../errors.js';
import { createBuffer, uploadBuffer } from '../../../gpu/buffers.js';
import type { GpuContext } from '../../../gpu/device.js';
import { SplitAttention, type SplitAttentionShape } from '../../../kernels/attention/attention-split.js';
import {
  AddInPlace,
  SigmoidGate,
  type SigmoidGateOptions,
} from '../../../kernels/elementwise/elementwise.js';
import {
  KvCompact,
  type KvLayerBuffers,
  type KvShape,
  KvWrite,
  kvRotated,
  kvRows,
  kvWordsPerSlot,
  MAX_PASS_SLOTS,
} from '../../../kernels/kv/kv.js';
import { isKvInt, kvRotatable } from '../../../kernels/kv/kv-quant.js';
import type { KvQuantWrite } from '../../../kernels/kv/kv-quant-write.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { RmsNorm } from '../../../kernels/norm/rmsnorm.js';
import { QkvRope, type QkvRopeOptions } from '../../../kernels/rope/qkv-rope.js';
import { Rope, type RopeOptions } from '../../../kernels/rope/rope.js';
import {
  attentionScale,
  deriveSizes,
  kvSourceLayer,
  layerAttention,
  layerKind,
  layerSpec,
  type ModelSpec,
  type RopeSpec,
  ropeAttentionFactor,
  valueIsKey,
} from '../../spec/spec.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
import {
  type BoundBlock,
  type GpuBlock,
  type GpuPass,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  PerModel,
  type Placer,
} from '../gpu.js';
import { type AttentionBlock, kvProjections } from './block.js';
import { outputGateParts } from './gate-view.js';

/**
 * Rows a sliding layer's ring keeps beyond its window and one pass's writes: how far back a trim
 * may go and keep the cache (see GpuRunner.canTrim).
 */
export const RING_ROLLBACK = 64;

/**
 * Layer `layer`'s KV cache shape: the model's, or for a sliding-window layer a ring of its window,
 * one pass's rows and {@link RING_ROLLBACK} more, where that is smaller than the context (its
 * memory then stays the window's however long the context).
 */
export function layerKvShape(spec: ModelSpec, kv: KvShape, layer: number): KvShape {
  const { window } = layerAttention(spec, layer);
  const { kvHeads, headDim } = layerSpec(spec, layer); // Gemma 4's full layers: their own
  const same = kvHeads === kv.kvHeads && headDim === kv.headDim;
  const own = same ? kv : { ...kv, kvHeads, headDim, ...(kv.rotate ? { rotate: kvRotatable(headDim) } : {}) };
  if (window === undefined) return own;
  const ring = window + MAX_PASS_SLOTS + RING_ROLLBACK;
  return ring < kv.capacity ? { ...own, ring } : own;
}

/** The attention block's weights on the GPU, under the checkpoint's names and shapes. */
interface AttentionGpuWeights {
  readonly inputNorm: GPUBuffer; // [H]
  // q_proj, k_proj and v_proj stacked by rows as one matrix whose output row is q | k | v, where
  // their formats agree and each piece ends on a block (concatRows); else the three matrices.
  // Without v_proj (Gemma 4's V = K) q | k; a KV-shared layer's q_proj alone.
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

/**
 * The RoPE and attention kernels of one kind of attention layer: its RoPE (base, scaling, or none)
 * and its window. Layers of one kind share one set (Gemma 3: a sliding and a global set).
 */
interface LayerKernels {
  kv: KvShape; // the layers' KV cache shape (a sliding layer's: a ring; see layerKvShape)
  qWidth: number; // heads · headDim of these layers
  kvWidth: number; // kvHeads · headDim
  qNorm: RmsNorm | undefined; // n = headDim over T * heads rows
  kNorm: RmsNorm | undefined; // n = headDim over T * kvHeads rows
  vNorm: RmsNorm | undefined; // Gemma 4's weightless V norm (a weight of ones) on the unfused path
  rope: Rope;
  kvWrite: KvWrite | undefined; // the unfused path's K/V write (f32 and f16 caches)
  // An integer cache's K/V write, on both paths (q | k | v's kernel then leaves K and V in f32
  // staging rows); a rotated cache's also rotates the queries.
  kvQuant: KvQuantWrite | undefined;
  compact: KvCompact; // a commit's compaction of the layers' rows
  qkvRope: QkvRope; // bias, QK-norm, RoPE and the KV write of a stacked q | k | v, one dispatch
  attention: SplitAttention;
}

/** What every attention block of a model shares: its kernels and scratch rows. */
interface AttentionKernels {
  /** Per layer, the RoPE and attention of its kind (undefined for a layer of another kind). */
  layers: readonly (LayerKernels | undefined)[];
  /** Each layer's KV cache once bound: a KV-shared layer attends over its source layer's. */
  caches: Map<number, KvLayerBuffers>;
  ones: GPUBuffer | undefined; // [max headDim] 1.0: the V norm's weight
  addQ: AddInPlace; // T * qWidth
  addKv: AddInPlace; // T * kvWidth
  gate: SigmoidGate | undefined; // attention · sigmoid(gate) of an output-gated model
  // Each sized for the widest layer.
  qkv: GPUBuffer; // [T, qWidth + 2·kvWidth (+ qWidth with a gate)] a stacked q | k | v (| gate) matmul's output
  q: GPUBuffer; // [T, qWidth] (roped, when from qkv)
  k: GPUBuffer; // [T, kvWidth]
  v: GPUBuffer; // [T, kvWidth]
  qn: GPUBuffer; // [T, qWidth] q after QK-norm
  kn: GPUBuffer; // [T, kvWidth] k after QK-norm
  vn: GPUBuffer; // [T, kvWidth] v after its norm
  attn: GPUBuffer; // [T, qWidth]
}

/** The kernel RoPE options a spec's RoPE sets. */
function ropeOptionsOf(
  rope: RopeSpec,
): Pick<RopeOptions, 'theta' | 'layout' | 'scaling' | 'rotaryDim' | 'attentionFactor'> {
  return {
    theta: rope.theta,
    layout: rope.layout,
    scaling: rope.scaling,
    rotaryDim: rope.rotaryDim,
    attentionFactor: ropeAttentionFactor(rope),
  };
}

/**
 * A layer's RoPE, attention and fused q | k | v kernel options at its head size and KV heads
 * (`spec` its layerSpec; its own RoPE and window on top).
 */
function forwardOptions(
  c: KindContext,
  spec: ModelSpec,
  layer: number,
): {
  rope: RopeOptions;
  attention: SplitAttentionShape;
  qkvRope: QkvRopeOptions;
} {
  const { kv } = c;
  const rope: RopeOptions = {
    heads: spec.heads,
    kvHeads: spec.kvHeads,
    headDim: spec.headDim,
    ...ropeOptionsOf(spec.rope),
    ...(spec.queryTemperature ? { queryTemperature: spec.queryTemperature } : {}),
  };
  return {
    rope,
    attention: {
      heads: spec.heads,
      kvHeads: spec.kvHeads,
      headDim: spec.headDim,
      capacity: kv.capacity,
      format: kv.format,
      maxRows: MAX_FORWARD_TOKENS,
      firstSlot: c.firstSlot,
      scale: attentionScale(spec),
    },
    qkvRope: {
      ...rope,
      capacity: kv.capacity,
      format: kv.format,
      bias: spec.qkvBias,
      qkNormEps: spec.qkNorm ? spec.rmsEps : undefined,
      outputGate: spec.outputGate,
      ...(spec.valueNorm ? { valueNorm: spec.rmsEps } : {}),
      ...(valueIsKey(spec, layer) ? { valueFromKey: true } : {}),
    },
  };
}

/** Where the gate stands in the q | k | v | gate row (see QkvRope's outputGate). */
function gateOptions(spec: ModelSpec): SigmoidGateOptions {
  const { qWidth, kvWidth } = deriveSizes(spec);
  return { n: qWidth, stride: 2 * qWidth + 2 * kvWidth, offset: qWidth + 2 * kvWidth };
}

/**
 * Per layer, the RoPE, KV and attention kernels of its kind: one set per distinct (shape, window,
 * ring, RoPE) among the attention layers (one for most models; Gemma 3: sliding and global; Gemma
 * 4: its full layers' wider heads too), undefined for a layer of another kind.
 */
function layerKernels(c: KindContext, quant: KvQuantModule | undefined): (LayerKernels | undefined)[] {
  const { ctx, binds, spec } = c;
  const kinds = Array.from({ length: spec.layers }, (_, layer) => {
    if (layerKind(spec, layer) !== 'attention') return undefined;
    const s = layerSpec(spec, layer);
    const f = forwardOptions(c, s, layer);
    const { window, rope } = layerAttention(spec, layer);
    const shape = layerKvShape(spec, c.kv, layer);
    return {
      kv: shape,
      rope: rope ? { ...f.rope, ...ropeOptionsOf(rope) } : { ...f.rope, none: true, attentionFactor: 1 },
      attention:
        window === undefined
          ? f.attention
          : { ...f.attention, window, ...(shape.ring ? { ring: shape.ring } : {}) },
      qkvRope: f.qkvRope,
    };
  });
  // Passes run in order, so every kind shares one buffer of chunk partials: the first made, of a
  // kind without a ring where there is one (a ring's are sized by its window, too few for the
  // rest), the largest partials first (they hold the others'). By the query heads' widths, not the
  // KV's: Gemma 4's full layers with K = V may have a KV row no wider than its sliding ones' but
  // twice the head (a tiny one's: 1 × 24 against 2 × 12), where no sliding layer has a ring.
  const distinct = new Map<string, NonNullable<(typeof kinds)[number]>>();
  for (const k of kinds) if (k) distinct.set(JSON.stringify(k), k);
  const bytes = (k: NonNullable<(typeof kinds)[number]>) => SplitAttention.partialBytes(k.attention);
  const keys = [...distinct.keys()].sort((a, b) => {
    const [ka, kb] = [distinct.get(a)!, distinct.get(b)!];
    return Number(ka.kv.ring !== undefined) - Number(kb.kv.ring !== undefined) || bytes(kb) - bytes(ka);
  });
  const sets = new Map<string, LayerKernels>();
  let partials: GPUBuffer | undefined;
  for (const key of keys) {
    const kind = distinct.get(key)!;
    const { heads, kvHeads, headDim } = kind.attention;
    const norm = (n: number) => new RmsNorm(ctx, binds, { n, eps: spec.rmsEps });
    const attention = new SplitAttention(ctx, binds, kind.attention, partials);
    partials ??= attention.partials;
    sets.set(key, {
      kv: kind.kv,
      qWidth: heads * headDim,
      kvWidth: kvHeads * headDim,
      qNorm: spec.qkNorm ? norm(headDim) : undefined,
      kNorm: spec.qkNorm ? norm(headDim) : undefined,
      vNorm: spec.valueNorm ? norm(headDim) : undefined,
      rope: new Rope(ctx, binds, kind.rope),
      qkvRope: new QkvRope(ctx, binds, { ...kind.qkvRope, ...kind.rope, ring: kind.kv.ring }),
      kvWrite: quant ? undefined : new KvWrite(ctx, binds, kind.kv),
      kvQuant: quant ? new quant.KvQuantWrite(ctx, binds, kind.kv, heads) : undefined,
      compact: new KvCompact(ctx, binds, kind.kv),
      attention,
    });
  }
  return kinds.map((k) => (k === undefined ? undefined : sets.get(JSON.stringify(k))));
}

/** The model's attention kernels and scratch rows, its pipelines compiled first. */
/** The integer KV cache's write, loaded only for such a cache (its kernel's module and shader). */
type KvQuantModule = typeof import('../../../kernels/kv/kv-quant-write.js');

const modelKernels = new PerModel(async (c: KindContext): Promise<AttentionKernels> => {
  const { ctx, binds, spec } = c;
  const quant = isKvInt(c.kv.format) ? await import('../../../kernels/kv/kv-quant-write.js') : undefined;
  const layers = Array.from({ length: spec.layers }, (_, l) => l).filter(
    (l) => layerKind(spec, l) === 'attention',
  );
  const options = layers.map((l) => forwardOptions(c, layerSpec(spec, l), l));
  await Promise.all([
    Rope.prepare(ctx, spec.rope.layout, ropeAttentionFactor(spec.rope), spec.queryTemperature),
    ...(quant
      ? layers.map((l) => quant.KvQuantWrite.prepare(ctx, layerKvShape(spec, c.kv, l)))
      : [KvWrite.prepare(ctx, c.kv.format)]),
    KvCompact.prepare(ctx),
    // Every kind of attention layer's (a window and RoPE change uniforms and tables, not pipelines).
    ...options.flatMap((f) => [SplitAttention.prepare(ctx, f.attention), QkvRope.prepare(ctx, f.qkvRope)]),
    ...(spec.outputGate ? [SigmoidGate.prepare(ctx)] : []),
  ]);
  // The widest layer's sizes (Gemma 4's full layers are wider than its sliding ones).
  const sizes = layers.map((l) => deriveSizes(layerSpec(spec, l)));
  const qWidth = Math.max(0, ...sizes.map((z) => z.qWidth));
  const kvWidth = Math.max(0, ...sizes.map((z) => z.kvWidth));
  const maxHead = Math.max(0, ...layers.map((l) => layerSpec(spec, l).headDim));
  const rows = (n: number, label: string) => createBuffer(ctx, MAX_FORWARD_TOKENS * n * 4, label);
  const k: AttentionKernels = {
    layers: layerKernels(c, quant),
    caches: new Map(),
    ones: spec.valueNorm ? uploadBuffer(ctx, new Float32Array(maxHead).fill(1), 'v-norm-ones') : undefined,
    addQ: new AddInPlace(ctx, binds),
    addKv: new AddInPlace(ctx, binds),
    gate: spec.outputGate ? new SigmoidGate(ctx, binds, gateOptions(spec)) : undefined,
    qkv: rows((spec.outputGate ? 2 * qWidth : qWidth) + 2 * kvWidth, 'qkv'), // q | k | v (| gate)
    q: rows(qWidth, 'q'),
    k: rows(kvWidth, 'k'),
    v: rows(kvWidth, 'v'),
    qn: rows(qWidth, 'qn'),
    kn: rows(kvWidth, 'kn'),
    vn: rows(kvWidth, 'vn'),
    attn: rows(qWidth, 'attn'),
  };
  c.onDestroy(() => {
    for (const set of new Set(k.layers)) set?.attention.destroy();
    k.gate?.destroy();
    k.ones?.destroy();
    for (const b of [k.qkv, k.q, k.k, k.v, k.qn, k.kn, k.vn, k.attn]) b.destroy();
  });
  return k;
});

/** Places the block's tensors (its layer's shape: see layerSpec). */
export async function placeAttention(placer: Placer, block: AttentionBlock): Promise<GpuBlock> {
  const spec = layerSpec(placer.spec, block.layer);
  const H = spec.hidden;
  const { qWidth, kvWidth } = deriveSizes(spec);
  const n = block.names;
  const kv = kvProjections(spec, block.layer);
  const biases = [n.qBias, n.kBias, n.vBias];
  // With an output gate, q_proj's query rows and gate rows (see outputGateParts) stand apart:
  // the one matmul's output row is q | k | v | gate, as QkvRope and SigmoidGate read it.
  const [query, gate] = outputGateParts(n.q);
  const pieces: [string, number, number][] = spec.outputGate
    ? [
        [query, qWidth, H],
        [n.k, kvWidth, H],
        [n.v, kvWidth, H],
        [gate, qWidth, H],
      ]
    : [
        [n.q, qWidth, H],
        ...(kv === 'none' ? [] : ([[n.k, kvWidth, H]] as [string, number, number][])),
        ...(kv === 'kv' ? ([[n.v, kvWidth, H]] as [string, number, number][]) : []),
      ];
  // A KV-shared layer's q_proj alone is a list of one: its q runs the unfused path.
  const qkv =
    kv === 'none'
      ? [await placer.matrix(n.q, qWidth, H)]
      : await placer.stacked(n.q.replace(/q_proj\.weight$/, 'qkv_proj.weight'), pieces);
  if (spec.outputGate && !('parts' in qkv)) {
    for (const m of qkv) m.destroy();
    throw new InvalidInputError(
      `${n.q}: q_proj (with its output gate), k_proj and v_proj cannot be stacked into one matrix in this format`,
    );
  }
  const w: AttentionGpuWeights = {
    inputNorm: await placer.norm(n.norm, H),
    qkv,
    o: await placer.matrix(n.o, H, qWidth),
    qkvBias: spec.qkvBias
      ? await placer.row(n.q.replace(/q_proj\.weight$/, 'qkv_proj.bias'), biases, qWidth + 2 * kvWidth)
      : undefined,
    qBias: spec.qkvBias ? await placer.vector(n.qBias, qWidth, MAX_FORWARD_TOKENS) : undefined,
    kBias: spec.qkvBias ? await placer.vector(n.kBias, kvWidth, MAX_FORWARD_TOKENS) : undefined,
    vBias: spec.qkvBias ? await placer.vector(n.vBias, kvWidth, MAX_FORWARD_TOKENS) : undefined,
    qNorm: spec.qkNorm ? await placer.norm(n.qNorm, spec.headDim) : undefined,
    kNorm: spec.qkNorm && kv !== 'none' ? await placer.norm(n.kNorm, spec.headDim) : undefined,
    outNorm: spec.sandwichNorms ? await placer.norm(n.outNorm, H) : undefined,
  };
  const vectors = [w.inputNorm, w.qkvBias, w.qBias, w.kBias, w.vBias, w.qNorm, w.kNorm, w.outNorm];
  return {
    matrices: [...('parts' in w.qkv ? [w.qkv] : w.qkv), w.o],
    vectors: vectors.filter((b) => b !== undefined),
    bind: (c) => bindAttention(c, block, w),
  };
}

/**
 * The block's linears (a stacked q | k | v takes the input norm; the fused kernel after it does the
 * rest), its KV cache (a KV-shared layer's: its source layer's, bound before it), and its encode
 * and commit.
 */
async function bindAttention(
  c: KindContext,
  block: AttentionBlock,
  w: AttentionGpuWeights,
): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const layer = k.layers[block.layer];
  if (!layer) throw new Error(`bindAttention: layer ${block.layer} has no attention kernels`);
  const kb = c.builder;
  const qkv = 'parts' in w.qkv ? kb.linear(w.qkv, kb.norm(w.inputNorm)) : w.qkv.map((m) => kb.linear(m));
  // With a norm of its output (Gemma), o stores and the norm-add kernel adds.
  const o = kb.linear(w.o, w.outNorm ? {} : { epilogue: 'add' });
  const source = kvSourceLayer(c.spec, block.layer);
  const shared = source !== block.layer;
  const cache = shared ? k.caches.get(source) : kvCacheOf(c.ctx, block.layer, layer.kv);
  if (!cache)
    throw new Error(`bindAttention: layer ${block.layer} shares layer ${source}'s cache, not bound yet`);
  if (!shared) k.caches.set(block.layer, cache);
  return {
    encode: (p) => encodeAttention(p, w, k, layer, qkv, o, cache, shared),
    commit(pass, ci) {
      // A shared layer's cache is its source's, which compacts itself.
      if (ci.moved && !shared) layer.compact.encode(pass, [cache], ci.slots, ci.count, ci.committed);
    },
    kvBytes: shared ? 0 : cache.k.size + cache.v.size,
    recurrent: undefined,
    ring: layer.kv.ring !== undefined,
    ...(shared ? {} : { kv: { layer: block.layer, buffers: cache, shape: layer.kv } }),
    destroy() {
      for (const l of 'encode' in qkv ? [qkv] : qkv) l.destroy();
      o.destroy();
      if (shared) return;
      cache.k.destroy();
      cache.v.destroy();
    },
  };
}

/**
 * A layer's K and V buffers, each [capacity, kvHeads, headDim] in the cache's format, or [ring, …]
 * for a sliding layer's ring (see layerKvShape).
 */
function kvCacheOf(ctx: GpuContext, layer: number, kv: KvShape): KvLayerBuffers {
  const bytes = kvRows(kv) * kvWordsPerSlot(kv) * 4;
  return {
    k: createBuffer(ctx, bytes, `model.layers.${layer}.k_cache`),
    v: createBuffer(ctx, bytes, `model.layers.${layer}.v_cache`),
  };
}

/**
 * Encodes the block over the pass's rows: q | k | v from one stacked matmul (the input norm folded
 * in) and one kernel for bias, QK-norm, the V norm, RoPE and the KV write; or, for matrices that
 * could not be stacked, each step (a KV-shared layer: q's alone); then attention over the cache and
 * x += o(attn).
 */
function encodeAttention(
  p: GpuPass,
  w: AttentionGpuWeights,
  k: AttentionKernels,
  layer: LayerKernels,
  qkv: Linear | readonly Linear[],
  o: Linear,
  cache: KvLayerBuffers,
  shared: boolean,
): void {
  const { a, T, spec } = p;
  const { qWidth } = layer;
  const heads = qWidth / layer.kv.headDim;
  p.section('qkv');
  let qIn = k.q;
  if ('encode' in qkv) {
    qkv.encode(p.pass, qkv.fused.norm ? a.x : normedInput(p, w.inputNorm), k.qkv, T, p.prefill);
    const weights = w.qkvBias
      ? { bias: w.qkvBias }
      : w.qNorm && w.kNorm
        ? { qNorm: w.qNorm, kNorm: w.kNorm }
        : {};
    if (layer.kvQuant) {
      // An integer cache: K and V in f32 staging rows, then rounded into the cache (q rotated).
      layer.qkvRope.encode(p.pass, k.qkv, a.positions, a.slots, k.q, { k: k.k, v: k.v }, T, weights);
      layer.kvQuant.encode(p.pass, k.k, k.v, a.slots, cache, T, k.q);
    } else layer.qkvRope.encode(p.pass, k.qkv, a.positions, a.slots, k.q, cache, T, weights);
  } else {
    const hq = normedInput(p, w.inputNorm);
    const [lq, lk, lv] = qkv;
    lq!.encode(p.pass, hq, k.q, T, p.prefill);
    if (w.qBias) k.addQ.encode(p.pass, w.qBias, k.q, T * qWidth);
    if (layer.qNorm && w.qNorm) {
      layer.qNorm.encode(p.pass, k.q, w.qNorm, k.qn, T * heads);
      qIn = k.qn;
    }
    if (shared) {
      // Only q turns (the kernel rotates a k too: the scratch row, left unread).
      layer.rope.encode(p.pass, qIn, k.k, a.positions, T);
      // Over a rotated cache the queries turn the same way.
      if (layer.kvQuant && kvRotated(layer.kv)) layer.kvQuant.encodeQueries(p.pass, qIn, T);
    } else {
      encodeKv(p, w, k, layer, lk!, lv, hq, cache, qIn);
    }
  }
  p.section('attention');
  layer.attention.encode(
    p.pass,
    qIn,
    cache.k,
    cache.v,
    a.vis,
    a.slots,
    a.positions,
    k.attn,
    T,
    p.base,
    p.lastSlot,
  );
  p.section('o');
  // Qwen3.5: attention · sigmoid(gate), the gate read from the q | k | v | gate row.
  if (spec.outputGate) {
    if (!k.gate) throw new Error('encodeAttention: an output-gated model has the gate kernel');
    k.gate.encode(p.pass, k.attn, k.qkv, T);
  }
  encodeResidual(p, o, rotatedInput(p, p.k.rot?.of(qWidth), k.attn), w.outNorm);
}

/**
 * The unfused path's K and V: k (and v, unless V is K's projection: Gemma 4) from their linears,
 * their biases, the K norm, the weightless V norm, RoPE on q and k, and the KV write.
 */
function encodeKv(
  p: GpuPass,
  w: AttentionGpuWeights,
  k: AttentionKernels,
  layer: LayerKernels,
  lk: Linear,
  lv: Linear | undefined,
  hq: GPUBuffer,
  cache: KvLayerBuffers,
  qIn: GPUBuffer,
): void {
  const { a, T } = p;
  const { kvWidth } = layer;
  const kvHeads = layer.kv.kvHeads;
  lk.encode(p.pass, hq, k.k, T, p.prefill);
  if (lv) lv.encode(p.pass, hq, k.v, T, p.prefill);
  if (w.kBias && w.vBias) {
    k.addKv.encode(p.pass, w.kBias, k.k, T * kvWidth);
    k.addKv.encode(p.pass, w.vBias, k.v, T * kvWidth);
  }
  // V = K's projection before its norm and RoPE (Gemma 4's full layers with attention_k_eq_v).
  let vIn = lv ? k.v : k.k;
  if (layer.vNorm && k.ones) {
    layer.vNorm.encode(p.pass, vIn, k.ones, k.vn, T * kvHeads);
    vIn = k.vn;
  }
  let kIn = k.k;
  if (layer.kNorm && w.kNorm) {
    layer.kNorm.encode(p.pass, k.k, w.kNorm, k.kn, T * kvHeads);
    kIn = k.kn;
  }
  layer.rope.encode(p.pass, qIn, kIn, a.positions, T);
  if (layer.kvQuant) layer.kvQuant.encode(p.pass, kIn, vIn, a.slots, cache, T, qIn);
  else layer.kvWrite!.encode(p.pass, kIn, vIn, a.slots, cache, T);
}
