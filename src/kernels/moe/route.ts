// The mixture layer's route kernel (shaders/moe/route.wgsl): in one dispatch, the block's input
// norm, the router's logits, each row's chosen experts and weights, the shared expert's gate and
// the routing table (table.ts) that the expert matmuls and the combine kernel read (Gemma 4: the
// router through its own scaled norm, and each expert's scale on its weight); and its plain-TS
// reference, routeRef and routeTableRef after the norm and the router.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders-moe.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { rmsNormRef } from '../norm/rmsnorm.js';
import { type RouteOptions, type Routing, routeRef } from './route-ref.js';
import { routeTableLayout, routeTableRef, routeWeightWords } from './table.js';

/** Threads of the one workgroup: RmsNorm's, so that h has its sum order. */
const WG = 64;
const Params = defineUniforms('Params', {
  rows: 'u32',
  hidden: 'u32',
  eps: 'f32',
  renormEps: 'f32',
  routedScale: 'f32',
  routerScale: 'f32',
});

/**
 * The factor on the router norm's learned scale (1/√H, Gemma 4's `hidden_size ** -0.5`), as the
 * kernel takes it: rounded to f32 once.
 */
export function routerScaleOf(hidden: number): number {
  return Math.fround(1 / Math.sqrt(hidden));
}

/** Static options of {@link MoeRoute}: the routing (a spec's `MoeSpec` is one) and the sizes. */
export interface MoeRouteOptions extends RouteOptions {
  /** Width of a row (the hidden size). */
  readonly hidden: number;
  /** Rows of a pass, at most (≤ 64). */
  readonly maxRows: number;
  /** The norm's epsilon. */
  readonly eps: number;
  /** A selection bias [E] is added to the scores for choosing only. */
  readonly bias: boolean;
  /** A shared expert runs on every row, weighted by sigmoid(sharedRouter · h). */
  readonly shared: boolean;
  /**
   * The router reads its own norm of x, rmsnorm(x) · scale · 1/√H ({@link routerScaleOf}), the
   * learned scale [H] at the head of the scales buffer (Gemma 4's `router.scale`); not h.
   */
  readonly routerNorm: boolean;
  /** Each chosen expert's weight is multiplied by its scale [E], the tail of the scales buffer. */
  readonly expertScale: boolean;
}

/** The buffers of one {@link MoeRoute.encode}. */
export interface MoeRouteBuffers {
  /** [T, H] the residual stream. */
  readonly x: GPUBuffer;
  /** [H] the norm's weight as it multiplies. */
  readonly norm: GPUBuffer;
  /** [E, H] f32. */
  readonly router: GPUBuffer;
  /** [E] when the options name a bias. */
  readonly bias?: GPUBuffer;
  /** [H] the shared expert's gate, when the options name a shared expert. */
  readonly sharedRouter?: GPUBuffer;
  /** [H] the router norm's scale (`routerNorm`), then [E] the experts' scales (`expertScale`). */
  readonly scales?: GPUBuffer;
  /** [T, H] written: the normed rows. */
  readonly h: GPUBuffer;
  /** The routing table (table.ts), {@link routeTableLayout} words. */
  readonly table: GPUBuffer;
  /** f32 {@link routeWeightWords} written: each choice's weight, then each row's shared weight. */
  readonly weights: GPUBuffer;
}

/** What the route kernel computes, by its reference. */
export interface MoeRouteResult {
  /** [T, H] */
  readonly h: Float32Array;
  /** [T, E] the router's logits, f32-rounded. */
  readonly logits: Float32Array;
  readonly routing: Routing;
  /** [T] sigmoid(sharedRouter · h), when there is a shared expert. */
  readonly shared: Float32Array | undefined;
  /** The routing table of `routing.experts`. */
  readonly table: Uint32Array;
}

/**
 * Reference of {@link MoeRoute} on x [T, H]: the sums of the norm and the router in f64; `scales`
 * as the scales buffer ([H] then [E], each where the options name it).
 */
