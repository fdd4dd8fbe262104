import { createBuffer, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { SplitAttention, type SplitAttentionShape } from '../../kernels/attention/attention-split.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { DeltaNet } from '../../kernels/deltanet/deltanet.js';
import {
  AddInPlace,
  GatherRows,
  SigmoidGate,
  type SigmoidGateOptions,
  SiluMul,
} from '../../kernels/elementwise/elementwise.js';
import { Embedding } from '../../kernels/embed/embed.js';
import { Hadamard } from '../../kernels/hadamard/hadamard.js';
import { KvCompact, type KvShape, KvWrite } from '../../kernels/kv/kv.js';
import { Matmul, prepareMatmul } from '../../kernels/matmul/matmul.js';
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import { gatedEpilogue, type MatmulOptions } from '../../kernels/matmul/variant.js';
import { RmsNorm, RmsNormAdd } from '../../kernels/norm/rmsnorm.js';
import { QkvRope, type QkvRopeOptions } from '../../kernels/rope/qkv-rope.js';
import { Rope, type RopeOptions } from '../../kernels/rope/rope.js';
import { TokenMask } from '../../kernels/sample/mask.js';
import { Sampler, SplitSampler } from '../../kernels/sample/sample.js';
import { ShortConv } from '../../kernels/shortconv/shortconv.js';
import { Steer, type SteerPlan } from '../../kernels/steer/steer.js';
import { MatmulW8A8, prepareW8A8, QuantizeAct } from '../../kernels/w8a8/w8a8.js';
import {
  packedWidth,
  type Quant,
  ROTATION_SEED,
  type RotationChoice,
  rotationFor,
} from '../../quant/pack.js';
import { layerKvShape } from '../blocks/attention/gpu.js';
import { deltaNetShape, projWidth } from '../blocks/deltanet/gpu.js';
import type {
  KernelBuilder,
  LayerAttentionKernels,
  Linear,
  Rotations,
  SharedKernels,
} from '../blocks/gpu.js';
import {
  blockKernels,
  blockMatrices,
  destroyBlockKernels,
  type GpuBlockKernels,
} from '../blocks/kinds-gpu.js';
import { shortConvShape } from '../blocks/shortconv/gpu.js';
import {
  attentionScale,
  deriveSizes,
  layerAttention,
  layerKind,
  type ModelSpec,
  type RopeSpec,
  ropeAttentionFactor,
} from '../spec/spec.js';
import { type GpuWeights, MAX_FORWARD_TOKENS } from './weights.js';

/** A {@link Matmul} as a {@link Linear}. */
function matmulLinear(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, o: MatmulOptions): Linear {
  const mm = new Matmul(ctx, binds, w, o);
  const gated = o.epilogue !== undefined && gatedEpilogue(o.epilogue);
  const fused = { norm: o.norm !== undefined, add: o.epilogue === 'add', gated };
  return { fused, encode: (pass, x, y, M) => mm.encode(pass, x, y, M), destroy: () => mm.destroy() };
}

/**
 * W8A8: each row of x is quantized to int8 with its own scale (per token, dynamic), then multiplied
 * with the int8 weights by `dot4I8Packed` with i32 sums. `xq`/`sx` are scratch shared by every
 * linear of the model: dispatches in one pass run in order, so each quantize-then-multiply pair
 * finishes with them before the next begins.
 */
class W8A8Linear implements Linear {
  readonly fused = { norm: false, add: false, gated: false };
  private readonly quant: QuantizeAct;
  private readonly mm: MatmulW8A8;

  constructor(
    ctx: GpuContext,
    binds: BindGroupCache,
    w: GpuMatrix,
    private readonly xq: GPUBuffer,
    private readonly sx: GPUBuffer,
  ) {
    this.quant = new QuantizeAct(ctx, binds, w.cols);
    this.mm = new MatmulW8A8(ctx, binds, w, { maxM: MAX_FORWARD_TOKENS });
  }

  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number): void {
    this.quant.encode(pass, x, this.xq, this.sx, M);
    this.mm.encode(pass, this.xq, this.sx, y, M);
  }

  destroy(): void {
    this.quant.destroy();
    this.mm.destroy();
  }
}

/** Activation steering on one layer's input and output (undefined: not steered). */
export interface LayerSteering {
  in: Steer | undefined;
  out: Steer | undefined;
}

