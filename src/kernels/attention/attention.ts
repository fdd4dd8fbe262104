import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { type KvFormat, type KvShape, kvWordsPerSlot } from '../kv/kv.js';

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

/**
 * Static shape of an {@link Attention} instance (one per model: every layer shares it): the KV
 * cache's shape and format (kvHeads divides heads for GQA; headDim ≤ 256) plus the query heads.
 */
export interface AttentionShape extends KvShape {
  /** Query heads. */
  heads: number;
  /** Softmax scale; defaults to 1/√headDim. */
  scale?: number;
}

/**
 * `ends` of a chain of `t` rows (every row's subtree reaches the last row): attention over it is
 * causal prefill, and with t = 1 decode. Any value ≥ t - 1 acts the same, so one buffer filled
 * with 0xffffffff serves every causal chunk and decode step.
 */
export function chainEnds(t: number): Uint32Array {
  return new Uint32Array(t).fill(t - 1);
}

/**
 * `ends[i]`, the last row of node i's subtree, from a parent array of a tree laid out depth-first
 * (`parents[i] < i`, or -1 for a root). Throws when the layout is not depth-first (a node's subtree
 * must be a contiguous range starting at the node).
 */
export function subtreeEnds(parents: ArrayLike<number>): Uint32Array {
  const n = parents.length;
  const ends = Uint32Array.from({ length: n }, (_, i) => i);
  // Children come after parents, so a reverse sweep has every subtree finished before its parent.
  for (let i = n - 1; i >= 0; i--) {
    const par = parents[i]!;
    if (par >= i || par < -1 || !Number.isInteger(par))
      throw new InvalidInputError(`subtreeEnds: parents[${i}] = ${par} must be -1 or in [0, ${i})`);
    if (par >= 0) ends[par] = Math.max(ends[par]!, ends[i]!);
  }
  // Depth-first order: every row in [i, ends[i]] must descend from i (ancestors have lower ids).
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j <= ends[i]!; j++) {
      let a = parents[j]!;
      while (a > i) a = parents[a]!;
      if (a !== i)
        throw new InvalidInputError(`subtreeEnds: node ${j} lies in ${i}'s range but is not its descendant`);
    }
  }
  return ends;
}

/** Inputs of {@link attentionRef}: cache contents and the rows to attend from. */
export interface AttentionInputs extends AttentionShape {
  /** [T, heads, headDim] queries. */
  q: Float32Array;
  /** [capacity, kvHeads, headDim] keys (slots < base + T used). */
  k: Float32Array;
  /** [capacity, kvHeads, headDim] values. */
  v: Float32Array;
  /** [T] last row of each row's subtree ({@link chainEnds} for causal). */
  ends: Uint32Array;
  /** Prefix length: row r stands at slot base + r. */
  base: number;
  /** Slots below it are seen only by their own row (default 0), as in `SplitAttentionShape`. */
  firstSlot?: number;
}

/**
 * Plain-TS attention with the same visibility rule as the kernels (prefix slots, then tree slots
 * base + j with j ≤ r ≤ ends[j]; of the slots below `firstSlot` only the row's own), max-subtracted
 * softmax in f64, GQA, output [T, heads, headDim].
 */
export function attentionRef(a: AttentionInputs): Float32Array {
  const { heads, kvHeads, headDim: D, base, ends, firstSlot = 0 } = a;
  const T = ends.length;
  const scale = a.scale ?? 1 / Math.sqrt(D);
  const group = heads / kvHeads;
  const out = new Float32Array(T * heads * D);
  for (let r = 0; r < T; r++) {
    for (let h = 0; h < heads; h++) {
      const kvh = Math.floor(h / group);
      const qo = (r * heads + h) * D;
      const slots: number[] = [];
      for (let s = 0; s <= base + r; s++)
        if ((s < base || ends[s - base]! >= r) && (s >= firstSlot || s === base + r)) slots.push(s);
      const sc = slots.map((s) => {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += a.q[qo + d]! * a.k[(s * kvHeads + kvh) * D + d]!;
        return dot * scale;
      });
      const m = Math.max(...sc);
      const w = sc.map((x) => Math.exp(x - m));
      const z = w.reduce((x, y) => x + y, 0);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        slots.forEach((s, i) => {
          acc += w[i]! * a.v[(s * kvHeads + kvh) * D + d]!;
        });
        out[qo + d] = acc / z;
      }
    }
  }
  return out;
}

function source(format: KvFormat): WgslVariant {
  return wgslVariant(shaders.attention, Params, { WG, KV_F16: format === 'f16' });
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
 * (attention_split.ts) is the faster kernel, and this one stays as its baseline in bench:kernels.
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
