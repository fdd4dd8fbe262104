import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const WG = 256;
const Params = defineUniforms('Params', { R: 'u32', V: 'u32', W: 'u32' });

/** u32 words of one token bitmask over `vocab` ids (bit v % 32 of word ⌊v / 32⌋: token v allowed). */
export function maskWordsOf(vocab: number): number {
  return Math.ceil(vocab / 32);
}

/**
 * Reference of {@link TokenMask}: logits[r, v] = -∞ where token v's bit in mask row r is 0, in
 * place. logits: [R, vocab] f32; mask: [R, maskWordsOf(vocab)] u32.
 */
export function applyMaskRef(logits: Float32Array, mask: Uint32Array, vocab: number): void {
  const W = maskWordsOf(vocab);
  const R = logits.length / vocab;
  if (!Number.isInteger(R) || mask.length < R * W)
    throw new InvalidInputError(
      `applyMaskRef: logits of ${logits.length} (${R} rows of ${vocab}) need a mask of ${R * W} words, got ${mask.length}`,
    );
  for (let r = 0; r < R; r++)
    for (let v = 0; v < vocab; v++)
      if (((mask[r * W + (v >>> 5)]! >>> (v & 31)) & 1) === 0)
        logits[r * vocab + v] = Number.NEGATIVE_INFINITY;
}

function maskWgsl(): WgslVariant {
  return wgslVariant(shaders.mask, Params, { WG });
}

/**
 * Applies a grammar's token bitmask to logits on the GPU (mask.wgsl), in place, before the
 * sampler runs: disallowed tokens get -∞, so greedy and Gumbel sampling pick among the allowed ones.
 */
export class TokenMask {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Gets the pipeline for rows of `vocab` logits (compiled on first use; see {@link TokenMask.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly vocab: number,
  ) {
    if (!Number.isInteger(vocab) || vocab < 1)
      throw new InvalidInputError(`TokenMask: vocab must be a positive integer, got ${vocab}`);
    this.pipeline = ctx.pipelines.get('mask', ...maskWgsl());
    this.uniform = new UniformSlot(ctx, Params, 'mask-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('mask', ...maskWgsl());
  }

  /** Encodes the mask of `rows` rows: mask [rows, maskWordsOf(vocab)] u32 onto logits [rows, vocab] f32. */
  encode(pass: GPUComputePassEncoder, mask: GPUBuffer, logits: GPUBuffer, rows: number): void {
    const V = this.vocab;
    const W = maskWordsOf(V);
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`TokenMask: rows must be ≥ 1, got ${rows}`);
    if (mask.size < rows * W * 4)
      throw new InvalidInputError(
        `TokenMask: mask holds ${mask.size} bytes, need rows*W*4 = ${rows * W * 4}`,
      );
    if (logits.size < rows * V * 4)
      throw new InvalidInputError(`TokenMask: logits holds ${logits.size} bytes, need ${rows * V * 4}`);
    this.uniform.write({ R: rows, V, W });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, mask, logits]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil((rows * V) / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
