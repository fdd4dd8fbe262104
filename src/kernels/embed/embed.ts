import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import type { GpuMatrix } from '../matmul/matmul.js';
import {
  checkShape,
  dequantize,
  type QuantizedMatrix,
  type WeightFormat,
  wordsPerRow,
} from '../matmul/quant.js';

const WG = 64;
const Params = defineUniforms('Params', {
  M: 'u32',
  n: 'u32',
  row0: 'u32',
  rows: 'u32',
  wpr: 'u32',
  group: 'u32',
  G: 'u32',
});

const BITS: Record<WeightFormat, number> = { f32: 32, f16: 16, int8: 8, int4: 4, int2: 2 };

function isScaled(format: WeightFormat): boolean {
  return format === 'int8' || format === 'int4' || format === 'int2';
}

function hasZeros(format: WeightFormat): boolean {
  return format === 'int4' || format === 'int2';
}

function embedSource(format: WeightFormat): WgslVariant {
  return wgslVariant(shaders.embed, Params, {
    WG,
    F32: format === 'f32',
    F16: format === 'f16',
    INT8: format === 'int8',
    SCALED: isScaled(format),
    ZEROS: hasZeros(format),
    BITS: BITS[format],
  });
}

/** Reference embedding lookup: rows `ids` of the dequantized table [V, n] → [M, n]. */
export function embedRef(table: QuantizedMatrix, ids: Uint32Array): Float32Array {
  const w = dequantize(table);
  const n = table.cols;
  const out = new Float32Array(ids.length * n);
  ids.forEach((id, m) => {
    out.set(w.subarray(id * n, (id + 1) * n), m * n);
  });
  return out;
}

/**
 * Embedding lookup on the GPU: out [M, n] = rows ids [M] of a table [V, n] in any weight format
 * (f32, f16, int8, int4, int2), dequantized bit-identically to `dequantize` (embed.wgsl).
 */
export class Embedding {
  private readonly pipeline: GPUComputePipeline;
  /** One uniform per part of the table: each part is its own dispatch in the same pass. */
  private readonly uniforms: UniformSlot<LayoutKeys<typeof Params>>[];

  /** Checks the table and gets the pipeline of its format (see {@link Embedding.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    /** The table [V, n] (rows = vocabulary, cols = hidden size), e.g. shared with a tied LM head. */
    readonly table: GpuMatrix,
  ) {
    const { format, rows, cols, group } = table;
    checkShape(format, rows, cols, group);
    table.parts.forEach((part, i) => {
      if (isScaled(format) && !part.scales)
        throw new InvalidInputError(`Embedding: ${format} part ${i} needs scales`);
      if (hasZeros(format) && !part.zeros)
        throw new InvalidInputError(`Embedding: ${format} part ${i} needs zeros`);
    });
    this.pipeline = ctx.pipelines.get('embed', ...embedSource(format));
    this.uniforms = table.parts.map((_, i) => new UniformSlot(ctx, Params, `embed-params-${i}`));
  }

  /** Compiles the pipeline of `format` ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, format: WeightFormat): Promise<void> {
    await ctx.pipelines.prepare('embed', ...embedSource(format));
  }

  /** Encodes the lookup of `count` ids (ids: [count] u32, each < V) into out [count, n]. */
  encode(pass: GPUComputePassEncoder, ids: GPUBuffer, out: GPUBuffer, count: number): void {
    const { cols, group, format } = this.table;
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
        wpr: wordsPerRow(format, cols),
        group,
        G: cols / group,
      });
      const bufs = [uniform.buffer, ids, out, part.data];
      if (part.scales) bufs.push(part.scales);
      if (part.zeros) bufs.push(part.zeros);
      pass.setBindGroup(0, this.binds.get(this.pipeline, bufs));
      pass.dispatchWorkgroups(...wgs);
    });
  }

  destroy(): void {
    for (const u of this.uniforms) u.destroy();
  }
}
