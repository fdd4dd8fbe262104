import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { type KvFormat, kvRows, kvWordsPerSlot, MAX_PASS_SLOTS } from '../kv/kv.js';
import { isKvInt, kvIntHeadWords } from '../kv/kv-quant.js';
import type { AttentionShape } from './reference.js';

const WG = 64;
/** V loads one thread of the GPU form issues before it uses the first (attention_split.wgsl's VB). */
const V_BATCH = 8;
/**
 * Keys per chunk of {@link SplitAttention}: chunk c holds the absolute cache slots
 * [c · ATTENTION_CHUNK, (c + 1) · ATTENTION_CHUNK), whatever rows share the pass.
 */
export const ATTENTION_CHUNK = 256;
/**
 * Smallest sliding window {@link SplitAttention} takes: a pass holds at most 64 rows (a tree at most
 * 64 deep), so every key of the pass a row sees lies in any window this wide, and the kernels test
 * the window on prefix slots alone.
 */
export const MIN_ATTENTION_WINDOW = MAX_PASS_SLOTS;
// One uniform for both passes (attention_merge reads the window and the chunks).
const Params = defineUniforms('Params', {
  scale: 'f32',
  first: 'u32',
  window: 'u32',
  ring: 'u32',
  chunks: 'u32',
});

/**
 * The visibility words of a depth-first tree (or chain) of `ends.length` rows at consecutive slots
 * (see draftTree): per row a 64-bit mask, low word first, whose bit d marks the slot d before the
 * row's own visible: set iff r - d < 0 (the prefix) or r - d is r or an ancestor of r
 * (r - d ≤ r ≤ ends[r - d]). A chain sets every bit, so its words do not depend on its position.
 * At most 64 rows.
 */
export function visWords(ends: ArrayLike<number>): Uint32Array {
  const T = ends.length;
  if (T > 64) throw new InvalidInputError(`visWords: ${T} rows, at most 64`);
  const out = new Uint32Array(2 * T);
  for (let r = 0; r < T; r++)
    for (let d = 0; d < 64; d++) {
      const j = r - d;
      if (j < 0 || ends[j]! >= r) {
        const w = 2 * r + (d >> 5);
        out[w] = out[w]! | (1 << (d & 31));
      }
    }
  return out;
}

/**
 * Static shape of a {@link SplitAttention}: the attention shape plus the most rows one pass holds,
 * the first slot later rows may see and a sliding window. The cache's `ring` (KvShape.ring: slot s
 * at row s mod ring of buffers [ring, kvHeads, headDim]) needs a window, and ring ≥ window +
 * {@link MAX_PASS_SLOTS}.
 */
export interface SplitAttentionShape extends AttentionShape {
  /** Most query rows of one pass (sizes the buffer of chunk partials). */
  maxRows: number;
  /**
   * Slots below it are seen only by their own row (default 0: every slot is a key). A draft head
   * whose entry at slot 0 has no input feature sets 1, so no later entry attends to it.
   */
  firstSlot?: number;
  /**
   * Sliding window (Gemma 3's and Mistral's local layers): a row at position p sees a key at
   * position k only if p - k < window (prefix slot s stands at position s). 0 or absent: no
   * window; otherwise at least {@link MIN_ATTENTION_WINDOW}.
   */
  window?: number;
}

interface Variant {
  G: number;
  D: number;
  /** The cache's element format (f32, f16, int8, int4). */
  format: KvFormat;
  /** The serial form of the partial kernel (see {@link GpuContext.kernels}). */
  serial: boolean;
}

function variantOf(shape: AttentionShape, ctx: Pick<GpuContext, 'kernels'>): Variant {
  return {
    G: shape.heads / shape.kvHeads,
    D: shape.headDim,
    format: shape.format ?? 'f32',
    serial: ctx.kernels === 'serial',
  };
}

function splitWgsl(v: Variant): WgslVariant {
  return wgslVariant(shaders.attention_split, Params, {
    WG,
    CH: ATTENTION_CHUNK,
    G: v.G,
    D: v.D,
    KV_F16: v.format === 'f16',
    KV_INT: isKvInt(v.format),
    KV_INT4: v.format === 'int4',
    KV_HW: isKvInt(v.format) ? kvIntHeadWords(v.format, v.D) : 0,
    SERIAL: v.serial,
    VB: V_BATCH,
  });
}

