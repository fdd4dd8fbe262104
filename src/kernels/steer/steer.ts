import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';

const WG = 64;
const SteerParams = defineUniforms('Params', { H: 'u32', offset: 'u32', a: 'f32', b: 'f32' });
/** How a steering vector r changes the residual stream h: see {@link steerRowsRef}. */
export type SteerMode = 'ablate' | 'add';

/** The kernel's two coefficients: x ← x − a·(x·r)·r + b·r. */
function coefficients(mode: SteerMode, scale: number): { a: number; b: number } {
  return mode === 'ablate' ? { a: 1, b: 0 } : { a: 0, b: scale };
}

function wgsl(): WgslVariant {
  return wgslVariant(shaders.steer, SteerParams, { WG });
}

/**
 * Reference of {@link Steer}: for each row h of x [rows, H], in place, "ablate" sets
 * h ← h − (h·r)·r (the dot product in f64, rounded to f32) and "add" sets h ← h + scale·r; `scale`
 * is ignored by "ablate". r: [H], a unit vector for "ablate".
 */
export function steerRowsRef(x: Float32Array, r: Float32Array, mode: SteerMode, scale: number): void {
  const H = r.length;
  const { a, b } = coefficients(mode, scale);
  for (let base = 0; base < x.length; base += H) {
    let d = 0;
    if (a !== 0) for (let i = 0; i < H; i++) d += x[base + i]! * r[i]!;
    const c = Math.fround(b - a * Math.fround(d));
    for (let i = 0; i < H; i++) x[base + i] = x[base + i]! + Math.fround(c * r[i]!);
  }
}

/**
 * Steers rows of the residual stream on the GPU, in place (steer.wgsl): one workgroup per
 * row computes the row's dot product with r by a workgroup reduction, then updates the row. The
 * vector lives at `offset` floats into a buffer that may hold several layers' vectors. Uniforms
 * never change after construction, so one instance may be encoded any number of times per
 * submission; use one instance per (vector, mode, scale).
 */
export class Steer {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof SteerParams>>;

  /** Gets the pipeline (see {@link Steer.prepare}) and writes the uniforms once. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    /** Buffer holding r at floats [offset, offset + hidden). */
    private readonly vectors: GPUBuffer,
    private readonly o: { hidden: number; offset: number; mode: SteerMode; scale: number },
  ) {
    const { hidden, offset, scale } = o;
    if (!Number.isInteger(hidden) || hidden < 1)
      throw new InvalidInputError(`Steer: hidden must be ≥ 1, got ${hidden}`);
    if (!Number.isInteger(offset) || offset < 0)
      throw new InvalidInputError(`Steer: offset must be a non-negative integer, got ${offset}`);
    if (!Number.isFinite(scale)) throw new InvalidInputError(`Steer: scale must be finite, got ${scale}`);
    if (vectors.size < (offset + hidden) * 4)
      throw new InvalidInputError(
        `Steer: vectors hold ${vectors.size} bytes, need ${(offset + hidden) * 4} for offset ${offset}`,
      );
    this.pipeline = ctx.pipelines.get('steer', ...wgsl());
    this.uniform = new UniformSlot(ctx, SteerParams, 'steer-params');
    this.uniform.write({ H: hidden, offset, ...coefficients(o.mode, scale) });
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('steer', ...wgsl());
  }

  /** Encodes the update of rows [0, rows) of x [rows, hidden], in place. */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, rows: number): void {
    if (!Number.isInteger(rows) || rows < 1 || rows > this.ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(
        `Steer: rows must be 1..${this.ctx.limits.maxComputeWorkgroupsPerDimension}, got ${rows}`,
      );
    if (x.size < rows * this.o.hidden * 4)
      throw new InvalidInputError(`Steer: x holds ${x.size} bytes, need ${rows * this.o.hidden * 4}`);
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, this.vectors, x]));
    this.ctx.counter.dispatch(pass, rows);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Where and how a forward pass steers, resolved for one model (see `src/steer/plan.ts`): after
 * block l's output (its MLP residual add) when `vectors[l]` is set, and also on block l's input
 * (before its attention norm) when `inputs` is true. Both runners take this same plan, and
 * {@link steerHook} is the reference's semantics the GPU runner reproduces.
 */
export interface SteerPlan {
  readonly mode: SteerMode;
  /** The added multiple of r for "add"; unused by "ablate". */
  readonly scale: number;
  /** Also steer each chosen block's input. */
  readonly inputs: boolean;
  /** [layers]: the unit vector [H] for each chosen layer, undefined elsewhere. */
  readonly vectors: readonly (Float32Array | undefined)[];
}

/**
 * The plan as a residual hook of the reference forward (`ReferenceRunner.residualHook`): the
 * same sites, order and arithmetic as the GPU runner's {@link Steer} dispatches.
 */
export function steerHook(plan: SteerPlan): {
  input(layer: number, x: Float32Array): void;
  output(layer: number, x: Float32Array): void;
} {
  const apply = (layer: number, x: Float32Array) => {
    const r = plan.vectors[layer];
    if (r) steerRowsRef(x, r, plan.mode, plan.scale);
  };
  return {
    input: (layer, x) => {
      if (plan.inputs) apply(layer, x);
    },
    output: apply,
  };
}
