import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const WG = 64;
/** Most rows of one {@link HeadFeatures} pass: a visibility mask spans 64 slots. */
const MAX_ROWS = 64;
const FeatureParams = defineUniforms('Params', { H: 'u32', known: 'u32' });
const VocabParams = defineUniforms('Params', { V: 'u32', Vd: 'u32' });

/** Shape of a {@link HeadFeatures}: the draft head's feature width (the target's hidden size). */
export interface HeadFeaturesShape {
  hidden: number;
}

/** Shape of a {@link VocabScatter}: the target's vocabulary and the draft head's, a subset of it. */
export interface VocabShape {
  vocab: number;
  draftVocab: number;
}

/**
 * The distance d from a row's own slot to its parent's, from its visibility mask (bit d marks the
 * slot d before its own visible): the smallest d in 1..63 whose bit is set, or 64 when none is
 * (slots 64 or more back are the committed prefix, always visible).
 */
function parentDistance(lo: number, hi: number): number {
  for (let d = 1; d < 64; d++) if (((d < 32 ? lo >>> d : hi >>> (d - 32)) & 1) === 1) return d;
  return 64;
}

/**
 * Reference of {@link HeadFeatures}: row r of the result [rows, H] (rows = positions.length), with
 * p = positions[r] and me = slots[r], is zeros when p = 0; the target's feature target[p - 1] when
 * p - 1 < known; else the head's own output own[me - d] of the row's parent, d the smallest of
 * 1..63 whose bit is set in the row's mask (vis: 2 words per row, low first) or 64 when none is;
 * zeros when me < d. target: [≥ known, H]; own: [capacity, H].
 */
export function headFeaturesRef(
  positions: Uint32Array,
  slots: Uint32Array,
  vis: Uint32Array,
  target: Float32Array,
  own: Float32Array,
  H: number,
  known: number,
): Float32Array {
  const out = new Float32Array(positions.length * H);
  positions.forEach((p, r) => {
    if (p === 0) return;
    if (p - 1 < known) {
      out.set(target.subarray((p - 1) * H, p * H), r * H);
      return;
    }
    const me = slots[r]!;
    const d = parentDistance(vis[2 * r]!, vis[2 * r + 1]!);
    if (me >= d) out.set(own.subarray((me - d) * H, (me - d + 1) * H), r * H);
  });
  return out;
}

/**
 * Reference of {@link VocabScatter}: `logits[r · V + d2t[j]] = small[r · Vd + j]` for r < rows,
 * j < Vd (mutates `logits` [rows, V]; every other entry is left as it was). small: [rows, Vd].
 */
export function vocabScatterRef(
  small: Float32Array,
  logits: Float32Array,
  d2t: Uint32Array,
  V: number,
  Vd: number,
  rows: number,
): void {
  for (let r = 0; r < rows; r++) for (let j = 0; j < Vd; j++) logits[r * V + d2t[j]!] = small[r * Vd + j]!;
}

function featuresWgsl(): WgslVariant {
  return wgslVariant(shaders.head_features, FeatureParams, { WG });
}

function vocabWgsl(): WgslVariant {
  return wgslVariant(shaders.head_vocab, VocabParams, { WG });
}

function checkSizes(what: string, need: [string, GPUBuffer, number][]): void {
  for (const [name, b, bytes] of need)
    if (b.size < bytes) throw new InvalidInputError(`${what}: ${name} holds ${b.size} bytes, need ${bytes}`);
}

/**
 * Gathers each row's input feature [rows, H] of a draft head on the GPU (head_features.wgsl), by
 * the rule of {@link headFeaturesRef}: the target's feature of the position before while the
 * target has scored it (p - 1 < known), else the head's own output at the row's parent slot, the
 * nearest slot its visibility mask shows, so a tree grown on the GPU needs no readback. One
 * workgroup per (row, 64 columns); `known` is a uniform written per encode through a
 * {@link UniformSlot}, so one submission may encode several passes with different values.
 */