function mergeWgsl(v: Variant): WgslVariant {
  return wgslVariant(shaders.attention_merge, Params, { WG, CH: ATTENTION_CHUNK, G: v.G, D: v.D });
}

/**
 * Workgroup memory of the partial kernel in bytes: staged q, chunk scores, per-head reductions
 * (none in the serial form).
 */
function workgroupBytes(v: Variant): number {
  return v.serial ? 0 : 4 * v.G * (v.D + ATTENTION_CHUNK + WG);
}

/**
 * The partial pass's grid width for `rows` rows at `base` (row r at slot base + r, or rows a
 * kernel placed at slots up to `lastSlot`, every position ≥ base): the chunks from the first one a
 * row can see, that of max(0, base + 1 - window) (chunk 0 without a window), to lastSlot's. With a
 * window this stays about (window + 64) / {@link ATTENTION_CHUNK} + 2 however far into the context
 * the pass stands.
 */
export function attentionChunks(base: number, rows: number, window = 0, lastSlot = base + rows - 1): number {
  const start = window > 0 ? Math.max(0, base + 1 - window) : 0;
  return Math.floor(lastSlot / ATTENTION_CHUNK) - Math.floor(start / ATTENTION_CHUNK) + 1;
}

/**
 * Chunks the partials keep per (row, KV head): every chunk of the cache, or with a ring the most a
 * pass's rows can see (window starts from base + 1 - window, slots up to base + 63: window + 63
 * consecutive slots), so a ring's partials do not grow with the context either.
 */
function partialChunks(shape: SplitAttentionShape): number {
  const all = Math.ceil(shape.capacity / ATTENTION_CHUNK);
  if (!shape.ring) return all;
  const span = (shape.window ?? 0) + MAX_PASS_SLOTS - 1;
  return Math.min(all, Math.floor((span - 1) / ATTENTION_CHUNK) + 2);
}

function checkSplitShape(shape: SplitAttentionShape, ctx: Pick<GpuContext, 'limits' | 'kernels'>): void {
  const { heads, kvHeads, headDim, capacity, maxRows, firstSlot = 0, window = 0, ring = 0 } = shape;
  for (const [name, v] of Object.entries({ heads, kvHeads, headDim, capacity, maxRows }))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`SplitAttention: ${name} must be ≥ 1, got ${v}`);
  if (!Number.isInteger(firstSlot) || firstSlot < 0)
    throw new InvalidInputError(`SplitAttention: firstSlot must be an integer ≥ 0, got ${firstSlot}`);
  if (window !== 0 && !(Number.isInteger(window) && window >= MIN_ATTENTION_WINDOW))
    throw new InvalidInputError(
      `SplitAttention: window must be 0 (none) or an integer ≥ ${MIN_ATTENTION_WINDOW}, got ${window}`,
    );
  kvRows(shape); // checks the ring
  if (ring !== 0 && !(window > 0 && ring >= window + MAX_PASS_SLOTS))
    throw new InvalidInputError(
      `SplitAttention: a ring of ${ring} rows needs a window with ring ≥ window + ${MAX_PASS_SLOTS} (the slots of one pass), got window ${window}`,
    );
  if (heads % kvHeads !== 0)
    throw new InvalidInputError(
      `SplitAttention: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`,
    );
  // Up to 4 · WG a thread sums one vec4 column of V; past it, whole columns each (headDim 512).
  if (headDim % 4 !== 0 || (headDim > 4 * WG && headDim % (4 * WG) !== 0))
    throw new InvalidInputError(
      `SplitAttention: headDim must be a multiple of 4 up to ${4 * WG}, or of ${4 * WG}, got ${headDim}`,
    );
  const wg = workgroupBytes(variantOf(shape, ctx));
  if (wg > ctx.limits.maxComputeWorkgroupStorageSize)
    throw new InvalidInputError(
      `SplitAttention: ${heads / kvHeads} query heads per KV head at headDim ${headDim} need ${wg} bytes of workgroup memory, the device has ${ctx.limits.maxComputeWorkgroupStorageSize}`,
    );
}