export function moeRouteRef(
  o: MoeRouteOptions,
  x: Float32Array,
  norm: Float32Array,
  router: Float32Array,
  bias?: Float32Array,
  sharedRouter?: Float32Array,
  scales?: Float32Array,
): MoeRouteResult {
  const H = o.hidden;
  const E = o.experts;
  const T = x.length / H;
  const h = rmsNormRef(x, norm, { n: H, eps: o.eps });
  const dot = (w: Float32Array, e: number, t: number, rows = h) => {
    let acc = 0;
    for (let i = 0; i < H; i++) acc += w[e * H + i]! * rows[t * H + i]!;
    return acc;
  };
  const routerIn = o.routerNorm
    ? rmsNormRef(
        x,
        scales!.subarray(0, H).map((s) => s * routerScaleOf(H)),
        { n: H, eps: o.eps },
      )
    : h;
  const logits = new Float32Array(T * E);
  for (let t = 0; t < T; t++) for (let e = 0; e < E; e++) logits[t * E + e] = dot(router, e, t, routerIn);
  const at = o.routerNorm ? H : 0;
  const routing = routeRef(logits, o, bias, o.expertScale ? scales!.subarray(at, at + E) : undefined);
  const shared = sharedRouter
    ? Float32Array.from({ length: T }, (_, t) => 1 / (1 + Math.exp(-dot(sharedRouter, 0, t))))
    : undefined;
  return { h, logits, routing, shared, table: routeTableRef(o, routing.experts) };
}

function routeWgsl(o: MoeRouteOptions): WgslVariant {
  const L = routeTableLayout(o);
  return wgslVariant(shaders.route, Params, {
    WG,
    E: o.experts,
    K: o.topK,
    MAX_ROWS: o.maxRows,
    CHOICES: o.maxRows * o.topK,
    MEMBERS: L.members,
    POSITIONS: L.positions,
    SOFTMAX: o.scoring === 'softmax',
    RENORM: o.renormalize,
    BIAS: o.bias,
    SHARED: o.shared,
    SHARED_BINDING: o.bias ? 9 : 8,
    ROUTER_NORM: o.routerNorm,
    EXPERT_SCALE: o.expertScale,
    SCALES: o.routerNorm || o.expertScale,
    SCALES_BINDING: 8 + Number(o.bias) + Number(o.shared),
    H: o.hidden,
  });
}

/**
 * Workgroup bytes the kernel declares: the reduction, each choice's expert, two words per expert
 * (and each row's 1/rms for the router's own norm).
 */
function workgroupBytes(o: MoeRouteOptions): number {
  return 4 * (WG + o.maxRows * o.topK + 2 * o.experts + (o.routerNorm ? o.maxRows : 0));
}

/** Throws unless the sizes are positive integers in range and the scalars finite. */
function checkOptions(o: MoeRouteOptions): void {
  const ints = { experts: o.experts, topK: o.topK, hidden: o.hidden, maxRows: o.maxRows };
  for (const [name, v] of Object.entries(ints))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`MoeRoute: ${name} must be a positive integer, got ${v}`);
  if (o.topK > o.experts)
    throw new InvalidInputError(`MoeRoute: topK ${o.topK} exceeds the ${o.experts} experts`);
  if (o.maxRows > WG) throw new InvalidInputError(`MoeRoute: maxRows must be ≤ ${WG}, got ${o.maxRows}`);
  if (!(o.eps >= 0)) throw new InvalidInputError(`MoeRoute: eps must be ≥ 0, got ${o.eps}`);
  if (!(o.renormEps >= 0)) throw new InvalidInputError(`MoeRoute: renormEps must be ≥ 0, got ${o.renormEps}`);
  if (!Number.isFinite(o.routedScale))
    throw new InvalidInputError(`MoeRoute: routedScale must be finite, got ${o.routedScale}`);
}

/**
 * A mixture layer's routing on the GPU (route.wgsl), one workgroup for T ≤ maxRows rows: h =
 * rmsnorm(x) · g (RmsNorm's bits), the router's logits (of h, or of the router's own scaled norm
 * of x), each row's topK experts by score (softmax or sigmoid) plus the optional selection bias,
 * their weights (renormalised, scaled, times each expert's scale where given), the shared
 * expert's sigmoid gate, and the routing table of table.ts. Its reference is {@link moeRouteRef}.
 * The instance owns its scratch ([maxRows, E] f32: the logits, then the scores), written and read
 * within one dispatch, so any number of its dispatches may share it in a pass.
 */
