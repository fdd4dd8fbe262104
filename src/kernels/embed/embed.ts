import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import {
  checkShape,
  dequantize,
  isIntFormat,
  latticeFormat,
  type QuantizedMatrix,
  type WeightFormat,
} from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { latticeTable } from '../matmul/matmul.js';
import type { GpuMatrix } from '../matmul/matrix.js';
import { codeVars, quantScaleVars } from '../matmul/variant.js';

const WG = 64;
const Params = defineUniforms('Params', {
  M: 'u32',
  n: 'u32',
  row0: 'u32',
  rows: 'u32',
  scale: 'f32',
});

/**
 * The pipeline of `format`; with a scale other than 1, one more variant that multiplies by the
 * uniform's f32 `scale`. The scale is a uniform, not a constant in the WGSL: with a constant,
 * wgpu's naga and lavapipe's compiler regrouped (a * q) * scale and missed the reference's bits by
 * an ulp (a compiler may fold constants; it cannot fold a uniform).
 */
function embedWgsl(format: WeightFormat, scale = 1): WgslVariant {
  return wgslVariant(shaders.embed, Params, {
    SCALE: scale !== 1,
    WG,
    F32: format === 'f32',
    F16: format === 'f16',
    ...quantScaleVars(format),
    ...codeVars(format),
    SCALED: isIntFormat(format),
  });
}

/** Static options of {@link Embedding}. */
export interface EmbeddingOptions {
  /**
   * Multiplies every looked-up value, rounded to f32 first, the product rounded to f32 (Gemma 3:
   * √hidden). Default 1, which leaves the values as they are.
   */
  scale?: number;
}

/** Reference embedding lookup: rows `ids` of the dequantized table [V, n], times f32(scale) → [M, n]. */
export function embedRef(table: QuantizedMatrix, ids: Uint32Array, scale = 1): Float32Array {
  const w = dequantize(table);
  const n = table.cols;
  const s = Math.fround(scale);
  const out = new Float32Array(ids.length * n);
  ids.forEach((id, m) => {
    for (let j = 0; j < n; j++) out[m * n + j] = w[id * n + j]! * s;
  });
  return out;
}

/**
 * Embedding lookup on the GPU: out [M, n] = rows ids [M] of a table [V, n] in any weight format
 * (the float, integer and GGUF block formats), dequantized bit-identically to `dequantize` (embed.wgsl),
 * times the f32 scale of its options.
 */
export class Embedding {
  private readonly pipeline: GPUComputePipeline;
  /** A lattice format's codebook (binding 5). */
  private readonly codebook: GPUBuffer | undefined;
  /** One uniform per part of the table: each part is its own dispatch in the same pass. */
  private readonly uniforms: UniformSlot<LayoutKeys<typeof Params>>[];

  /** The f32 multiplier of every value (1: none). */
  readonly scale: number;

  /** Checks the table and the scale and gets the pipeline of its format (see {@link Embedding.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    /** The table [V, n] (rows = vocabulary, cols = hidden size), e.g. shared with a tied LM head. */
    readonly table: GpuMatrix,
    options: EmbeddingOptions = {},
  ) {
    const { format, rows, cols } = table;
    checkShape(format, rows, cols);
    this.scale = Math.fround(options.scale ?? 1);
    if (!Number.isFinite(this.scale))
      throw new InvalidInputError(`Embedding: scale must be a finite f32, got ${options.scale}`);
    table.parts.forEach((part, i) => {
      if (isIntFormat(format) && !part.scales)
        throw new InvalidInputError(`Embedding: ${format} part ${i} needs scales`);
    });
    this.pipeline = ctx.pipelines.get('embed', ...embedWgsl(format, this.scale));
    this.codebook = latticeFormat(format) ? latticeTable(ctx, format) : undefined;
    this.uniforms = table.parts.map((_, i) => new UniformSlot(ctx, Params, `embed-params-${i}`));
  }

  /** Compiles the pipeline of `format` ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, format: WeightFormat, scale = 1): Promise<void> {
    await ctx.pipelines.prepare('embed', ...embedWgsl(format, Math.fround(scale)));
  }

  /** Encodes the lookup of `count` ids (ids: [count] u32, each < V) into out [count, n]. */
  encode(pass: GPUComputePassEncoder, ids: GPUBuffer, out: GPUBuffer, count: number): void {
    const { cols } = this.table;
    if (!Number.isInteger(count) || count < 1)
      throw new InvalidInputError(`Embedding: count must be ≥ 1, got ${count}`);
    if (ids.size < count * 4)
      throw new InvalidInputError(`Embedding: ids holds ${ids.size} bytes, need ${count * 4}`);
    if (out.size < count * cols * 4)
      throw new InvalidInputError(`Embedding: out holds ${out.size} bytes, need ${count * cols * 4}`);
    pass.setPipeline(this.pipeline);
    const wgs = grid(Math.ceil((count * cols) / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension);
    this.table.parts.forEach((part, i) => {
      const uniform = this.uniforms[i]!;
      uniform.write({
        M: count,
        n: cols,
        row0: part.row0,
        rows: part.rows,
        scale: this.scale,
      });
      const bufs = [uniform.buffer, ids, out, part.data];
      if (part.scales) bufs.push(part.scales);
      if (this.codebook) bufs.push(this.codebook);
      pass.setBindGroup(0, this.binds.get(this.pipeline, bufs));
      this.ctx.counter.dispatch(pass, ...wgs);
    });
  }

  destroy(): void {
    for (const u of this.uniforms) u.destroy();
  }
}
