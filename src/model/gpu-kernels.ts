import { deriveSizes, type ModelSpec } from '../formats/spec.js';
import { createBuffer, uploadBuffer } from '../gpu/buffers.js';
import type { GpuContext } from '../gpu/device.js';
import { SplitAttention } from '../kernels/attention/attention_split.js';
import { BindGroupCache } from '../kernels/bind.js';
import { AddInPlace, GatherRows, SiluMul } from '../kernels/elementwise/elementwise.js';
import { Embedding } from '../kernels/embed/embed.js';
import { Hadamard } from '../kernels/hadamard/hadamard.js';
import { KvCompact, type KvShape, KvWrite } from '../kernels/kv/kv.js';
import { type GpuMatrix, Matmul, type MatmulOptions, prepareMatmul } from '../kernels/matmul/matmul.js';
import { RmsNorm } from '../kernels/norm/rmsnorm.js';
import { QkvRope, type QkvRopeOptions } from '../kernels/rope/qkv_rope.js';
import { Rope } from '../kernels/rope/rope.js';
import { TokenMask } from '../kernels/sample/mask.js';
import { Sampler, SplitSampler } from '../kernels/sample/sample.js';
import { Steer, type SteerPlan } from '../kernels/steer/steer.js';
import { MatmulW8A8, prepareW8A8, QuantizeAct } from '../kernels/w8a8/w8a8.js';
import { packedWidth, type Quant, ROTATION_SEED, type RotationChoice, rotationFor } from '../quant/pack.js';
import type { KernelBuilder, Linear, Rotations, SharedKernels } from './blocks/gpu.js';
import {
  blockKernels,
  blockMatrices,
  destroyBlockKernels,
  type GpuBlockKernels,
} from './blocks/kinds-gpu.js';
import { type GpuWeights, MAX_FORWARD_TOKENS } from './gpu-weights.js';

