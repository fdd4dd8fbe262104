import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const WG = 64;
const Params = defineUniforms('Params', { rows: 'u32', n: 'u32', eps: 'f32' });

/** Static options of {@link RmsNorm}: the normalised width and the weight form. */
export interface RmsNormOptions {
  /** Elements per row (hidden size, or headDim for QK-norm). */
  n: number;
  eps: number;
  /** Scale by `1 + w` (Gemma-style checkpoints) instead of `w`. */
  onePlus?: boolean;
}

/**
 * Reference RMSNorm over rows of `x` [rows, n]: sum of squares in f64, then
 * y = f32(x · (1/√(mean + eps)) · g) with g = w or 1 + w.
 */
export function rmsNormRef(x: Float32Array, w: Float32Array, opts: RmsNormOptions): Float32Array {
  const { n, eps } = opts;
  const y = new Float32Array(x.length);
  for (let r = 0; r < x.length / n; r++) {
    let ss = 0;
    for (let i = 0; i < n; i++) ss += x[r * n + i]! ** 2;
    const inv = 1 / Math.sqrt(ss / n + eps);
    for (let i = 0; i < n; i++) y[r * n + i] = x[r * n + i]! * inv * (opts.onePlus ? 1 + w[i]! : w[i]!);
  }
  return y;
}

/** Static options of {@link RmsNormAdd}: the normalised width and eps; its weight is used as given. */
export type RmsNormAddOptions = Pick<RmsNormOptions, 'n' | 'eps'>;

/**
 * Reference post-norm residual add over rows [rows, n]: x + f32(rmsnorm(y) · w), rounded to f32,
 * as the model's reference takes it (`rmsNorm` then `addInto` of model/ops.ts): sum of squares in
 * f64, its mean rounded to f32, the normed value rounded to f32 before the weight multiply.
 */
export function rmsNormAddRef(
  x: Float32Array,
  y: Float32Array,
  w: Float32Array,
  opts: RmsNormAddOptions,
): Float32Array {
  const { n, eps } = opts;
  const out = new Float32Array(x.length);
  for (let r = 0; r < x.length / n; r++) {
    const base = r * n;
    let ss = 0;
    for (let i = 0; i < n; i++) ss += y[base + i]! ** 2;
    const inv = 1 / Math.sqrt(Math.fround(ss / n) + eps);
    for (let i = 0; i < n; i++)
      out[base + i] = x[base + i]! + Math.fround(w[i]! * Math.fround(y[base + i]! * inv));
  }
  return out;
}

function normWgsl(onePlus: boolean, add: boolean): WgslVariant {
  return wgslVariant(shaders.rmsnorm, Params, { WG, ONE_PLUS: onePlus, ADD: add });
}

/** Throws unless n is a positive integer and eps ≥ 0. */
function checkOptions(kernel: string, { n, eps }: RmsNormAddOptions): void {
  if (!Number.isInteger(n) || n < 1)
    throw new InvalidInputError(`${kernel}: n must be a positive integer, got ${n}`);
  if (!(eps >= 0)) throw new InvalidInputError(`${kernel}: eps must be ≥ 0, got ${eps}`);
}

/** Throws unless rows ≥ 1, x and y differ, and each buffer holds its bytes (w: [n], x and y: [rows, n]). */
function checkBuffers(
  kernel: string,
  rows: number,
  n: number,
  bufs: Record<'x' | 'w' | 'y', GPUBuffer>,
): void {
  if (!Number.isInteger(rows) || rows < 1)
    throw new InvalidInputError(`${kernel}: rows must be ≥ 1, got ${rows}`);
  if (bufs.x === bufs.y) throw new InvalidInputError(`${kernel}: x and y must be different buffers`);
  for (const [name, b] of Object.entries(bufs)) {
    const bytes = (name === 'w' ? n : rows * n) * 4;
    if (b.size < bytes)
      throw new InvalidInputError(`${kernel}: ${name} holds ${b.size} bytes, need ${bytes}`);
  }
}

/**
 * RMSNorm of rows [rows, n] with weight [n] on the GPU (rmsnorm.wgsl). QK-norm is the same
 * op with n = headDim over rows = tokens · heads, since q [M, heads, headDim] is [M·heads, headDim].
 */
export class RmsNorm {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link RmsNorm.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: RmsNormOptions,
  ) {
    checkOptions('RmsNorm', options);
    this.pipeline = ctx.pipelines.get('rmsnorm', ...normWgsl(options.onePlus ?? false, false));
    this.uniform = new UniformSlot(ctx, Params, 'rmsnorm-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, onePlus = false): Promise<void> {
    await ctx.pipelines.prepare('rmsnorm', ...normWgsl(onePlus, false));
  }

  /** Encodes y = rmsnorm(x) · g. x, y: [rows, n] (distinct buffers); w: [n]. */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, w: GPUBuffer, y: GPUBuffer, rows: number): void {
    const { n, eps } = this.options;
    checkBuffers('RmsNorm', rows, n, { x, w, y });
    this.uniform.write({ rows, n, eps });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, x, w, y]));
    this.ctx.counter.dispatch(pass, ...grid(rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * A post-norm residual add on the GPU (rmsnorm.wgsl's ADD variant): x [rows, n] += rmsnorm(y) · w,
 * for the norms Gemma 3 applies to a block's output before it joins the residual stream. The
 * normed value is RmsNorm's, bit for bit, then one f32 add. w is the weight as it multiplies (for
 * Gemma, 1 + the checkpoint's weight, formed when it is placed).
 */
export class RmsNormAdd {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link RmsNormAdd.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: RmsNormAddOptions,
  ) {
    checkOptions('RmsNormAdd', options);
    this.pipeline = ctx.pipelines.get('rmsnorm', ...normWgsl(false, true));
    this.uniform = new UniformSlot(ctx, Params, 'rmsnorm-add-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('rmsnorm', ...normWgsl(false, true));
  }

  /** Encodes x += rmsnorm(y) · w. y (the block's output), x (the residual): [rows, n], distinct buffers; w: [n]. */
  encode(pass: GPUComputePassEncoder, y: GPUBuffer, w: GPUBuffer, x: GPUBuffer, rows: number): void {
    const { n, eps } = this.options;
    checkBuffers('RmsNormAdd', rows, n, { y, w, x });
    this.uniform.write({ rows, n, eps });
    pass.setPipeline(this.pipeline);
    // The shader's x is the normed input and its y the output: here y is normed into x.
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, y, w, x]));
    this.ctx.counter.dispatch(pass, ...grid(rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
