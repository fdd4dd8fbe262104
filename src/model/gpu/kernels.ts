// The runner's kernels: the ones every model uses (embedding, the common norm and add, the LM
// head, the samplers, a grammar's mask, steering, input rotations), and each block bound through
// its kind (its linears, its kind's per-model kernels and its state). Pipelines are compiled before
// the kernels that use them are made.
import { createBuffer, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { AddInPlace, GatherRows } from '../../kernels/elementwise/elementwise.js';
import type { Softcap } from '../../kernels/elementwise/scale.js';
import { Embedding } from '../../kernels/embed/embed.js';
import { Hadamard } from '../../kernels/hadamard/hadamard.js';
import type { KvShape } from '../../kernels/kv/kv.js';
import { loadPrefillGemm, Matmul, prepareMatmul } from '../../kernels/matmul/matmul.js';
import type { GpuMatrix } from '../../kernels/matmul/matrix.js';
import { gatedEpilogue, type MatmulOptions } from '../../kernels/matmul/variant.js';
import { RmsNorm, RmsNormAdd } from '../../kernels/norm/rmsnorm.js';
import { TokenMask } from '../../kernels/sample/mask.js';
import { Sampler, SplitSampler } from '../../kernels/sample/sample.js';
import { Steer, type SteerPlan } from '../../kernels/steer/steer.js';
import { MatmulW8A8, prepareW8A8, QuantizeAct } from '../../kernels/w8a8/w8a8.js';
import {
  packedWidth,
  type Quant,
  ROTATION_SEED,
  type RotationChoice,
  rotationFor,
} from '../../quant/pack.js';
import {
  type BoundBlock,
  type CommonKernels,
  type KernelBuilder,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  type Rotations,
} from '../blocks/gpu.js';
import { deriveSizes, layerSpec, type ModelSpec } from '../spec/spec.js';
import type { GpuWeights } from './weights.js';

/** A {@link Matmul} as a {@link Linear}. */
function matmulLinear(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, o: MatmulOptions): Linear {
  const mm = new Matmul(ctx, binds, w, o);
  const gated = o.epilogue !== undefined && gatedEpilogue(o.epilogue);
  const fused = { norm: o.norm !== undefined, add: o.epilogue === 'add', gated };
  return {
    fused,
    encode: (pass, x, y, M, prefill) => mm.encode(pass, x, y, M, 0, prefill),
    destroy: () => mm.destroy(),
  };
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

/** The runner's kernels: each instance made once, for up to MAX_FORWARD_TOKENS rows. */
export interface Kernels {
  /** What every kind's blocks share. */
  common: CommonKernels;
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
  /** c · tanh(logits / c) over the scored rows (Gemma 4's final-logit soft-capping). */
  softcap: Softcap | undefined;
  mask: TokenMask;
  /** Each block bound (its linears, its kind's kernels, its state), in forward order. */
  blocks: BoundBlock[];
  /** Per layer, its activation steering. */
  steer: LayerSteering[];
  scratch: GPUBuffer[]; // buffers the kernels share (W8A8 activations, steering vectors)
  /** What the kinds made once per model (their kernels and scratch rows), destroyed with these. */
  kinds: (() => void)[];
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
 * {@link MAX_FORWARD_TOKENS} rows: the common ones, then each block's through its kind (which
 * compiles its own), with its state.
 */
export async function buildKernels(
  ctx: GpuContext,
  spec: ModelSpec,
  w: GpuWeights,
  o: BuildKernelsOptions,
): Promise<Kernels> {
  const binds = new BindGroupCache(ctx.device);
  const H = spec.hidden;
  const V = spec.vocabSize;
  const maxT = MAX_FORWARD_TOKENS;
  const eps = spec.rmsEps;
  const Ip = packedWidth(spec.intermediate, rotationFor(o.rotate, spec.intermediate));
  // Every layer's attention and MLP widths (Gemma 4's full layers and wide MLPs differ), padded.
  const widths = layerWidths(spec, o.rotate);
  // The input norm and the post-attention norm fold into the matmuls after them, unless a
  // rotation of their output sits in between (R·norm(x) is the linears' input then).
  const normFused = rotationFor(o.rotate, H) === 'none';
  await prepareKernels(ctx, spec, w, o, normFused);
  const serial = ctx.kernels === 'serial';
  // The GPU forms' prompt chunks take the prefill GEMM (compiled when a prefill first runs it).
  if (!serial) await loadPrefillGemm();
  const { qWidth } = deriveSizes(spec);
  // W8A8 scratch: int8 activations [maxT, maxK] packed 4 per u32, and one scale per row.
  const maxK = Math.max(H, Ip, qWidth, ...widths.map((w) => w.padded));
  const xq = o.quant === 'w8a8' ? createBuffer(ctx, maxT * maxK, 'w8a8-xq') : undefined;
  const sx = o.quant === 'w8a8' ? createBuffer(ctx, maxT * 4, 'w8a8-sx') : undefined;
  const builder: KernelBuilder = {
    // A linear with what it can fuse: W8A8 fuses nothing (its activations are quantized first).
    linear: (m, fuse = {}) =>
      xq && sx ? new W8A8Linear(ctx, binds, m, xq, sx) : matmulLinear(ctx, binds, m, { maxM: maxT, ...fuse }),
    weightOnly: (m, fuse = {}) => matmulLinear(ctx, binds, m, { maxM: maxT, ...fuse }),
    norm: (weight) => (normFused ? { norm: { weight, eps } } : {}),
  };
  const common: CommonKernels = {
    norm: new RmsNorm(ctx, binds, { n: H, eps }),
    add: new AddInPlace(ctx, binds),
    normAdd: spec.sandwichNorms ? new RmsNormAdd(ctx, binds, { n: H, eps }) : undefined,
    rot: rotationKernels(ctx, binds, spec, o.rotate, widths),
  };
  const kinds: (() => void)[] = [];
  const c: KindContext = {
    ctx,
    binds,
    spec,
    quant: o.quant,
    rotate: o.rotate,
    kv: o.kv,
    Ip,
    normFused,
    firstSlot: o.firstSlot,
    builder,
    common,
    onDestroy: (destroy) => kinds.push(destroy),
  };
  const blocks: BoundBlock[] = [];
  for (const b of w.blocks) blocks.push(await b.bind(c));
  const steering = steeringKernels(ctx, binds, spec, o.steer);
  return {
    common,
    // Gemma: the row times √H (the kernel rounds the scale to f32).
    embed: new Embedding(ctx, binds, w.embed, spec.embedScale ? { scale: Math.sqrt(H) } : {}),
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
    softcap: spec.logitSoftcap === undefined ? undefined : await softcapKernel(ctx, binds, spec.logitSoftcap),
    blocks,
    steer: steering.layers,
    scratch: [xq, sx, steering.vectors].filter((b) => b !== undefined),
    kinds,
  };
}

/**
 * Compiles the pipelines of the common kernels and of every matmul, at once. Matrices may differ
 * in format (a model placed as stored, see placeWeights): one pipeline each. Each (format, shape)
 * the matmuls meet once: the shape picks the split-K load width and lanes (wideLoads, splitLanes),
 * so only the variants the model's matrices run are compiled up front. (Each kind compiles its own
 * kernels' pipelines when its first block binds.)
 */
async function prepareKernels(
  ctx: GpuContext,
  spec: ModelSpec,
  w: GpuWeights,
  o: BuildKernelsOptions,
  normFused: boolean,
): Promise<void> {
  const maxT = MAX_FORWARD_TOKENS;
  const linears = w.blocks.flatMap((b) => b.matrices);
  const linearFormats = [...new Set(linears.map((m) => m.format))];
  const shapes = (ms: readonly GpuMatrix[]) => [
    ...new Map(
      ms.map((m) => [`${m.format}:${m.rows}:${m.cols}`, { format: m.format, rows: m.rows, cols: m.cols }]),
    ).values(),
  ];
  const serial = ctx.kernels === 'serial';
  const act = spec.activation === 'gelu_tanh' ? 'gelu' : 'silu';
  await Promise.all([
    RmsNorm.prepare(ctx),
    Embedding.prepare(ctx, w.embed.format, spec.embedScale ? Math.sqrt(spec.hidden) : 1),
    AddInPlace.prepare(ctx),
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
    prepareMatmul(ctx, w.lmHead.format, w.lmHead, maxT, { norm: {} }),
    ...(serial ? [Sampler.prepare(ctx, true), Sampler.prepare(ctx, false)] : [SplitSampler.prepare(ctx)]),
    TokenMask.prepare(ctx),
    ...(o.steer ? [Steer.prepare(ctx)] : []),
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

/** The logits' soft-capping kernel (Gemma 4), loaded with the first model that has one. */
async function softcapKernel(ctx: GpuContext, binds: BindGroupCache, cap: number): Promise<Softcap> {
  const { Softcap } = await import('../../kernels/elementwise/scale.js');
  await Softcap.prepare(ctx);
  return new Softcap(ctx, binds, cap);
}

/** A linear input width some layer has (its attention output, its MLP), and what it is packed to. */
interface LayerWidth {
  readonly width: number;
  readonly padded: number;
}

/** Every distinct attention-output and MLP width of a model's layers, with its packed width. */
function layerWidths(spec: ModelSpec, rotate: RotationChoice): LayerWidth[] {
  const widths = new Set<number>();
  for (let l = 0; l < spec.layers; l++) {
    const s = layerSpec(spec, l);
    widths.add(deriveSizes(s).qWidth);
    widths.add(s.intermediate);
  }
  return [...widths].map((width) => ({ width, padded: packedWidth(width, rotationFor(rotate, width)) }));
}

/**
 * One Hadamard kernel per rotated width (a single instance where widths agree: same uniforms), and
 * the buffer their outputs share; undefined when nothing is rotated. `widths` are the layers'
 * attention-output and MLP widths with what each is packed to.
 */
function rotationKernels(
  ctx: GpuContext,
  binds: BindGroupCache,
  spec: ModelSpec,
  rotate: RotationChoice,
  widths: readonly LayerWidth[],
): Rotations | undefined {
  const H = spec.hidden;
  if (![H, ...widths.map((w) => w.width)].some((n) => rotationFor(rotate, n) === 'hadamard'))
    return undefined;
  const maxT = MAX_FORWARD_TOKENS;
  const byWidth = new Map<number, Hadamard>();
  // `width` is the linear's input width, `n` what it is padded to (only the MLP's may differ).
  const at = (width: number, n = width): Hadamard | undefined => {
    if (rotationFor(rotate, width) === 'none') return undefined;
    const h = byWidth.get(n) ?? new Hadamard(ctx, binds, n, ROTATION_SEED, { maxM: maxT });
    byWidth.set(n, h);
    return h;
  };
  const of = new Map(widths.map((w) => [w.width, at(w.width, w.padded)]));
  const out = createBuffer(ctx, maxT * Math.max(H, ...widths.map((w) => w.padded)) * 4, 'rotated-input');
  return {
    hidden: at(H),
    of(width) {
      if (!of.has(width)) throw new Error(`rotations: no layer has an input of width ${width}`);
      return of.get(width);
    },
    out,
    destroy() {
      for (const h of byWidth.values()) h.destroy();
      out.destroy();
    },
  };
}

/**
 * Destroys the blocks' linears and states, the kinds' per-model kernels, the LM head, the
 * rotations and the shared scratch buffers. The other kernels' small uniform buffers are not
 * destroyed here; they go with the device.
 */
export function destroyKernels(k: Kernels): void {
  for (const b of k.blocks) b.destroy();
  for (const destroy of k.kinds) destroy();
  k.lmHead.destroy();
  k.softcap?.destroy();
  k.sample.greedy.destroy();
  k.sample.gumbel.destroy();
  for (const b of k.scratch) b.destroy();
  k.common.rot?.destroy();
}
