import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { f16BitsToF32, f32ToF16Bits } from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import {
  decodeKvIntRow,
  isKvInt,
  type KvIntFormat,
  kvIntHeadWords,
  kvRotatable,
  unrotateRow,
} from './kv-quant.js';

const WG = 64;
const WriteParams = defineUniforms('Params', { M: 'u32', row: 'u32', capacity: 'u32', ring: 'u32' });
const CompactParams = defineUniforms('Params', {
  count: 'u32',
  row: 'u32',
  prefixLen: 'u32',
  capacity: 'u32',
  ring: 'u32',
});

/**
 * The most slots one pass writes: a chain of at most 64 rows, a tree of at most 64 nodes, at slots
 * base .. base + 63 (the model's MAX_FORWARD_TOKENS). A {@link KvShape.ring} holds at least this
 * many rows, so the slots of one pass, or of one committed path, fall on distinct rows.
 */
export const MAX_PASS_SLOTS = 64;

/**
 * Element type of the KV cache: f32; IEEE halves packed two per u32 (element 2j in the low 16
 * bits); or `int8` / `int4`, per slot and head a scale and the values rounded to it (kv-quant.ts),
 * with the keys optionally rotated per head first ({@link KvShape.rotate}).
 */
export type KvFormat = 'f32' | 'f16' | KvIntFormat;

/** Every {@link KvFormat}, for checking input. */
export const KV_FORMATS: readonly KvFormat[] = ['f32', 'f16', 'int8', 'int4'];

/**
 * Shape of one layer's KV cache: K and V buffers [capacity, kvHeads, headDim], slot = absolute
 * position; `row = kvHeads * headDim` elements per slot, stored as f32 or (format 'f16') packed halves,
 * which halves the cache's memory and the bytes attention reads. With a `ring` (a sliding-window
 * layer), the buffers hold only `ring` rows, [ring, kvHeads, headDim], and slot s lives at row
 * s mod ring: slots stay absolute (below capacity) everywhere else.
 */
export interface KvShape {
  /** Slots: every slot a kernel addresses is below it. */
  capacity: number;
  kvHeads: number;
  headDim: number;
  /** Defaults to 'f32'. */
  format?: KvFormat;
  /**
   * An integer cache's keys are rotated per head (kv-quant.ts: R = H·diag(s)/√D) before rounding,
   * and the queries that score them the same way; headDim a power of two. Ignored for f32 and f16.
   */
  rotate?: boolean;
  /**
   * Rows of a ring cache (Gemma 3's and Mistral's sliding-window layers, whose memory then does not
   * grow with the context): slot s at row s mod ring, so a slot overwrites the one `ring` before
   * it. 0 or absent: no ring (slot s at row s). At least {@link MAX_PASS_SLOTS}; attention over a
   * ring needs a window W with ring ≥ W + MAX_PASS_SLOTS (see SplitAttentionShape), so a pass's
   * writes never overwrite a key one of its rows still sees.
   */
  ring?: number;
}

/** One layer's cache buffers, each [kvRows(shape), kvHeads, headDim] in the cache's {@link KvFormat}. */
export interface KvLayerBuffers {
  k: GPUBuffer;
  v: GPUBuffer;
}

function writeWgsl(format: KvFormat): WgslVariant {
  return wgslVariant(shaders.kv_write, WriteParams, { WG, KV_F16: format === 'f16' });
}

function compactWgsl(): WgslVariant {
  return wgslVariant(shaders.kv_compact, CompactParams, { WG });
}

