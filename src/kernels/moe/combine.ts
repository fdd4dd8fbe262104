// The mixture layer's combine kernel (shaders/moe/combine.wgsl): each row's chosen experts'
// outputs, weighted by their routing weights in choice order, and the shared expert's gated output,
// added into the residual stream (or, `store`, written to a row of their own: Gemma 4 norms the
// mixture's output before adding it); and its plain-TS reference.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders-moe.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { type RouteShape, routeTableLayout, routeWeightWords } from './table.js';

const WG = 64;
const Params = defineUniforms('Params', {
  rows: 'u32',
  hidden: 'u32',
  topK: 'u32',
  positions: 'u32',
  sharedAt: 'u32',
});

/** Static options of {@link MoeCombine}: the routing table's sizes, the row width, a shared expert. */
export interface MoeCombineOptions extends RouteShape {
  readonly hidden: number;
  /** A shared expert's output is added, weighted by the shared weights of the weights buffer. */
  readonly shared: boolean;
  /** x is written with the mixture's output rather than added into. */
  readonly store: boolean;
}

/** The buffers of one {@link MoeCombine.encode}. */
export interface MoeCombineBuffers {
  /** [T, H] the residual stream, added into (`store`: the mixture's output, written). */
  readonly x: GPUBuffer;
  /** The routing table (table.ts); its positions part is read. */
  readonly table: GPUBuffer;
  /** f32 {@link routeWeightWords}: each choice's weight, then each row's shared weight. */
  readonly weights: GPUBuffer;
  /** [T · k, H] the experts' outputs, in the table's sorted order. */
  readonly down: GPUBuffer;
  /** [T, H] the shared expert's output, when the options name one. */
  readonly shared?: GPUBuffer;
}

/**
 * Reference of {@link MoeCombine} on T = x.length / H rows: x [T, H] plus, per output, the sum in
 * f64 of each choice's weight times its expert's output row (down [T · k, H] at the choice's sorted
 * position in `table`), in choice order, then the shared weight times `shared` [T, H]; the sum is
 * rounded to f32, then added into x in f32 (`store`: the sum alone). `weights` is laid out as the
 * route kernel writes it.
 */
export function moeCombineRef(
  o: MoeCombineOptions,
  x: Float32Array,
  table: Uint32Array,
  weights: Float32Array,
  down: Float32Array,
  shared?: Float32Array,
): Float32Array {
  const H = o.hidden;
  const k = o.topK;
  const T = x.length / H;
  const positions = routeTableLayout(o).positions;
  const out = new Float32Array(x.length);
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < H; i++) {
      let acc = 0;
      for (let j = 0; j < k; j++) {
        const c = t * k + j;
        acc += weights[c]! * down[table[positions + c]! * H + i]!;
      }
      if (shared) acc += weights[o.maxRows * k + t]! * shared[t * H + i]!;
      out[t * H + i] = o.store ? Math.fround(acc) : x[t * H + i]! + Math.fround(acc);
    }
  }
  return out;
}

function combineWgsl(shared: boolean, store: boolean): WgslVariant {
  return wgslVariant(shaders.combine, Params, { WG, SHARED: shared, STORE: store });
}

/** Throws unless the sizes are positive integers. */
function checkOptions(o: MoeCombineOptions): void {
  const ints = { experts: o.experts, topK: o.topK, hidden: o.hidden, maxRows: o.maxRows };
  for (const [name, v] of Object.entries(ints))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`MoeCombine: ${name} must be a positive integer, got ${v}`);
}

/**
 * A mixture layer's combine on the GPU (combine.wgsl): x [T, H] += Σ_j w[t · k + j] · down[pos(t, j)]
 * in choice order (+ the shared weight times the shared expert's output; `store`: x = that sum), one thread per output in
 * a fixed order, so a row's result is the same bits whatever T. Its reference is
 * {@link moeCombineRef}.
 */
export class MoeCombine {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link MoeCombine.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: MoeCombineOptions,
  ) {
    checkOptions(options);
    this.pipeline = ctx.pipelines.get('moe-combine', ...combineWgsl(options.shared, options.store));
    this.uniform = new UniformSlot(ctx, Params, 'moe-combine-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shared: boolean, store: boolean): Promise<void> {
    await ctx.pipelines.prepare('moe-combine', ...combineWgsl(shared, store));
  }

  /** Encodes x += the mixture's output (or x = it) for rows [T, H] (1 ≤ T ≤ maxRows). */
  encode(pass: GPUComputePassEncoder, b: MoeCombineBuffers, T: number): void {
    const o = this.options;
    this.check(b, T);
    this.uniform.write({
      rows: T,
      hidden: o.hidden,
      topK: o.topK,
      positions: routeTableLayout(o).positions,
      sharedAt: o.maxRows * o.topK,
    });
    const buffers = [this.uniform.buffer, b.table, b.weights, b.down, b.x];
    if (b.shared) buffers.push(b.shared);
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, buffers));
    const groups = Math.ceil((T * o.hidden) / WG);
    this.ctx.counter.dispatch(pass, ...grid(groups, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  /** Throws unless T is in range, the shared buffer matches the options, and each buffer holds its bytes. */
  private check(b: MoeCombineBuffers, T: number): void {
    const o = this.options;
    if (!Number.isInteger(T) || T < 1 || T > o.maxRows)
      throw new InvalidInputError(`MoeCombine: T must be in 1 .. ${o.maxRows}, got ${T}`);
    if (Boolean(b.shared) !== o.shared)
      throw new InvalidInputError(
        `MoeCombine: shared buffer ${b.shared ? 'given' : 'missing'}, options say ${o.shared}`,
      );
    if (b.x === b.down || b.x === b.shared)
      throw new InvalidInputError('MoeCombine: x must not be the down or shared buffer');
    const words: [string, GPUBuffer | undefined, number][] = [
      ['x', b.x, T * o.hidden],
      ['table', b.table, routeTableLayout(o).words],
      ['weights', b.weights, routeWeightWords(o, o.shared)],
      ['down', b.down, T * o.topK * o.hidden],
      ['shared', b.shared, T * o.hidden],
    ];
    for (const [name, buf, n] of words)
      if (buf && buf.size < n * 4)
        throw new InvalidInputError(`MoeCombine: ${name} holds ${buf.size} bytes, need ${n * 4}`);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