export class MoeRoute {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly scratch: GPUBuffer;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link MoeRoute.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: MoeRouteOptions,
  ) {
    checkOptions(options);
    const bytes = workgroupBytes(options);
    const limit = ctx.limits.maxComputeWorkgroupStorageSize;
    if (bytes > limit)
      throw new InvalidInputError(
        `MoeRoute: ${options.experts} experts × top ${options.topK} over ${options.maxRows} rows need ${bytes} bytes of workgroup memory, the device has ${limit}`,
      );
    // x, g, router, h, scratch, table, weights, and the optional bias, shared router and scales
    // (Gemma 4's router norm and expert scales, one buffer): 9 with two of them, past WebGPU's
    // default of 8 (most adapters offer more, and the device takes their most). Gemma 4 binds 8.
    const scales = options.routerNorm || options.expertScale;
    const storage = 7 + Number(options.bias) + Number(options.shared) + Number(scales);
    const most = ctx.limits.maxStorageBuffersPerShaderStage;
    if (storage > most)
      throw new InvalidInputError(
        `MoeRoute: ${storage} storage buffers with bias ${options.bias}, shared ${options.shared} and scales ${scales}, the device binds ${most}`,
      );
    this.pipeline = ctx.pipelines.get('moe-route', ...routeWgsl(options));
    this.uniform = new UniformSlot(ctx, Params, 'moe-route-params');
    this.scratch = createBuffer(ctx, options.maxRows * options.experts * 4, 'moe-route-scratch');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, options: MoeRouteOptions): Promise<void> {
    checkOptions(options);
    await ctx.pipelines.prepare('moe-route', ...routeWgsl(options));
  }

  /** Encodes the routing of rows x [T, H] (1 ≤ T ≤ maxRows). */
  encode(pass: GPUComputePassEncoder, b: MoeRouteBuffers, T: number): void {
    const o = this.options;
    this.check(b, T);
    this.uniform.write({
      rows: T,
      hidden: o.hidden,
      eps: o.eps,
      renormEps: o.renormEps,
      routedScale: o.routedScale,
      routerScale: routerScaleOf(o.hidden),
    });
    const buffers = [this.uniform.buffer, b.x, b.norm, b.router, b.h, this.scratch, b.table, b.weights];
    if (b.bias) buffers.push(b.bias);
    if (b.sharedRouter) buffers.push(b.sharedRouter);
    if (b.scales) buffers.push(b.scales);
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, buffers));
    this.ctx.counter.dispatch(pass, 1, 1);
  }

  /** Throws unless T is in range, the optional buffers match the options, and each buffer holds its bytes. */
  private check(b: MoeRouteBuffers, T: number): void {
    const o = this.options;
    if (!Number.isInteger(T) || T < 1 || T > o.maxRows)
      throw new InvalidInputError(`MoeRoute: T must be in 1 .. ${o.maxRows}, got ${T}`);
    if (Boolean(b.bias) !== o.bias)
      throw new InvalidInputError(
        `MoeRoute: bias buffer ${b.bias ? 'given' : 'missing'}, options say ${o.bias}`,
      );
    if (Boolean(b.sharedRouter) !== o.shared)
      throw new InvalidInputError(
        `MoeRoute: sharedRouter buffer ${b.sharedRouter ? 'given' : 'missing'}, options say ${o.shared}`,
      );
    if (Boolean(b.scales) !== (o.routerNorm || o.expertScale))
      throw new InvalidInputError(
        `MoeRoute: scales buffer ${b.scales ? 'given' : 'missing'}, options say routerNorm ${o.routerNorm}, expertScale ${o.expertScale}`,
      );
    if (b.x === b.h) throw new InvalidInputError('MoeRoute: x and h must be different buffers');
    const words: [string, GPUBuffer | undefined, number][] = [
      ['x', b.x, T * o.hidden],
      ['norm', b.norm, o.hidden],
      ['router', b.router, o.experts * o.hidden],
      ['bias', b.bias, o.experts],
      ['sharedRouter', b.sharedRouter, o.hidden],
      ['scales', b.scales, (o.routerNorm ? o.hidden : 0) + (o.expertScale ? o.experts : 0)],
      ['h', b.h, T * o.hidden],
      ['table', b.table, routeTableLayout(o).words],
      ['weights', b.weights, routeWeightWords(o, o.shared)],
    ];
    for (const [name, buf, n] of words)
      if (buf && buf.size < n * 4)
        throw new InvalidInputError(`MoeRoute: ${name} holds ${buf.size} bytes, need ${n * 4}`);
  }

  destroy(): void {
    this.uniform.destroy();
    this.scratch.destroy();
  }
}