export class HeadFeatures {
  private readonly uniform: UniformSlot<LayoutKeys<typeof FeatureParams>>;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and gets the pipeline (compiled on first use; see {@link HeadFeatures.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: HeadFeaturesShape,
  ) {
    const H = shape.hidden;
    if (!Number.isInteger(H) || H < 1)
      throw new InvalidInputError(`HeadFeatures: hidden must be ≥ 1, got ${H}`);
    if (Math.ceil(H / WG) > ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(
        `HeadFeatures: hidden ${H} needs more workgroups than one grid dimension holds`,
      );
    this.pipeline = ctx.pipelines.get('head_features', ...featuresWgsl());
    this.uniform = new UniformSlot(ctx, FeatureParams, 'head-features-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('head_features', ...featuresWgsl());
  }

  /**
   * Encodes the features of `rows` rows (1..64). positions, slots: [rows] u32; vis: [rows]
   * vec2<u32>; target: [≥ known, H] f32, the target's features by position; own: [capacity, H]
   * f32, the head's outputs by slot (it must hold every parent slot read); out: [rows, H] f32,
   * written. `known`: how many positions the target has scored.
   */
  encode(
    pass: GPUComputePassEncoder,
    positions: GPUBuffer,
    slots: GPUBuffer,
    vis: GPUBuffer,
    target: GPUBuffer,
    own: GPUBuffer,
    out: GPUBuffer,
    rows: number,
    known: number,
  ): void {
    const H = this.shape.hidden;
    if (!Number.isInteger(rows) || rows < 1 || rows > MAX_ROWS)
      throw new InvalidInputError(`HeadFeatures: rows must be in 1..${MAX_ROWS}, got ${rows}`);
    if (!Number.isInteger(known) || known < 0 || known > 0xffffffff)
      throw new InvalidInputError(`HeadFeatures: known must be an integer ≥ 0, got ${known}`);
    checkSizes('HeadFeatures', [
      ['positions', positions, rows * 4],
      ['slots', slots, rows * 4],
      ['vis', vis, rows * 8],
      ['target', target, known * H * 4],
      ['own', own, H * 4],
      ['out', out, rows * H * 4],
    ]);
    this.uniform.write({ H, known });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(
      0,
      this.binds.get(this.pipeline, [this.uniform.buffer, positions, slots, vis, target, own, out]),
    );
    this.ctx.counter.dispatch(pass, Math.ceil(H / WG), rows);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Writes a draft head's logits over its draft vocabulary [rows, Vd] into full-vocabulary rows
 * [rows, V] (head_vocab.wgsl): `logits[r · V + d2t[j]] = small[r · Vd + j]`, as
 * {@link vocabScatterRef}; no other entry is touched, so the caller presets them to -inf once.
 * d2t ([Vd] u32, strictly increasing ids < V; not owned) is bound at construction, and the rows
 * come from the grid, so the only uniform (V, Vd) is written once: an encode writes no buffer.
 */
export class VocabScatter {
  private readonly uniform: UniformSlot<LayoutKeys<typeof VocabParams>>;
  private readonly pipeline: GPUComputePipeline;

  /** Checks the shape and d2t's size, gets the pipeline (see {@link VocabScatter.prepare}), writes the uniform. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: VocabShape,
    private readonly d2t: GPUBuffer,
  ) {
    const { vocab: V, draftVocab: Vd } = shape;
    for (const [name, v] of Object.entries({ vocab: V, draftVocab: Vd }))
      if (!Number.isInteger(v) || v < 1)
        throw new InvalidInputError(`VocabScatter: ${name} must be ≥ 1, got ${v}`);
    if (Vd > V) throw new InvalidInputError(`VocabScatter: draftVocab ${Vd} exceeds vocab ${V}`);
    checkSizes('VocabScatter', [['d2t', d2t, Vd * 4]]);
    this.pipeline = ctx.pipelines.get('head_vocab', ...vocabWgsl());
    this.uniform = new UniformSlot(ctx, VocabParams, 'head-vocab-params');
    this.uniform.write({ V, Vd });
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('head_vocab', ...vocabWgsl());
  }

  /** Encodes the scatter of `rows` rows. small: [rows, Vd] f32; logits: [rows, V] f32, written at d2t only. */
  encode(pass: GPUComputePassEncoder, small: GPUBuffer, logits: GPUBuffer, rows: number): void {
    const { vocab: V, draftVocab: Vd } = this.shape;
    const maxRows = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    if (!Number.isInteger(rows) || rows < 1 || rows > maxRows)
      throw new InvalidInputError(`VocabScatter: rows must be in 1..${maxRows}, got ${rows}`);
    checkSizes('VocabScatter', [
      ['small', small, rows * Vd * 4],
      ['logits', logits, rows * V * 4],
    ]);
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, this.d2t, small, logits]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil(Vd / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
      rows,
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