/** A {@link Matmul} as a {@link Linear}. */
function matmulLinear(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, o: MatmulOptions): Linear {
  const mm = new Matmul(ctx, binds, w, o);
  const fused = { norm: o.norm !== undefined, add: o.epilogue === 'add', gated: o.epilogue === 'silu' };
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
  // Matrices may differ in format (a model placed as stored, see placeWeights): one pipeline each.
  const linears = w.blocks.flatMap(blockMatrices);
  const linearFormats = [...new Set(linears.map((m) => m.format))];
  // Each (format, shape) the matmuls meet once: the shape picks the split-K load width and lanes
  // (wideLoads, splitLanes), so only the variants the model's matrices run are compiled up front.
  const shapes = (ms: readonly GpuMatrix[]) => [
    ...new Map(
      ms.map((m) => [`${m.format}:${m.rows}:${m.cols}`, { format: m.format, rows: m.rows, cols: m.cols }]),
    ).values(),
  ];
  const { qWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const V = spec.vocabSize;
  const D = spec.headDim;
  const mlpRotation = rotationFor(o.rotate, spec.intermediate);
  const Ip = packedWidth(spec.intermediate, mlpRotation); // as the weights were packed
  const maxT = MAX_FORWARD_TOKENS;
  const eps = spec.rmsEps;
  const serial = ctx.kernels === 'serial';
  // The input norm and the post-attention norm fold into the matmuls after them, unless a rotation
  // of their output sits in between (R·norm(x) is the linears' input then).
  const normFused = rotationFor(o.rotate, H) === 'none';
  const attentionShape = {
    heads: spec.heads,
    kvHeads: spec.kvHeads,
    headDim: D,
    capacity: o.kv.capacity,
    format: o.kv.format,
    maxRows: maxT,
    ...(o.firstSlot ? { firstSlot: o.firstSlot } : {}),
  };
  const qkvRopeOptions: QkvRopeOptions = {
    heads: spec.heads,
    kvHeads: spec.kvHeads,
    headDim: D,
    theta: spec.rope.theta,
    layout: spec.rope.layout,
    ...(spec.rope.scaling ? { scaling: spec.rope.scaling } : {}),
    capacity: o.kv.capacity,
    format: o.kv.format,
    bias: spec.qkvBias,
    ...(spec.qkNorm ? { qkNormEps: eps } : {}),
  };
  await Promise.all([
    RmsNorm.prepare(ctx),
    Embedding.prepare(ctx, w.embed.format),
    Rope.prepare(ctx, spec.rope.layout),
    AddInPlace.prepare(ctx),
    SiluMul.prepare(ctx, false),
    GatherRows.prepare(ctx),
    ...shapes([w.lmHead, ...linears]).map(({ format, ...shape }) => prepareMatmul(ctx, format, shape, maxT)),
    // The fused variants the layers use (see `linear` below): weight-only arithmetic only.
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
            normFused ? { norm: {}, epilogue: 'silu' } : { epilogue: 'silu' },
          ),
        ])),
    ...(o.quant === 'w8a8' ? linearFormats.map((f) => prepareW8A8(ctx, f, maxT)) : []),
    KvWrite.prepare(ctx, o.kv.format),
    KvCompact.prepare(ctx),
    SplitAttention.prepare(ctx, attentionShape),
    QkvRope.prepare(ctx, qkvRopeOptions),
    prepareMatmul(ctx, w.lmHead.format, w.lmHead, maxT, { norm: {} }),
    ...(serial ? [Sampler.prepare(ctx, true), Sampler.prepare(ctx, false)] : [SplitSampler.prepare(ctx)]),
    TokenMask.prepare(ctx),
    ...(o.steer ? [Steer.prepare(ctx)] : []),
  ]);

  // W8A8 scratch: int8 activations [maxT, maxK] packed 4 per u32, and one scale per row.
  const maxK = Math.max(H, Ip, qWidth);
  const xq = o.quant === 'w8a8' ? createBuffer(ctx, maxT * maxK, 'w8a8-xq') : undefined;
  const sx = o.quant === 'w8a8' ? createBuffer(ctx, maxT * 4, 'w8a8-sx') : undefined;
  const builder: KernelBuilder = {
    // A linear with what it can fuse: W8A8 fuses nothing (its activations are quantized first).
    linear: (m, fuse = {}) =>
      xq && sx ? new W8A8Linear(ctx, binds, m, xq, sx) : matmulLinear(ctx, binds, m, { maxM: maxT, ...fuse }),
    norm: (weight) => (normFused ? { norm: { weight, eps } } : {}),
  };

  // Steering vectors: one [layers, H] buffer, layer l's vector at l * H (zeros where unused).
  const plan = o.steer;
  const steerVectors = plan && new Float32Array(spec.layers * H);
  plan?.vectors.forEach((r, l) => {
    if (r) steerVectors?.set(r, l * H);
  });
  const steerBuf = steerVectors && uploadBuffer(ctx, steerVectors, 'steer-vectors');
  const steerAt = (l: number, on: boolean) =>
    plan && steerBuf && plan.vectors[l] && on
      ? new Steer(ctx, binds, steerBuf, { hidden: H, offset: l * H, mode: plan.mode, scale: plan.scale })
      : undefined;

  // One Hadamard kernel per width (a single instance where widths agree: same uniforms).
  const rotations = (): Rotations => {
    const byWidth = new Map<number, Hadamard>();
    // `width` is the linear's input width, `n` what it is padded to (only the MLP's may differ).
    const at = (width: number, n = width): Hadamard | undefined => {
      if (rotationFor(o.rotate, width) === 'none') return undefined;
      const h = byWidth.get(n) ?? new Hadamard(ctx, binds, n, ROTATION_SEED, { maxM: maxT });
      byWidth.set(n, h);
      return h;
    };
    const out = createBuffer(ctx, maxT * Math.max(H, qWidth, Ip) * 4, 'rotated-input');
    return { hidden: at(H), heads: at(qWidth), mlp: at(spec.intermediate, Ip), out };
  };

  return {
    embed: new Embedding(ctx, binds, w.embed),
    norm: new RmsNorm(ctx, binds, { n: H, eps }),
    qNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    kNorm: spec.qkNorm ? new RmsNorm(ctx, binds, { n: D, eps }) : undefined,
    rope: new Rope(ctx, binds, {
      heads: spec.heads,
      kvHeads: spec.kvHeads,
      headDim: D,
      theta: spec.rope.theta,
      layout: spec.rope.layout,
      ...(spec.rope.scaling ? { scaling: spec.rope.scaling } : {}),
    }),
    kvWrite: new KvWrite(ctx, binds, o.kv),
    qkvRope: new QkvRope(ctx, binds, qkvRopeOptions),
    attention: new SplitAttention(ctx, binds, attentionShape),
    compact: new KvCompact(ctx, binds, o.kv),
    add: new AddInPlace(ctx, binds),
    addQ: new AddInPlace(ctx, binds),
    addKv: new AddInPlace(ctx, binds),
    silu: new SiluMul(ctx, binds, Ip, false),
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
    steer: Array.from({ length: spec.layers }, (_, l) => ({
      in: steerAt(l, plan?.inputs ?? false),
      out: steerAt(l, true),
    })),
    rot: [H, qWidth, spec.intermediate].some((n) => rotationFor(o.rotate, n) === 'hadamard')
      ? rotations()
      : undefined,
    scratch: [xq, sx, steerBuf].filter((b) => b !== undefined),
  };
}

/**
 * Destroys the linears, the LM head, the rotations and the shared scratch buffers. The other
 * kernels' small uniform buffers are not destroyed here (as before the runner was split); they go
 * with the device.
 */
export function destroyKernels(k: Kernels): void {
  for (const b of k.blocks) destroyBlockKernels(b);
  k.attention.destroy();
  k.lmHead.destroy();
  k.sample.greedy.destroy();
  k.sample.gumbel.destroy();
  for (const b of k.scratch) b.destroy();
  if (k.rot) for (const r of new Set([k.rot.hidden, k.rot.heads, k.rot.mlp])) r?.destroy();
  k.rot?.out.destroy();
}