/**
 * Decode / prefill / tree attention split over the context (attention_split.wgsl, then
 * attention_merge.wgsl): the keys are cut into chunks of {@link ATTENTION_CHUNK} absolute slots,
 * one workgroup per (chunk, KV head, row) scores a chunk for all the query heads of that KV head
 * (K and V read once per group, as vec4), and a merge pass folds the chunks of each row in a fixed
 * order. A pass whose keys all fit one chunk (base + rows ≤ {@link ATTENTION_CHUNK}, or with a
 * window every row's window in one chunk) is one dispatch; a longer one is two. Same visibility
 * rule and results as {@link attentionRef} (the oracle), including `firstSlot` (slots below it are
 * keys of their own row only) and `window` (keys a window or more positions behind the row are
 * masked; only the chunks from the first row's window start on are launched, those wholly before a
 * row's own window return at once, and the merge folds only the chunks from its window's start);
 * a row's output is bit-identical whatever rows share the pass. With a `ring` (KvShape.ring) the
 * cache holds slot s at row s mod ring, and the output is bit-identical to that over a full cache
 * holding the same keys.
 *
 * Unlike `Attention` it takes the cache base from the `slots` buffer the runner already writes for
 * the KV write (slots[r] = base + r) and T and kvHeads from the grid, so its only uniform (the
 * scale, the first slot, the window, the ring and the partials' chunks) is written once at
 * construction: encoding a decode step writes no buffer. Holds a buffer of chunk partials of
 * {@link SplitAttention.partialBytes} (⌈capacity / chunk⌉ chunks per row and KV head, or with a
 * ring the few a window spans), shared by every layer (passes are ordered, so layers may reuse
 * it), and by another instance given it (a model's windowed and global layers).
 */
export class SplitAttention {
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly split: GPUComputePipeline;
  private readonly merge: GPUComputePipeline;
  /** [maxRows, kvHeads, chunks, G · (headDim + 2)] f32 chunk partials, chunk c at c mod chunks. */
  readonly partials: GPUBuffer;
  /** Whether {@link SplitAttention.partials} was made here (and is destroyed here). */
  private readonly ownsPartials: boolean;
  readonly scale: number;

