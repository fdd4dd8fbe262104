// The unsplit attention kernel (bench/attention.wgsl): one workgroup per (row, head) walks every
// key. Split attention (src/kernels/attention/) replaced it in weft; bench:kernels keeps it as the
// baseline the split kernel is measured against, and bench/attention.test.ts keeps it honest.
import { InvalidInputError } from '../src/errors.js';
import type { GpuContext } from '../src/gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../src/gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../src/gpu/wgsl.js';
import type { AttentionShape } from '../src/kernels/attention/reference.js';
import { type BindGroupCache, UniformSlot } from '../src/kernels/bind.js';
import { grid } from '../src/kernels/dispatch.js';
import { type KvFormat, kvWordsPerSlot } from '../src/kernels/kv/kv.js';
import attentionWgsl from './attention.wgsl?raw';

const WG = 64;
const MAX_HEAD_DIM = 256;
const Params = defineUniforms('Params', {
  T: 'u32',
  heads: 'u32',
  kvHeads: 'u32',
  headDim: 'u32',
  base: 'u32',
  scale: 'f32',
});

function source(format: KvFormat): WgslVariant {
  return wgslVariant(attentionWgsl, Params, { WG, KV_F16: format === 'f16' });
}

function checkShape(shape: AttentionShape): void {
  const { heads, kvHeads, headDim, capacity } = shape;
  for (const [name, v] of Object.entries({ heads, kvHeads, headDim, capacity }))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`Attention: ${name} must be ≥ 1, got ${v}`);
  if (heads % kvHeads !== 0)
    throw new InvalidInputError(`Attention: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  if (headDim > MAX_HEAD_DIM)
    throw new InvalidInputError(`Attention: headDim ${headDim} exceeds ${MAX_HEAD_DIM}`);
  if (shape.format === 'f16' && headDim % 2 !== 0)
    throw new InvalidInputError(`Attention: an f16 cache needs an even headDim, got ${headDim}`);
}

/**
 * Attention of T query rows over one layer's KV cache on the GPU: decode (T = 1), causal prefill
 * (ends = {@link chainEnds}) and tree verification (ends = {@link subtreeEnds}) through one
 * kernel (attention.wgsl). KV cache layout per layer: K and V buffers
 * [capacity, kvHeads, headDim] f32, slot = absolute position. One workgroup per (row, head) walks
 * every key, and the base is a uniform rewritten at each encode; `SplitAttention`
 * (attention-split.ts) is the faster kernel, and this one stays as its baseline in bench:kernels.
 */
export class Attention {
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly pipeline: GPUComputePipeline;
  readonly scale: number;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link Attention.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: AttentionShape,
  ) {
    checkShape(shape);
    this.pipeline = ctx.pipelines.get('attention', ...source(shape.format ?? 'f32'));
    this.uniform = new UniformSlot(ctx, Params, 'attention-params');
    this.scale = shape.scale ?? 1 / Math.sqrt(shape.headDim);
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, format: KvFormat = 'f32'): Promise<void> {
    await ctx.pipelines.prepare('attention', ...source(format));
  }

  /**
   * Encodes attention for `rows` queries standing at slots base .. base + rows - 1.
   * q: [rows, heads, headDim]; kCache, vCache: [capacity, kvHeads, headDim]; ends: [rows] u32;
   * out: [rows, heads, headDim], written. The rows' own K/V must already be in the cache.
   */
  encode(
    pass: GPUComputePassEncoder,
    q: GPUBuffer,
    kCache: GPUBuffer,
    vCache: GPUBuffer,
    ends: GPUBuffer,
    out: GPUBuffer,
    rows: number,
    base: number,
  ): void {
    const { heads, kvHeads, headDim, capacity } = this.shape;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`Attention: rows must be ≥ 1, got ${rows}`);
    if (!Number.isInteger(base) || base < 0 || base + rows > capacity)
      throw new InvalidInputError(`Attention: base ${base} + rows ${rows} exceeds capacity ${capacity}`);
    const qBytes = rows * heads * headDim * 4;
    const cacheBytes = kvWordsPerSlot(this.shape) * capacity * 4;
    const need: [string, GPUBuffer, number][] = [
      ['q', q, qBytes],
      ['out', out, qBytes],
      ['kCache', kCache, cacheBytes],
      ['vCache', vCache, cacheBytes],
      ['ends', ends, rows * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`Attention: ${name} holds ${b.size} bytes, need ${bytes}`);
    this.uniform.write({ T: rows, heads, kvHeads, headDim, base, scale: this.scale });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, q, kCache, vCache, ends, out]));
    this.ctx.counter.dispatch(pass, ...grid(rows * heads, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
