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

function normSource(onePlus: boolean): WgslVariant {
  return wgslVariant(shaders.rmsnorm, Params, { WG, ONE_PLUS: onePlus });
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
    if (!Number.isInteger(options.n) || options.n < 1)
      throw new InvalidInputError(`RmsNorm: n must be a positive integer, got ${options.n}`);
    if (!(options.eps >= 0)) throw new InvalidInputError(`RmsNorm: eps must be ≥ 0, got ${options.eps}`);
    this.pipeline = ctx.pipelines.get('rmsnorm', ...normSource(options.onePlus ?? false));
    this.uniform = new UniformSlot(ctx, Params, 'rmsnorm-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, onePlus = false): Promise<void> {
    await ctx.pipelines.prepare('rmsnorm', ...normSource(onePlus));
  }

  /** Encodes y = rmsnorm(x) · g. x, y: [rows, n] (distinct buffers); w: [n]. */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, w: GPUBuffer, y: GPUBuffer, rows: number): void {
    const { n, eps } = this.options;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`RmsNorm: rows must be ≥ 1, got ${rows}`);
    if (x === y) throw new InvalidInputError('RmsNorm: x and y must be different buffers');
    const need: [string, GPUBuffer, number][] = [
      ['x', x, rows * n * 4],
      ['y', y, rows * n * 4],
      ['w', w, n * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`RmsNorm: ${name} holds ${b.size} bytes, need ${bytes}`);
    this.uniform.write({ rows, n, eps });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, x, w, y]));
    this.ctx.counter.dispatch(pass, ...grid(rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