/** One kernel instance per call site whose uniforms differ; shared where they never do. */
export interface Kernels extends SharedKernels {
  embed: Embedding;
  gather: GatherRows;
  lmHead: Linear; // [R, H] un-normed rows → [R, V] (the final norm folded in)
  /**
   * One token per scored row, greedy or Gumbel: on the GPU forms split over workgroups of 256
   * tokens (SplitSampler, the same ids; one workgroup per row would stream a 150k vocabulary
   * through one core), on the serial forms one workgroup per row (the sampler for each mode).
   */
  sample: { greedy: Sampler | SplitSampler; gumbel: Sampler | SplitSampler };
  /** A grammar's token bitmask onto the logits before the sampler (constrained decoding). */
  mask: TokenMask;
  /** Each block's linears, bound to its matrices, in forward order. */
  blocks: GpuBlockKernels[];
  /** Per layer, its activation steering. */
  steer: LayerSteering[];
  /** A commit along a tree's path: its projection rows gathered from a linear layer's (width P). */
  gatherProj: GatherRows | undefined;
  /** A commit along a tree's path: its in_proj rows gathered from a short-convolution layer's (width 3H). */
  gatherConv: GatherRows | undefined;
  scratch: GPUBuffer[]; // buffers the kernels share (W8A8 activations, steering vectors)
}

/** Options of {@link buildKernels}: how the weights were placed, and what the forward adds. */
interface BuildKernelsOptions {
  quant: Quant;
  rotate: RotationChoice;
  /** The KV cache every layer's buffers share the shape of. */
  kv: KvShape;
  /** Activation steering applied in every forward pass (see kernels/steer). */
  steer?: SteerPlan | undefined;
  /** Attention never sees slots below this one but a row's own (a draft head's: 1). Default 0. */
  firstSlot?: number;
}

/**
 * Compiles the pipelines the forward uses (WGSL errors surface here) and makes its kernel
 * instances, each with its uniforms and bound to its weights, for up to
 * {@link MAX_FORWARD_TOKENS} rows.
 */
export async function buildKernels(
  ctx: GpuContext,
  spec: ModelSpec,
  w: GpuWeights,
  o: BuildKernelsOptions,
): Promise<Kernels> {
  const binds = new BindGroupCache(ctx.device);
  const f = forwardShapes(spec, o);
  await prepareKernels(ctx, spec, w, o, f);
  const { H, V, maxT, eps, normFused } = f;
  const D = spec.headDim;
  const serial = ctx.kernels === 'serial';
  // W8A8 scratch: int8 activations [maxT, maxK] packed 4 per u32, and one scale per row.
  const maxK = Math.max(H, f.Ip, f.qWidth);
  const xq = o.quant === 'w8a8' ? createBuffer(ctx, maxT * maxK, 'w8a8-xq') : undefined;
  const sx = o.quant === 'w8a8' ? createBuffer(ctx, maxT * 4, 'w8a8-sx') : undefined;
  const builder: KernelBuilder = {
    // A linear with what it can fuse: W8A8 fuses nothing (its activations are quantized first).
    linear: (m, fuse = {}) =>
      xq && sx ? new W8A8Linear(ctx, binds, m, xq, sx) : matmulLinear(ctx, binds, m, { maxM: maxT, ...fuse }),
    norm: (weight) => (normFused ? { norm: { weight, eps } } : {}),
  };
  const steering = steeringKernels(ctx, binds, spec, o.steer);
  return {
    // Gemma: the row times √H (the kernel rounds the scale to f32).
    embed: new Embedding(ctx, binds, w.embed, spec.embedScale ? { scale: Math.sqrt(H) } : {}),
    norm: new RmsNorm(ctx, binds, { n: H, eps }),
    qNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    kNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    attn: layerAttentionKernels(ctx, binds, spec, f, o.kv),
    add: new AddInPlace(ctx, binds),
    addQ: new AddInPlace(ctx, binds),
    addKv: new AddInPlace(ctx, binds),
    silu: new SiluMul(ctx, binds, f.Ip, false, spec.activation === 'gelu_tanh' ? 'gelu' : 'silu'),
    normAdd: spec.sandwichNorms ? new RmsNormAdd(ctx, binds, { n: H, eps }) : undefined,
    gather: new GatherRows(ctx, binds, H),
    // A weight-only matmul whatever the quant (W8A8 covers the `*_proj` linears only), with the
    // final norm folded in.
    lmHead: matmulLinear(ctx, binds, w.lmHead, { maxM: maxT, norm: { weight: w.norm, eps } }),
    // One instance per mode, each with its own uniform block: switching modes rewrites nothing.
    sample: serial
      ? {
          greedy: new Sampler(ctx, binds, { vocab: V, greedy: true }),
          gumbel: new Sampler(ctx, binds, { vocab: V, greedy: false }),
        }
      : {
          greedy: new SplitSampler(ctx, binds, { vocab: V, maxRows: maxT }),
          gumbel: new SplitSampler(ctx, binds, { vocab: V, maxRows: maxT }),
        },
    mask: new TokenMask(ctx, binds, V),
    blocks: w.blocks.map((b) => blockKernels(builder, b)),
    steer: steering.layers,
    rot: rotationKernels(ctx, binds, spec, o.rotate, f.Ip),
    gate: f.gate ? new SigmoidGate(ctx, binds, f.gate) : undefined,
    deltaNet: spec.linearAttention ? new DeltaNet(ctx, binds, deltaNetShape(spec), maxT) : undefined,
    gatherProj: spec.linearAttention ? new GatherRows(ctx, binds, projWidth(spec)) : undefined,
    shortConv: spec.shortConv ? new ShortConv(ctx, binds, shortConvShape(spec), maxT) : undefined,
    gatherConv: spec.shortConv ? new GatherRows(ctx, binds, 3 * H) : undefined,
    scratch: [xq, sx, steering.vectors].filter((b) => b !== undefined),
  };
}