function rowOf(shape: KvShape): number {
  const { capacity, kvHeads, headDim, ring = 0 } = shape;
  for (const [name, v] of Object.entries({ capacity, kvHeads, headDim }))
    if (!Number.isInteger(v) || v < 1) throw new InvalidInputError(`KV cache: ${name} must be ≥ 1, got ${v}`);
  if (shape.format === 'f16' && headDim % 2 !== 0)
    throw new InvalidInputError(`KV cache: an f16 cache needs an even headDim, got ${headDim}`);
  if (isKvInt(shape.format)) {
    kvIntHeadWords(shape.format, headDim);
    if (shape.rotate && !kvRotatable(headDim))
      throw new InvalidInputError(
        `KV cache: rotated keys need headDim a power of two (≤ 512), got ${headDim}: pass rotate false`,
      );
  }
  if (ring !== 0 && !(Number.isInteger(ring) && ring >= MAX_PASS_SLOTS))
    throw new InvalidInputError(
      `KV cache: ring must be 0 (none) or an integer ≥ ${MAX_PASS_SLOTS} (the slots of one pass), got ${ring}`,
    );
  return kvHeads * headDim;
}

/** u32 words per cache slot. */
export function kvWordsPerSlot(shape: KvShape): number {
  const row = rowOf(shape);
  if (isKvInt(shape.format)) return shape.kvHeads * kvIntHeadWords(shape.format, shape.headDim);
  return shape.format === 'f16' ? row / 2 : row;
}

/** Whether `shape`'s keys are stored rotated (an integer format with {@link KvShape.rotate}). */
export function kvRotated(shape: KvShape): boolean {
  return isKvInt(shape.format) && shape.rotate === true;
}

/**
 * The values of whole slots of a cache's words (`words`: n slots of {@link kvWordsPerSlot}) as f32
 * [n, kvHeads, headDim]: the keys of a rotated cache turned back (`keys`), so a plain query scores
 * them as the rotated query scores the cache.
 */
export function decodeKvWords(shape: KvShape, words: Uint32Array, keys: boolean): Float32Array {
  const row = rowOf(shape);
  const per = kvWordsPerSlot(shape);
  const n = Math.floor(words.length / per);
  const { format = 'f32', kvHeads, headDim } = shape;
  if (format === 'f32') return new Float32Array(words.buffer, words.byteOffset, n * row).slice();
  if (format === 'f16') return unpackHalves(words, n * row);
  const out = new Float32Array(n * row);
  for (let s = 0; s < n; s++) {
    const vals = decodeKvIntRow(format, kvHeads, headDim, words.subarray(s * per, (s + 1) * per));
    if (keys && shape.rotate) out.set(unrotateRow(vals, kvHeads, headDim), s * row);
    else out.set(vals, s * row);
  }
  return out;
}

/** Rows the K and V buffers of a cache of this shape hold: `ring`, or without one `capacity`. */
export function kvRows(shape: KvShape): number {
  rowOf(shape);
  return shape.ring || shape.capacity;
}

/** The row of `shape`'s buffers that holds slot `slot`: slot mod ring, or the slot itself. */
export function kvRowOf(shape: KvShape, slot: number): number {
  return shape.ring ? slot % shape.ring : slot;
}

/**
 * The ring a cache of shape `shape` (with a {@link KvShape.ring}) holds once slots 0 .. last were
 * written in order, from a full cache `full` [capacity, kvHeads, headDim] holding the same rows:
 * row p holds the largest slot s ≤ last with s ≡ p (mod ring); rows no such slot reached stay 0.
 * The tests' bridge from the references on a full cache to the kernels on a ring.
 */
export function kvRingOf(shape: KvShape, full: Float32Array, last: number): Float32Array {
  const row = rowOf(shape);
  const R = kvRows(shape);
  const out = new Float32Array(R * row);
  for (let s = Math.max(0, last + 1 - R); s <= last; s++)
    out.set(full.subarray(s * row, (s + 1) * row), kvRowOf(shape, s) * row);
  return out;
}

/** Packs f32 values (even count) as IEEE halves, two per u32, rounding to nearest even: the f16 cache layout. */
export function packHalves(x: Float32Array): Uint32Array {
  const out = new Uint32Array(Math.ceil(x.length / 2));
  for (let i = 0; i < out.length; i++)
    out[i] = (f32ToF16Bits(x[2 * i]!) | (f32ToF16Bits(x[2 * i + 1] ?? 0) << 16)) >>> 0;
  return out;
}

