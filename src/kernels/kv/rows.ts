import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { checkCompaction } from './kv.js';

const WG = 64;
const ScatterParams = defineUniforms('Params', { M: 'u32', row: 'u32', capacity: 'u32' });
const CompactParams = defineUniforms('Params', {
  count: 'u32',
  row: 'u32',
  prefixLen: 'u32',
  capacity: 'u32',
});

/**
 * Shape of a row store kept beside the KV cache: one f32 buffer [capacity, row] whose slot s holds
 * the row (e.g. the target model's hidden state, a draft head's feature) of the token at cache slot
 * s. It is written at the same slots as the KV rows and compacted with the same path.
 */
export interface RowShape {
  capacity: number;
  row: number;
}

function scatterWgsl(): WgslVariant {
  return wgslVariant(shaders.rows_scatter, ScatterParams, { WG });
}

function compactWgsl(): WgslVariant {
  return wgslVariant(shaders.rows_compact, CompactParams, { WG });
}

function checkShape(shape: RowShape): void {
  const { capacity, row } = shape;
  for (const [name, v] of Object.entries({ capacity, row }))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`Row store: ${name} must be ≥ 1, got ${v}`);
}

function checkStore(what: string, shape: RowShape, store: GPUBuffer): void {
  const bytes = shape.capacity * shape.row * 4;
  if (store.size < bytes)
    throw new InvalidInputError(`${what}: store holds ${store.size} bytes, need ${bytes}`);
}

/**
 * Throws unless `slots` can be compacted to prefixLen, prefixLen + 1, ... in a row store of `shape`:
 * the checks of {@link checkCompaction} (strictly increasing, ≥ prefixLen, < capacity), which make
 * the in-place kernel safe (see rows_compact.wgsl). A path that compacts the KV cache and its row
 * store together needs only one of the two checks when both share a capacity.
 */
export function checkRowCompaction(shape: RowShape, slots: ArrayLike<number>, prefixLen: number): void {
  checkShape(shape);
  checkCompaction({ capacity: shape.capacity, kvHeads: 1, headDim: shape.row }, slots, prefixLen);
}

/**
 * Reference of {@link RowScatter}: `store[slots[i]] = src[i]` for i < slots.length, rows of `row`
 * elements; slots ≥ capacity are skipped (mutates `store`, [capacity, row]).
 */
export function rowsScatterRef(
  store: Float32Array,
  src: Float32Array,
  slots: Uint32Array,
  row: number,
  capacity: number,
): void {
  slots.forEach((s, i) => {
    if (s < capacity) store.set(src.subarray(i * row, (i + 1) * row), s * row);
  });
}

/**
 * Reference of {@link RowCompact}: row prefixLen + a of `store` [capacity, row] takes the old row
 * slots[a], for every a whose slot is below capacity (the others are skipped; mutates `store`).
 */
export function rowsCompactRef(
  store: Float32Array,
  slots: Uint32Array,
  row: number,
  prefixLen: number,
  capacity: number,
): void {
  // Gather first, then scatter: obviously correct whatever the overlap.
  const moves = Array.from(slots, (s, a) => ({ a, s }))
    .filter(({ s }) => s < capacity)
    .map(({ a, s }) => ({ dst: prefixLen + a, data: store.slice(s * row, (s + 1) * row) }));
  for (const { dst, data } of moves) store.set(data, dst * row);
}

/**
 * Writes M new rows [M, row] into a row store [capacity, row] at explicit slots (a u32 buffer [M]),
 * the slots `KvWrite` (kv.ts) writes the same tokens' K/V rows at. Slots ≥ capacity are skipped.
 */
export class RowScatter {
  private readonly uniform: UniformSlot<LayoutKeys<typeof ScatterParams>>;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link RowScatter.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: RowShape,
  ) {
    checkShape(shape);
    this.pipeline = ctx.pipelines.get('rows_scatter', ...scatterWgsl());
    this.uniform = new UniformSlot(ctx, ScatterParams, 'rows-scatter-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('rows_scatter', ...scatterWgsl());
  }

  /** Encodes `store[slots[i]] = src[i]` for i < rows. src: [rows, row] f32; slots: [rows] u32 (distinct). */
  encode(
    pass: GPUComputePassEncoder,
    src: GPUBuffer,
    slots: GPUBuffer,
    store: GPUBuffer,
    rows: number,
  ): void {
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`RowScatter: rows must be ≥ 1, got ${rows}`);
    const { row, capacity } = this.shape;
    const bytes = rows * row * 4;
    if (src.size < bytes)
      throw new InvalidInputError(`RowScatter: src holds ${src.size} bytes, need ${bytes}`);
    if (slots.size < rows * 4)
      throw new InvalidInputError(`RowScatter: slots holds ${slots.size} bytes, need ${rows * 4}`);
    checkStore('RowScatter', this.shape, store);
    this.uniform.write({ M: rows, row, capacity });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, slots, src, store]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil((rows * row) / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Commits an accepted tree path in a row store: moves the rows at `slots` (strictly increasing,
 * ≥ prefixLen, see {@link checkRowCompaction}; entries ≥ capacity skipped) to slots prefixLen,
 * prefixLen + 1, ... in place, as `KvCompact` (kv.ts) does for the KV cache (one dispatch).
 */
export class RowCompact {
  private readonly uniform: UniformSlot<LayoutKeys<typeof CompactParams>>;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link RowCompact.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: RowShape,
  ) {
    checkShape(shape);
    this.pipeline = ctx.pipelines.get('rows_compact', ...compactWgsl());
    this.uniform = new UniformSlot(ctx, CompactParams, 'rows-compact-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('rows_compact', ...compactWgsl());
  }

  /** Encodes the move of `count` rows (slots: [count] u32) of `store` [capacity, row]. */
  encode(
    pass: GPUComputePassEncoder,
    store: GPUBuffer,
    slots: GPUBuffer,
    count: number,
    prefixLen: number,
  ): void {
    const { row, capacity } = this.shape;
    if (!Number.isInteger(count) || count < 1)
      throw new InvalidInputError(`RowCompact: count must be ≥ 1, got ${count}`);
    if (!Number.isInteger(prefixLen) || prefixLen < 0 || prefixLen + count > capacity)
      throw new InvalidInputError(
        `RowCompact: prefixLen ${prefixLen} + count ${count} exceeds capacity ${capacity}`,
      );
    if (slots.size < count * 4)
      throw new InvalidInputError(`RowCompact: slots holds ${slots.size} bytes, need ${count * 4}`);
    checkStore('RowCompact', this.shape, store);
    this.uniform.write({ count, row, prefixLen, capacity });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, slots, store]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil(row / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