/**
 * Per layer, the RoPE, KV and attention kernels of its kind: one set per distinct (window, ring,
 * RoPE) among the attention layers (one for most models; Gemma 3: sliding and global), undefined
 * for a layer of another kind.
 */
function layerAttentionKernels(
  ctx: GpuContext,
  binds: BindGroupCache,
  spec: ModelSpec,
  f: ForwardShapes,
  kv: KvShape,
): (LayerAttentionKernels | undefined)[] {
  const kinds = Array.from({ length: spec.layers }, (_, layer) =>
    layerKind(spec, layer) === 'attention' ? attentionKind(spec, f, kv, layer) : undefined,
  );
  // Passes run in order, so every kind shares one buffer of chunk partials: the first made, of a
  // kind without a ring where there is one (a ring's are sized by its window, too few for the rest).
  const distinct = new Map<string, AttentionKind>();
  for (const k of kinds) if (k) distinct.set(JSON.stringify(k), k);
  // Rings last: the first instance made (a kind without a ring where there is one) owns the partials.
  const keys = [...distinct.keys()].sort(
    (a, b) => Number(distinct.get(a)!.kv.ring !== undefined) - Number(distinct.get(b)!.kv.ring !== undefined),
  );
  const sets = new Map<string, LayerAttentionKernels>();
  let partials: GPUBuffer | undefined;
  for (const key of keys) {
    const kind = distinct.get(key)!;
    const attention = new SplitAttention(ctx, binds, kind.attention, partials);
    partials ??= attention.partials;
    sets.set(key, {
      kv: kind.kv,
      rope: new Rope(ctx, binds, kind.rope),
      qkvRope: new QkvRope(ctx, binds, { ...f.qkvRope, ...kind.rope, ring: kind.kv.ring }),
      kvWrite: new KvWrite(ctx, binds, kind.kv),
      compact: new KvCompact(ctx, binds, kind.kv),
      attention,
    });
  }
  return kinds.map((k) => (k === undefined ? undefined : sets.get(JSON.stringify(k))));
}

/** One kind of attention layer: its KV cache shape, RoPE options and attention shape. */
interface AttentionKind {
  kv: KvShape;
  rope: RopeOptions;
  attention: SplitAttentionShape;
}

/**
 * Layer `layer`'s kind: the forward's RoPE and attention with the layer's own RoPE and window, and
 * its KV shape (a sliding layer's ring, see layerKvShape).
 */