  /**
   * Checks the shape, gets both pipelines (see {@link SplitAttention.prepare}), writes the uniform.
   * `partials` (another instance's {@link SplitAttention.partials}, which stays that one's to
   * destroy) is used instead of a buffer of its own when it is large enough for this shape.
   */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: SplitAttentionShape,
    partials?: GPUBuffer,
  ) {
    checkSplitShape(shape, ctx);
    const v = variantOf(shape, ctx);
    this.split = ctx.pipelines.get('attention_split', ...splitWgsl(v));
    this.merge = ctx.pipelines.get('attention_merge', ...mergeWgsl(v));
    this.scale = shape.scale ?? 1 / Math.sqrt(shape.headDim);
    const chunks = partialChunks(shape);
    const partBytes = SplitAttention.partialBytes(shape);
    if (partBytes > ctx.limits.maxStorageBufferBindingSize)
      throw new InvalidInputError(
        `SplitAttention: chunk partials need ${partBytes} bytes (maxRows ${shape.maxRows}, capacity ${shape.capacity}), over the binding limit ${ctx.limits.maxStorageBufferBindingSize}`,
      );
    if (partials && partials.size < partBytes)
      throw new InvalidInputError(
        `SplitAttention: the shared partials hold ${partials.size} bytes, need ${partBytes} (maxRows ${shape.maxRows}, capacity ${shape.capacity})`,
      );
    this.uniform = new UniformSlot(ctx, Params, 'attention-split-params');
    this.uniform.write({
      scale: this.scale,
      first: shape.firstSlot ?? 0,
      window: shape.window ?? 0,
      ring: shape.ring ?? 0,
      chunks,
    });
    this.ownsPartials = !partials;
    this.partials = partials ?? createBuffer(ctx, partBytes, 'attention-split-partials');
  }

  /** Compiles both pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shape: AttentionShape): Promise<void> {
    const v = variantOf(shape, ctx);
    await ctx.pipelines.prepare('attention_split', ...splitWgsl(v));
    await ctx.pipelines.prepare('attention_merge', ...mergeWgsl(v));
  }

  /**
   * Bytes of the chunk partials of `shape`: maxRows · chunks · (heads · headDim + 2 · heads) f32,
   * chunks = ⌈capacity / chunk⌉, or with a ring the chunks one pass sees (a few, whatever the
   * capacity). An instance given another's partials needs at least this many.
   */
  static partialBytes(shape: SplitAttentionShape): number {
    return Math.max(16, shape.maxRows * partialChunks(shape) * (shape.heads * (shape.headDim + 2)) * 4);
  }

  /**
   * Dispatches {@link SplitAttention.encode} records for `rows` rows at `base` (and `lastSlot`) with
   * `window` (the shape's): 1 when the grid is one chunk wide ({@link attentionChunks}), else 2.
   */
  static dispatches(base: number, rows: number, window = 0, lastSlot = base + rows - 1): 1 | 2 {
    return attentionChunks(base, rows, window, lastSlot) > 1 ? 2 : 1;
  }

  /**
   * Encodes attention for `rows` queries. q: [rows, heads, headDim]; kCache, vCache: [kvRows,
   * kvHeads, headDim] (capacity rows, or `ring` rows holding slot s at row s mod ring); vis: [rows]
   * vec2<u32>, each row's mask of visible slots among the 64 up to its own (see {@link visWords});
   * slots: [rows] u32, each row's own slot, increasing (the GPU reads them); positions: [rows] u32,
   * each row's position, the buffer RoPE reads (base + r for a chain, so a chain may pass `slots`;
   * base + depth in a tree; the values matter only with a window, and must then be ≥ base);
   * out: [rows, heads, headDim], written. `lastSlot` (default base + rows - 1) bounds the slots the
   * GPU may hold and sizes the grid, so a pass whose rows a kernel placed (a tree grown on the
   * GPU) passes the largest slot it may use. The rows' own K/V must already be in the cache. With
   * a ring, lastSlot < base + {@link MAX_PASS_SLOTS}.
   */
  encode(
    pass: GPUComputePassEncoder,
    q: GPUBuffer,
    kCache: GPUBuffer,
    vCache: GPUBuffer,
    vis: GPUBuffer,
    slots: GPUBuffer,
    positions: GPUBuffer,
    out: GPUBuffer,
    rows: number,
    base: number,
    lastSlot = base + rows - 1,
  ): void {
    const { heads, kvHeads, headDim, capacity, maxRows, window = 0, ring = 0 } = this.shape;
    if (!Number.isInteger(rows) || rows < 1 || rows > maxRows)
      throw new InvalidInputError(`SplitAttention: rows must be in 1..${maxRows}, got ${rows}`);
    if (!Number.isInteger(base) || base < 0 || base + rows > capacity)
      throw new InvalidInputError(`SplitAttention: base ${base} + rows ${rows} exceeds capacity ${capacity}`);
    if (!Number.isInteger(lastSlot) || lastSlot < base + rows - 1 || lastSlot >= capacity)
      throw new InvalidInputError(
        `SplitAttention: lastSlot ${lastSlot} must be in ${base + rows - 1}..${capacity - 1}`,
      );
    if (ring !== 0 && lastSlot - base >= MAX_PASS_SLOTS)
      throw new InvalidInputError(
        `SplitAttention: with a ring a pass spans at most ${MAX_PASS_SLOTS} slots, got base ${base} to lastSlot ${lastSlot}`,
      );
    const qBytes = rows * heads * headDim * 4;
    const cacheBytes = kvWordsPerSlot(this.shape) * kvRows(this.shape) * 4;
    const need: [string, GPUBuffer, number][] = [
      ['q', q, qBytes],
      ['out', out, qBytes],
      ['kCache', kCache, cacheBytes],
      ['vCache', vCache, cacheBytes],
      ['vis', vis, rows * 8],
      ['slots', slots, rows * 4],
      ['positions', positions, rows * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`SplitAttention: ${name} holds ${b.size} bytes, need ${bytes}`);
    const chunks = attentionChunks(base, rows, window, lastSlot);
    pass.setPipeline(this.split);
    pass.setBindGroup(
      0,
      this.binds.get(this.split, [
        this.uniform.buffer,
        q,
        kCache,
        vCache,
        vis,
        slots,
        positions,
        out,
        this.partials,
      ]),
    );
    this.ctx.counter.dispatch(pass, chunks, kvHeads, rows);
    if (chunks === 1) return;
    pass.setPipeline(this.merge);
    pass.setBindGroup(
      0,
      this.binds.get(this.merge, [this.uniform.buffer, slots, positions, this.partials, out]),
    );
    this.ctx.counter.dispatch(pass, kvHeads, rows);
  }

  destroy(): void {
    this.uniform.destroy();
    if (this.ownsPartials) this.partials.destroy();
  }
}
