// The write of new K/V rows into an int8 or int4 cache (shaders/kvquant/kv_quant.wgsl, loaded with
// this module: the attention block imports it only for an integer cache), and the rotation of the
// queries that read a rotated one. Layout and references: kv-quant.ts.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders-kvquant.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { checkCache, type KvLayerBuffers, type KvShape, kvRotated, kvWordsPerSlot } from './kv.js';
import { isKvInt, KV_INT_LEVELS, type KvIntFormat, kvIntPerWord, kvRotationSigns } from './kv-quant.js';

const WG = 64;
const Params = defineUniforms('Params', {
  M: 'u32',
  heads: 'u32',
  kvHeads: 'u32',
  capacity: 'u32',
  ring: 'u32',
});

/** The rotation's signs as bits (1: -1), 32 per word, as kv_quant.wgsl's SIGNS. */
function signWords(headDim: number): string {
  const s = kvRotationSigns(headDim);
  const words = new Uint32Array(Math.ceil(headDim / 32));
  s.forEach((v, i) => {
    if (v < 0) words[i >> 5]! |= 1 << (i & 31);
  });
  return Array.from(words, (w) => `${w}u`).join(', ');
}

function quantWgsl(format: KvIntFormat, headDim: number, rotate: boolean, qOnly: boolean): WgslVariant {
  return wgslVariant(shaders.kv_quant, Params, {
    WG,
    D: headDim,
    PER: kvIntPerWord(format),
    LEVELS: KV_INT_LEVELS[format],
    INT4: format === 'int4',
    ROTATE: rotate,
    Q_ONLY: qOnly,
    SIGN_WORDS: Math.ceil(headDim / 32),
    SIGNS: rotate ? signWords(headDim) : '0u',
  });
}

/**
 * Writes M new K/V rows [M, kvHeads, headDim] (f32) into one layer's integer cache at explicit
 * slots, as {@link KvWrite} does for f32 and f16 caches: one dispatch of one workgroup per head and
 * row, which with a rotated cache ({@link KvShape.rotate}) also rotates the pass's queries
 * [M, heads, headDim] in place. A layer that reads another layer's rotated cache rotates its
 * queries alone ({@link KvQuantWrite.encodeQueries}).
 */
export class KvQuantWrite {
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly pipeline: GPUComputePipeline;
  private readonly queries: GPUComputePipeline | undefined;
  readonly format: KvIntFormat;

  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: KvShape,
    /** Query heads of the layers whose queries are rotated. */
    readonly heads: number,
  ) {
    if (!isKvInt(shape.format))
      throw new InvalidInputError(`KvQuantWrite: format must be int8 or int4, got ${shape.format}`);
    kvWordsPerSlot(shape); // checks the shape
    this.format = shape.format;
    const rotate = kvRotated(shape);
    this.pipeline = ctx.pipelines.get('kv_quant', ...quantWgsl(this.format, shape.headDim, rotate, false));
    if (rotate)
      this.queries = ctx.pipelines.get('kv_quant', ...quantWgsl(this.format, shape.headDim, true, true));
    this.uniform = new UniformSlot(ctx, Params, 'kv-quant-params');
  }

  /** Compiles the pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shape: KvShape): Promise<void> {
    if (!isKvInt(shape.format)) return;
    const rotate = kvRotated(shape);
    await ctx.pipelines.prepare('kv_quant', ...quantWgsl(shape.format, shape.headDim, rotate, false));
    if (rotate)
      await ctx.pipelines.prepare('kv_quant', ...quantWgsl(shape.format, shape.headDim, true, true));
  }

  private params(rows: number): void {
    if (!Number.isInteger(rows) || rows < 1 || rows > this.ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(`KvQuantWrite: rows must be ≥ 1, got ${rows}`);
    const { kvHeads, capacity, ring = 0 } = this.shape;
    this.uniform.write({ M: rows, heads: this.heads, kvHeads, capacity, ring });
  }

  /**
   * Encodes the write of rows k[i], v[i] at slots[i] (i < rows; past capacity skipped), and with a
   * rotated cache the rotation of q [rows, heads, headDim] in place (q required then).
   */
  encode(
    pass: GPUComputePassEncoder,
    k: GPUBuffer,
    v: GPUBuffer,
    slots: GPUBuffer,
    cache: KvLayerBuffers,
    rows: number,
    q?: GPUBuffer,
  ): void {
    this.params(rows);
    const { kvHeads, headDim } = this.shape;
    const bytes = rows * kvHeads * headDim * 4;
    if (k.size < bytes || v.size < bytes)
      throw new InvalidInputError(`KvQuantWrite: k/v hold ${k.size}/${v.size} bytes, need ${bytes}`);
    if (slots.size < rows * 4)
      throw new InvalidInputError(`KvQuantWrite: slots holds ${slots.size} bytes, need ${rows * 4}`);
    checkCache('KvQuantWrite', this.shape, [cache]);
    const buffers = [this.uniform.buffer, slots, k, v, cache.k, cache.v];
    let units = 2 * kvHeads;
    if (this.queries) {
      if (!q || q.size < rows * this.heads * headDim * 4)
        throw new InvalidInputError(
          `KvQuantWrite: a rotated cache needs the queries [${rows}, ${this.heads}, ${headDim}] (got ${q?.size ?? 'none'} bytes)`,
        );
      buffers.push(q);
      units += this.heads;
    }
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, buffers));
    this.ctx.counter.dispatch(pass, units, rows);
  }

  /** Encodes the rotation of q [rows, heads, headDim] in place (a rotated cache only). */
  encodeQueries(pass: GPUComputePassEncoder, q: GPUBuffer, rows: number): void {
    if (!this.queries) throw new InvalidInputError('KvQuantWrite.encodeQueries: the cache is not rotated');
    this.params(rows);
    if (q.size < rows * this.heads * this.shape.headDim * 4)
      throw new InvalidInputError(
        `KvQuantWrite: q holds ${q.size} bytes, need ${rows * this.heads * this.shape.headDim * 4}`,
      );
    pass.setPipeline(this.queries);
    pass.setBindGroup(0, this.binds.get(this.queries, [this.uniform.buffer, q]));
    this.ctx.counter.dispatch(pass, this.heads, rows);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