function attentionKind(spec: ModelSpec, f: ForwardShapes, kv: KvShape, layer: number): AttentionKind {
  const { window, rope } = layerAttention(spec, layer);
  const shape = layerKvShape(spec, kv, layer);
  return {
    kv: shape,
    rope: rope ? { ...f.rope, ...ropeOptionsOf(rope) } : { ...f.rope, none: true, attentionFactor: 1 },
    attention:
      window === undefined
        ? f.attention
        : { ...f.attention, window, ...(shape.ring ? { ring: shape.ring } : {}) },
  };
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

/** The sizes and kernel options {@link buildKernels} derives from the model and its placement. */
interface ForwardShapes {
  H: number;
  V: number;
  qWidth: number;
  /** The MLP width as the weights were packed (padded for a rotation). */
  Ip: number;
  maxT: number;
  eps: number;
  /**
   * The input norm and the post-attention norm fold into the matmuls after them, unless a rotation
   * of their output sits in between (R·norm(x) is the linears' input then).
   */
  normFused: boolean;
  attention: SplitAttentionShape;
  rope: RopeOptions;
  qkvRope: QkvRopeOptions;
  /** An output-gated model's gate: attention [T, qWidth] · sigmoid(the gate of the q | k | v | gate row). */
  gate: SigmoidGateOptions | undefined;
}

function forwardShapes(spec: ModelSpec, o: BuildKernelsOptions): ForwardShapes {
  const D = spec.headDim;
  const maxT = MAX_FORWARD_TOKENS;
  const eps = spec.rmsEps;
  // One RoPE for the unfused kernel and the fused one (partial rotary included).
  const rope: RopeOptions = {
    heads: spec.heads,
    kvHeads: spec.kvHeads,
    headDim: D,
    ...ropeOptionsOf(spec.rope),
    ...(spec.queryTemperature ? { queryTemperature: spec.queryTemperature } : {}),
  };
  return {
    H: spec.hidden,
    V: spec.vocabSize,
    qWidth: deriveSizes(spec).qWidth,
    Ip: packedWidth(spec.intermediate, rotationFor(o.rotate, spec.intermediate)),
    maxT,
    eps,
    normFused: rotationFor(o.rotate, spec.hidden) === 'none',
    attention: {
      heads: spec.heads,
      kvHeads: spec.kvHeads,
      headDim: D,
      capacity: o.kv.capacity,
      format: o.kv.format,
      maxRows: maxT,
      firstSlot: o.firstSlot,
      scale: attentionScale(spec),
    },
    rope,
    qkvRope: {
      ...rope,
      capacity: o.kv.capacity,
      format: o.kv.format,
      bias: spec.qkvBias,
      qkNormEps: spec.qkNorm ? eps : undefined,
      outputGate: spec.outputGate,
    },
    gate: spec.outputGate ? gateOptions(spec) : undefined,
  };
}

/** Where the gate stands in the q | k | v | gate row (see QkvRope's outputGate). */
function gateOptions(spec: ModelSpec): SigmoidGateOptions {
  const { qWidth, kvWidth } = deriveSizes(spec);
  return { n: qWidth, stride: 2 * qWidth + 2 * kvWidth, offset: qWidth + 2 * kvWidth };
}

/**
 * Compiles every pipeline the forward uses, at once. Matrices may differ in format (a model placed
 * as stored, see placeWeights): one pipeline each. Each (format, shape) the matmuls meet once: the
 * shape picks the split-K load width and lanes (wideLoads, splitLanes), so only the variants the
 * model's matrices run are compiled up front.
 */
async function prepareKernels(
  ctx: GpuContext,
  spec: ModelSpec,
  w: GpuWeights,
  o: BuildKernelsOptions,
  f: ForwardShapes,
): Promise<void> {
  const { maxT, normFused } = f;
  const linears = w.blocks.flatMap(blockMatrices);
  const linearFormats = [...new Set(linears.map((m) => m.format))];
  const shapes = (ms: readonly GpuMatrix[]) => [
    ...new Map(
      ms.map((m) => [`${m.format}:${m.rows}:${m.cols}`, { format: m.format, rows: m.rows, cols: m.cols }]),
    ).values(),
  ];
  const serial = ctx.kernels === 'serial';
  const gelu = spec.activation === 'gelu_tanh';
  const act = gelu ? 'gelu' : 'silu';
  await Promise.all([
    RmsNorm.prepare(ctx),
    Embedding.prepare(ctx, w.embed.format, spec.embedScale ? Math.sqrt(spec.hidden) : 1),
    Rope.prepare(ctx, spec.rope.layout, ropeAttentionFactor(spec.rope), spec.queryTemperature),
    AddInPlace.prepare(ctx),
    SiluMul.prepare(ctx, false, gelu ? 'gelu' : 'silu'),
    ...(spec.sandwichNorms ? [RmsNormAdd.prepare(ctx)] : []),
    GatherRows.prepare(ctx),
    ...shapes([w.lmHead, ...linears]).map(({ format, ...shape }) => prepareMatmul(ctx, format, shape, maxT)),
    // The fused variants the layers use (see the builder's `linear`): weight-only arithmetic only.
    ...(o.quant === 'w8a8'
      ? []
      : shapes(linears).flatMap(({ format, ...shape }) => [
          ...(normFused ? [prepareMatmul(ctx, format, shape, maxT, { norm: {} })] : []),
          prepareMatmul(ctx, format, shape, maxT, { epilogue: 'add' }),
          prepareMatmul(
            ctx,
            format,
            shape,
            maxT,
            normFused ? { norm: {}, epilogue: act } : { epilogue: act },
          ),
        ])),
    ...(o.quant === 'w8a8' ? linearFormats.map((fmt) => prepareW8A8(ctx, fmt, maxT)) : []),
    KvWrite.prepare(ctx, o.kv.format),
    KvCompact.prepare(ctx),
    // Every kind of attention layer's (a window and RoPE change uniforms and tables, not pipelines).
    SplitAttention.prepare(ctx, f.attention),
    QkvRope.prepare(ctx, f.qkvRope),
    prepareMatmul(ctx, w.lmHead.format, w.lmHead, maxT, { norm: {} }),
    ...(serial ? [Sampler.prepare(ctx, true), Sampler.prepare(ctx, false)] : [SplitSampler.prepare(ctx)]),
    TokenMask.prepare(ctx),
    ...(o.steer ? [Steer.prepare(ctx)] : []),
    ...(f.gate ? [SigmoidGate.prepare(ctx)] : []),
    ...(spec.linearAttention ? [DeltaNet.prepare(ctx, deltaNetShape(spec))] : []),
    ...(spec.shortConv ? [ShortConv.prepare(ctx, shortConvShape(spec))] : []),
  ]);
}

/**
 * Activation steering per layer, and the one [layers, H] buffer of its vectors (layer l's at
 * l * H, zeros where unused); no buffer without a plan.
 */
function steeringKernels(
  ctx: GpuContext,
  binds: BindGroupCache,
  spec: ModelSpec,
  plan: SteerPlan | undefined,
): { layers: LayerSteering[]; vectors: GPUBuffer | undefined } {
  const H = spec.hidden;
  const none = () => Array.from({ length: spec.layers }, () => ({ in: undefined, out: undefined }));
  if (!plan) return { layers: none(), vectors: undefined };
  const values = new Float32Array(spec.layers * H);
  plan.vectors.forEach((r, l) => {
    if (r) values.set(r, l * H);
  });
  const vectors = uploadBuffer(ctx, values, 'steer-vectors');
  const at = (l: number, on: boolean) =>
    plan.vectors[l] && on
      ? new Steer(ctx, binds, vectors, { hidden: H, offset: l * H, mode: plan.mode, scale: plan.scale })
      : undefined;
  const layers = Array.from({ length: spec.layers }, (_, l) => ({
    in: at(l, plan.inputs ?? false),
    out: at(l, true),
  }));
  return { layers, vectors };
}

/**
 * One Hadamard kernel per rotated width (a single instance where widths agree: same uniforms), and
 * the buffer their outputs share; undefined when nothing is rotated. `Ip` is the packed MLP width.
 */
function rotationKernels(
  ctx: GpuContext,
  binds: BindGroupCache,
  spec: ModelSpec,
  rotate: RotationChoice,
  Ip: number,
): Rotations | undefined {
  const H = spec.hidden;
  const { qWidth } = deriveSizes(spec);
  if (![H, qWidth, spec.intermediate].some((n) => rotationFor(rotate, n) === 'hadamard')) return undefined;
  const maxT = MAX_FORWARD_TOKENS;
  const byWidth = new Map<number, Hadamard>();
  // `width` is the linear's input width, `n` what it is padded to (only the MLP's may differ).
  const at = (width: number, n = width): Hadamard | undefined => {
    if (rotationFor(rotate, width) === 'none') return undefined;
    const h = byWidth.get(n) ?? new Hadamard(ctx, binds, n, ROTATION_SEED, { maxM: maxT });
    byWidth.set(n, h);
    return h;
  };
  const out = createBuffer(ctx, maxT * Math.max(H, qWidth, Ip) * 4, 'rotated-input');
  return { hidden: at(H), heads: at(qWidth), mlp: at(spec.intermediate, Ip), out };
}

/**
 * Destroys the linears, the LM head, the rotations and the shared scratch buffers. The other
 * kernels' small uniform buffers are not destroyed here (as before the runner was split); they go
 * with the device.
 */
export function destroyKernels(k: Kernels): void {
  for (const b of k.blocks) destroyBlockKernels(b);
  for (const set of new Set(k.attn)) set?.attention.destroy();
  k.lmHead.destroy();
  k.sample.greedy.destroy();
  k.sample.gumbel.destroy();
  for (const b of k.scratch) b.destroy();
  if (k.rot) for (const r of new Set([k.rot.hidden, k.rot.heads, k.rot.mlp])) r?.destroy();
  k.rot?.out.destroy();
  k.gate?.destroy();
  k.deltaNet?.destroy();
  k.shortConv?.destroy();
}