/** The first `n` values of halves packed by {@link packHalves}, as f32. */
export function unpackHalves(words: Uint32Array, n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) =>
    f16BitsToF32((words[i >> 1]! >>> (16 * (i & 1))) & 0xffff),
  );
}

export function checkCache(what: string, shape: KvShape, layers: readonly KvLayerBuffers[]): void {
  const bytes = kvRows(shape) * kvWordsPerSlot(shape) * 4;
  layers.forEach((l, i) => {
    if (l.k.size < bytes || l.v.size < bytes)
      throw new InvalidInputError(
        `${what}: layer ${i} cache holds ${Math.min(l.k.size, l.v.size)} bytes, need ${bytes}`,
      );
  });
}

/**
 * Reference of {@link KvWrite}: `cache[slots[i]] = rows[i]` for K and V (mutates the caches, at row
 * slots[i] mod ring with a ring).
 */
export function kvWriteRef(
  shape: KvShape,
  kCache: Float32Array,
  vCache: Float32Array,
  k: Float32Array,
  v: Float32Array,
  slots: Uint32Array,
): void {
  const row = rowOf(shape);
  slots.forEach((s, i) => {
    kCache.set(k.subarray(i * row, (i + 1) * row), kvRowOf(shape, s) * row);
    vCache.set(v.subarray(i * row, (i + 1) * row), kvRowOf(shape, s) * row);
  });
}

/**
 * Throws unless `slots` can be compacted to prefixLen, prefixLen + 1, ...: strictly increasing,
 * ≥ prefixLen and < capacity, and with a ring less than `ring` past prefixLen (so every slot
 * involved has a row of its own). These are what make the in-place kernel safe (see kv_compact.wgsl).
 */
export function checkCompaction(shape: KvShape, slots: ArrayLike<number>, prefixLen: number): void {
  for (let a = 0; a < slots.length; a++) {
    const s = slots[a]!;
    const prev = a === 0 ? prefixLen - 1 : slots[a - 1]!;
    if (!Number.isInteger(s) || s <= prev || s >= shape.capacity)
      throw new InvalidInputError(
        `KV compaction: slots[${a}] = ${s} must be > ${prev} (strictly increasing, ≥ prefixLen ${prefixLen}) and < capacity ${shape.capacity}`,
      );
    if (shape.ring && s - prefixLen >= shape.ring)
      throw new InvalidInputError(
        `KV compaction: slots[${a}] = ${s} lies ${s - prefixLen} slots past prefixLen ${prefixLen}, a ring of ${shape.ring} rows holds fewer`,
      );
  }
}

/**
 * Reference of {@link KvCompact}: slot prefixLen + a takes the old slot slots[a], for K and V (rows
 * mod ring with a ring).
 */
export function kvCompactRef(
  shape: KvShape,
  kCache: Float32Array,
  vCache: Float32Array,
  slots: Uint32Array,
  prefixLen: number,
): void {
  const row = rowOf(shape);
  const at = (s: number) => kvRowOf(shape, s) * row;
  // Gather first, then scatter: obviously correct whatever the overlap.
  for (const c of [kCache, vCache]) {
    const rows = Array.from(slots, (s) => c.slice(at(s), at(s) + row));
    rows.forEach((r, a) => {
      c.set(r, at(prefixLen + a));
    });
  }
}

/**
 * Writes M new key/value rows [M, kvHeads, headDim] into one layer's cache at explicit slots (a u32
 * buffer [M]), e.g. positions prefix + depth of tree nodes, at rows slot mod ring with a
 * {@link KvShape.ring}. One dispatch writes both K and V.
 */
