// The elementwise kernels only some models use, apart so that the engine worker's chunk carries
// them only when such a model loads: soft-capping (Gemma 4's final logits) and a scale by a scalar
// the GPU holds (Gemma 4's layer scalars). Their WGSL is elementwise.wgsl's.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { AddParams, checkCount, checkSize, dispatchFlat, OFF } from './elementwise.js';

const SoftcapParams = defineUniforms('Params', { n: 'u32', cap: 'f32' });

function softcapWgsl(): WgslVariant {
  return wgslVariant(shaders.elementwise, SoftcapParams, { ...OFF, SOFTCAP: true });
}

function scaleWgsl(): WgslVariant {
  return wgslVariant(shaders.elementwise, AddParams, { ...OFF, SCALE: true });
}

/**
 * Reference of {@link Softcap}: cap · tanh(x / cap) for each element, in f64 rounded to f32 (Gemma's
 * final-logit soft-capping, `final_logit_softcapping`).
 */
export function softcapRef(x: Float32Array, cap: number): Float32Array {
  return x.map((v) => cap * Math.tanh(v / cap));
}

/**
 * Soft-capping in place on the GPU, x = cap · tanh(x / cap) over n f32 values (Gemma 2's and 4's
 * final logits, cap 30): one dispatch. Its tanh never overflows and stays within a few f32 ulps of
 * the exact one (elementwise.wgsl's softcap_tanh), for any finite x.
 */
export class Softcap {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof SoftcapParams>>;

  /** Checks the cap and gets the pipeline (see {@link Softcap.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly cap: number,
  ) {
    if (!(cap > 0 && Number.isFinite(cap)))
      throw new InvalidInputError(`Softcap: cap must be finite and > 0, got ${cap}`);
    this.pipeline = ctx.pipelines.get('elementwise', ...softcapWgsl());
    this.uniform = new UniformSlot(ctx, SoftcapParams, 'softcap-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...softcapWgsl());
  }

  /** Encodes x[i] = cap · tanh(x[i] / cap) for i < n. x: [n] f32 (read-write). */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, n: number): void {
    checkCount('Softcap', 'n', n);
    checkSize('Softcap', 'x', x, n * 4);
    this.uniform.write({ n, cap: this.cap });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, x]));
    dispatchFlat(this.ctx, pass, n);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/** Reference of {@link ScaleInPlace}: x · f32(s), rounded to f32. */
export function scaleRef(x: Float32Array, s: number): Float32Array {
  const s32 = Math.fround(s); // as the GPU buffer holds it
  return x.map((v) => Math.fround(v * s32));
}

/**
 * Scales n f32 values in place by a scalar the GPU holds, x[i] *= s[0] (Gemma 4's learned
 * per-layer scalar on the residual stream, a weight buffer [1]): one dispatch.
 */
export class ScaleInPlace {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof AddParams>>;

  /** Gets the pipeline (see {@link ScaleInPlace.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
  ) {
    this.pipeline = ctx.pipelines.get('elementwise', ...scaleWgsl());
    this.uniform = new UniformSlot(ctx, AddParams, 'scale-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...scaleWgsl());
  }

  /** Encodes x[i] *= s[0] for i < n. s: [1] f32; x: [n] f32 (read-write), another buffer. */
  encode(pass: GPUComputePassEncoder, s: GPUBuffer, x: GPUBuffer, n: number): void {
    checkCount('ScaleInPlace', 'n', n);
    if (s === x) throw new InvalidInputError('ScaleInPlace: s and x must be different buffers');
    checkSize('ScaleInPlace', 's', s, 4);
    checkSize('ScaleInPlace', 'x', x, n * 4);
    this.uniform.write({ n });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, s, x]));
    dispatchFlat(this.ctx, pass, n);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
