import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { kvWordsPerSlot } from '../kv/kv.js';
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
export const MIN_ATTENTION_WINDOW = 64;
// One uniform for both passes (attention_merge reads only the window).
const Params = defineUniforms('Params', { scale: 'f32', first: 'u32', window: 'u32' });

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
 * Static shape of a {@link SplitAttention}: the attention shape plus the most rows one pass holds
 * and the first slot later rows may see.
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
  f16: boolean;
  /** The serial form of the partial kernel (see {@link GpuContext.kernels}). */
  serial: boolean;
}

function variantOf(shape: AttentionShape, ctx: Pick<GpuContext, 'kernels'>): Variant {
  return {
    G: shape.heads / shape.kvHeads,
    D: shape.headDim,
    f16: shape.format === 'f16',
    serial: ctx.kernels === 'serial',
  };
}

function splitSource(v: Variant): WgslVariant {
  return wgslVariant(shaders.attention_split, Params, {
    WG,
    CH: ATTENTION_CHUNK,
    G: v.G,
    D: v.D,
    KV_F16: v.f16,
    SERIAL: v.serial,
    VB: V_BATCH,
  });
}

function mergeSource(v: Variant): WgslVariant {
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
 * Chunks a pass of `rows` rows at `base` spans: the partial pass's grid width and the stride of
 * its partials (the kernels recompute it as slots[rows - 1] / chunk + 1).
 */
export function attentionChunks(base: number, rows: number): number {
  return Math.floor((base + rows - 1) / ATTENTION_CHUNK) + 1;
}

function checkSplitShape(shape: SplitAttentionShape, ctx: Pick<GpuContext, 'limits' | 'kernels'>): void {
  const { heads, kvHeads, headDim, capacity, maxRows, firstSlot = 0, window = 0 } = shape;
  for (const [name, v] of Object.entries({ heads, kvHeads, headDim, capacity, maxRows }))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`SplitAttention: ${name} must be ≥ 1, got ${v}`);
  if (!Number.isInteger(firstSlot) || firstSlot < 0)
    throw new InvalidInputError(`SplitAttention: firstSlot must be an integer ≥ 0, got ${firstSlot}`);
  if (window !== 0 && !(Number.isInteger(window) && window >= MIN_ATTENTION_WINDOW))
    throw new InvalidInputError(
      `SplitAttention: window must be 0 (none) or an integer ≥ ${MIN_ATTENTION_WINDOW}, got ${window}`,
    );
  if (heads % kvHeads !== 0)
    throw new InvalidInputError(
      `SplitAttention: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`,
    );
  if (headDim % 4 !== 0 || headDim > 4 * WG)
    throw new InvalidInputError(
      `SplitAttention: headDim must be a multiple of 4 up to ${4 * WG}, got ${headDim}`,
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
 * order. A pass whose keys all fit one chunk (base + rows ≤ {@link ATTENTION_CHUNK}) is one
 * dispatch; a longer one is two. Same visibility rule and results as {@link attentionRef} (the
 * oracle), including `firstSlot` (slots below it are keys of their own row only) and `window`
 * (keys a window or more positions behind the row are masked; the workgroups of chunks wholly
 * before a row's window return at once, and the merge folds only the chunks from the window's
 * start); a row's output is bit-identical whatever rows share the pass.
 *
 * Unlike `Attention` it takes the cache base from the `slots` buffer the runner already writes for
 * the KV write (slots[r] = base + r) and T and kvHeads from the grid, so its only uniform (the
 * scale, the first slot and the window) is written once at construction: encoding a decode step
 * writes no buffer. Holds a buffer of chunk partials of maxRows · ⌈capacity / chunk⌉ · (heads ·
 * headDim + 2 · heads) f32, shared by every layer (passes are ordered, so layers may reuse it), and
 * by another instance given it (a model's windowed and global layers).
 */
export class SplitAttention {
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly split: GPUComputePipeline;
  private readonly merge: GPUComputePipeline;
  /** [maxRows, kvHeads, ⌈capacity / chunk⌉, G · (headDim + 2)] f32 chunk partials. */
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
    this.split = ctx.pipelines.get('attention_split', ...splitSource(v));
    this.merge = ctx.pipelines.get('attention_merge', ...mergeSource(v));
    this.scale = shape.scale ?? 1 / Math.sqrt(shape.headDim);
    const maxChunks = Math.ceil(shape.capacity / ATTENTION_CHUNK);
    const partBytes = Math.max(16, shape.maxRows * maxChunks * (shape.heads * (shape.headDim + 2)) * 4);
    if (partBytes > ctx.limits.maxStorageBufferBindingSize)
      throw new InvalidInputError(
        `SplitAttention: chunk partials need ${partBytes} bytes (maxRows ${shape.maxRows}, capacity ${shape.capacity}), over the binding limit ${ctx.limits.maxStorageBufferBindingSize}`,
      );
    if (partials && partials.size < partBytes)
      throw new InvalidInputError(
        `SplitAttention: the shared partials hold ${partials.size} bytes, need ${partBytes} (maxRows ${shape.maxRows}, capacity ${shape.capacity})`,
      );
    this.uniform = new UniformSlot(ctx, Params, 'attention-split-params');
    this.uniform.write({ scale: this.scale, first: shape.firstSlot ?? 0, window: shape.window ?? 0 });
    this.ownsPartials = !partials;
    this.partials = partials ?? createBuffer(ctx, partBytes, 'attention-split-partials');
  }

  /** Compiles both pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shape: AttentionShape): Promise<void> {
    const v = variantOf(shape, ctx);
    await ctx.pipelines.prepare('attention_split', ...splitSource(v));
    await ctx.pipelines.prepare('attention_merge', ...mergeSource(v));
  }

  /** Dispatches {@link SplitAttention.encode} records for `rows` rows at `base`: 1, or 2 past one chunk. */
  static dispatches(base: number, rows: number): 1 | 2 {
    return attentionChunks(base, rows) > 1 ? 2 : 1;
  }

  /**
   * Encodes attention for `rows` queries. q: [rows, heads, headDim]; kCache, vCache: [capacity,
   * kvHeads, headDim]; vis: [rows] vec2<u32>, each row's mask of visible slots among the 64 up to
   * its own (see {@link visWords}); slots: [rows] u32, each row's own slot, increasing (the GPU reads them);
   * positions: [rows] u32, each row's position, the buffer RoPE reads (base + r for a chain, so a
   * chain may pass `slots`; base + depth in a tree; the values matter only with a window);
   * out: [rows, heads, headDim], written. `lastSlot` (default base + rows - 1) bounds the slots the
   * GPU may hold and sizes the grid, so a pass whose rows a kernel placed (a tree grown on the
   * GPU) passes the largest slot it may use. The rows' own K/V must already be in the cache.
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
    const { heads, kvHeads, headDim, capacity, maxRows } = this.shape;
    if (!Number.isInteger(rows) || rows < 1 || rows > maxRows)
      throw new InvalidInputError(`SplitAttention: rows must be in 1..${maxRows}, got ${rows}`);
    if (!Number.isInteger(base) || base < 0 || base + rows > capacity)
      throw new InvalidInputError(`SplitAttention: base ${base} + rows ${rows} exceeds capacity ${capacity}`);
    if (!Number.isInteger(lastSlot) || lastSlot < base + rows - 1 || lastSlot >= capacity)
      throw new InvalidInputError(
        `SplitAttention: lastSlot ${lastSlot} must be in ${base + rows - 1}..${capacity - 1}`,
      );
    const qBytes = rows * heads * headDim * 4;
    const cacheBytes = kvWordsPerSlot(this.shape) * capacity * 4;
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
    const chunks = attentionChunks(lastSlot, 1);
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