export class KvWrite {
  private readonly uniform: UniformSlot<LayoutKeys<typeof WriteParams>>;
  private readonly row: number;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link KvWrite.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: KvShape,
  ) {
    this.row = rowOf(shape);
    this.pipeline = ctx.pipelines.get('kv_write', ...writeWgsl(shape.format ?? 'f32'));
    this.uniform = new UniformSlot(ctx, WriteParams, 'kv-write-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, format: KvFormat = 'f32'): Promise<void> {
    await ctx.pipelines.prepare('kv_write', ...writeWgsl(format));
  }

  /**
   * Encodes `cache[slots[i]] = k[i] / v[i]` for i < rows. k, v: [rows, kvHeads, headDim]; slots:
   * [rows] u32, distinct (and with a ring distinct mod ring: at most {@link MAX_PASS_SLOTS}
   * consecutive slots); cache: [kvRows(shape), kvHeads, headDim] each.
   */
  encode(
    pass: GPUComputePassEncoder,
    k: GPUBuffer,
    v: GPUBuffer,
    slots: GPUBuffer,
    cache: KvLayerBuffers,
    rows: number,
  ): void {
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`KvWrite: rows must be ≥ 1, got ${rows}`);
    const bytes = rows * this.row * 4;
    if (k.size < bytes || v.size < bytes)
      throw new InvalidInputError(`KvWrite: k/v hold ${k.size}/${v.size} bytes, need ${bytes}`);
    if (slots.size < rows * 4)
      throw new InvalidInputError(`KvWrite: slots holds ${slots.size} bytes, need ${rows * 4}`);
    checkCache('KvWrite', this.shape, [cache]);
    this.uniform.write({ M: rows, row: this.row, capacity: this.shape.capacity, ring: this.shape.ring ?? 0 });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, slots, k, v, cache.k, cache.v]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(
        Math.ceil((rows * kvWordsPerSlot(this.shape)) / WG),
        this.ctx.limits.maxComputeWorkgroupsPerDimension,
      ),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Commits an accepted tree path: moves the K/V rows at `slots` (strictly increasing, ≥ prefixLen,
 * see {@link checkCompaction}) to slots prefixLen, prefixLen + 1, ... in every layer's cache, in
 * place (one dispatch per layer, one uniform write). With a {@link KvShape.ring} every slot is at
 * its row mod ring; every layer given must have this instance's ring.
 */
export class KvCompact {
  private readonly uniform: UniformSlot<LayoutKeys<typeof CompactParams>>;
  private readonly row: number;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link KvCompact.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: KvShape,
  ) {
    this.row = kvWordsPerSlot(shape); // the kernel moves raw u32 words
    this.pipeline = ctx.pipelines.get('kv_compact', ...compactWgsl());
    this.uniform = new UniformSlot(ctx, CompactParams, 'kv-compact-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('kv_compact', ...compactWgsl());
  }

  /** Encodes the move of `count` rows (slots: [count] u32) for every layer in `layers`. */
  encode(
    pass: GPUComputePassEncoder,
    layers: readonly KvLayerBuffers[],
    slots: GPUBuffer,
    count: number,
    prefixLen: number,
  ): void {
    if (!Number.isInteger(count) || count < 1)
      throw new InvalidInputError(`KvCompact: count must be ≥ 1, got ${count}`);
    if (!Number.isInteger(prefixLen) || prefixLen < 0 || prefixLen + count > this.shape.capacity)
      throw new InvalidInputError(
        `KvCompact: prefixLen ${prefixLen} + count ${count} exceeds capacity ${this.shape.capacity}`,
      );
    if (slots.size < count * 4)
      throw new InvalidInputError(`KvCompact: slots holds ${slots.size} bytes, need ${count * 4}`);
    checkCache('KvCompact', this.shape, layers);
    this.uniform.write({
      count,
      row: this.row,
      prefixLen,
      capacity: this.shape.capacity,
      ring: this.shape.ring ?? 0,
    });
    pass.setPipeline(this.pipeline);
    const wgs = grid(Math.ceil(this.row / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension);
    for (const l of layers) {
      pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, slots, l.k, l.v]));
      this.ctx.counter.dispatch(pass, ...wgs);
    }
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
