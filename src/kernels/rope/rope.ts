import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const WG = 64;
const Params = defineUniforms('Params', {
  M: 'u32',
  heads: 'u32',
  kvHeads: 'u32',
  headDim: 'u32',
  rotaryDim: 'u32',
});
/** Llama 3 `rope_scaling` (rope_type "llama3"); same fields as `Llama3RopeScaling` of src/model/spec/spec.ts. */
export interface Llama3RopeScaling {
  type?: 'llama3';
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositions: number;
}

/** Linear `rope_scaling` (rope_type "linear"): every frequency divided by `factor`. */
export interface LinearRopeScaling {
  type: 'linear';
  factor: number;
}

/**
 * Proportional RoPE (rope_type "proportional", Gemma 4's full layers), as Transformers'
 * `_compute_proportional_rope_parameters`: the first `rotatedPairs` pairs (i, i + dim/2) turn at
 * 1 / theta^(2i / dim), every frequency then divided by `factor`; the other pairs' frequency is 0
 * (they pass through). dim is the whole head.
 */
export interface ProportionalRopeScaling {
  readonly type: 'proportional';
  readonly rotatedPairs: number;
  readonly factor: number;
}

/** Every RoPE scaling the kernels take. */
export type RopeScaling =
  | Llama3RopeScaling
  | LinearRopeScaling
  | LongRopeScaling
  | YarnRopeScaling
  | ProportionalRopeScaling;

/**
 * LongRoPE `rope_scaling` (rope_type "longrope"); same fields as `LongRopeScaling` of
 * src/model/spec/spec.ts: pair i's frequency divided by `factors[i]`, cos and sin times
 * `attentionFactor` (not applied by these kernels yet: {@link ropeInvFreq} takes the factors).
 */
export interface LongRopeScaling {
  type: 'longrope';
  factors: readonly number[];
  attentionFactor: number;
}

/**
 * YaRN (`rope_type == "yarn"`, Ministral 3), as Transformers' `_compute_yarn_parameters` computes
 * it: pair i blends the interpolated frequency (divided by `factor`) and the original one, the
 * blend ramping linearly over the pairs between the correction dimensions of `betaFast` and
 * `betaSlow` rotations within `originalMaxPositions` (rounded outward to whole pairs when
 * `truncate`); cos and sin are multiplied by `attentionFactor`. llama.cpp's `rope_yarn` with
 * `ext_factor` 1 is the same blend (see {@link yarnInvFreq}).
 */
export interface YarnRopeScaling {
  readonly type: 'yarn';
  readonly factor: number;
  readonly originalMaxPositions: number;
  readonly betaFast: number;
  readonly betaSlow: number;
  /** Transformers' `truncate` (default true): the correction range is floor(low) .. ceil(high). */
  readonly truncate: boolean;
  /** The config's `mscale` and `mscale_all_dim`, where it states them (the GGUF writer needs them). */
  readonly mscale?: number;
  readonly mscaleAllDim?: number;
  /**
   * What cos and sin are multiplied by (f32): the config's `attention_factor`, else
   * mscale(factor, mscale) / mscale(factor, mscaleAllDim) when both are stated and non-zero, else
   * mscale(factor, 1), with mscale(s, m) = 0.1 · m · ln(s) + 1 (1 when s ≤ 1).
   */
  readonly attentionFactor: number;
}

/**
 * Llama 4's attention temperature tuning, as Ministral 3 runs it (`llama_4_scaling_beta`;
 * llama.cpp's `attention.temperature_scale`): after RoPE, the query at position p is multiplied by
 * 1 + beta · ln(1 + floor(p / floorScale)), floorScale being the YaRN original context. It is 1
 * for every position below floorScale.
 */
export interface QueryTemperature {
  readonly beta: number;
  readonly floorScale: number;
}

/** The query multiplier of {@link QueryTemperature} at `position`, in f32 as PyTorch computes it. */
export function queryTemperatureAt(t: QueryTemperature, position: number): number {
  const steps = Math.floor(position / t.floorScale);
  return Math.fround(1 + Math.fround(t.beta * Math.fround(Math.log(Math.fround(1 + steps)))));
}

/** Static options of {@link Rope}. */
export interface RopeOptions {
  heads: number;
  kvHeads: number;
  headDim: number;
  /** `rope_theta`. */
  theta: number;
  /** 'half': HF rotate-half pairs (i, i + headDim/2); 'interleaved': pairs (2i, 2i + 1). */
  layout: 'half' | 'interleaved';
  scaling?: RopeScaling;
  /**
   * Partial rotary (HF `partial_rotary_factor` · headDim): only the first `rotaryDim` elements of
   * each head are rotated, pairs (i, i + rotaryDim/2), and the rest pass through. Even, at most
   * headDim; 'half' layout only. Defaults to headDim.
   */
  rotaryDim?: number;
  /**
   * A layer without RoPE (SmolLM3's): inverse frequencies of zero, so every angle is 0, cos and sin
   * are exactly 1 and 0, and the rotation leaves q and k as they are.
   */
  none?: boolean;
  /**
   * LongRoPE's attention factor (Phi-3.5, Phi-4-mini): cos and sin are multiplied by it, in f32,
   * before they turn a pair. Default 1 (no multiply: another pipeline variant holds the factor).
   */
  attentionFactor?: number;
  /** Llama 4's query temperature (Ministral 3): q, after its rotation, times {@link queryTemperatureAt}. */
  queryTemperature?: QueryTemperature;
}

/** The WGSL variables of `o`'s query temperature: none, or its beta's f32 bits and its floor scale. */
export function queryTemperatureVars(
  o: Pick<RopeOptions, 'queryTemperature'>,
): Record<string, boolean | number> {
  const t = o.queryTemperature;
  if (t === undefined) return { Q_TEMP: false };
  if (!Number.isSafeInteger(t.floorScale) || t.floorScale < 1 || !Number.isFinite(t.beta))
    throw new InvalidInputError(
      `rope: query temperature needs a finite beta and a positive integer floor scale, got ${t.beta}, ${t.floorScale}`,
    );
  return {
    Q_TEMP: true,
    Q_TEMP_BETA_BITS: new Uint32Array(new Float32Array([t.beta]).buffer)[0]!,
    Q_TEMP_FLOOR: t.floorScale,
  };
}

/** The WGSL variables of `o`'s attention factor: none at 1, else its f32 bits as a constant. */
export function attentionFactorVars(
  o: Pick<RopeOptions, 'attentionFactor'>,
): Record<string, boolean | number> {
  const af = Math.fround(o.attentionFactor ?? 1);
  if (af === 1) return { ATTN_FACTOR: false };
  return { ATTN_FACTOR: true, ATTN_FACTOR_BITS: new Uint32Array(new Float32Array([af]).buffer)[0]! };
}

/** The inverse frequencies [rotaryDim / 2] the kernels upload for `o` (zeros for a layer without RoPE). */
export function ropeTable(o: RopeOptions, rotaryDim: number): Float32Array {
  return o.none ? new Float32Array(rotaryDim / 2) : ropeInvFreq(rotaryDim, o.theta, o.scaling);
}

/**
 * The rotary width of `o` (`rotaryDim`, else headDim), checked: an even integer in 2 .. headDim,
 * and headDim itself in the interleaved layout. Throws InvalidInputError naming `op`.
 */
export function checkedRotaryDim(op: string, o: RopeOptions): number {
  const r = o.rotaryDim ?? o.headDim;
  if (!Number.isInteger(r) || r < 2 || r % 2 !== 0 || r > o.headDim)
    throw new InvalidInputError(`${op}: rotaryDim must be even, 2 .. headDim ${o.headDim}, got ${r}`);
  if (o.layout === 'interleaved' && r !== o.headDim)
    throw new InvalidInputError(
      `${op}: partial rotary (rotaryDim ${r} < headDim ${o.headDim}) needs layout 'half'`,
    );
  return r;
}

/**
 * YaRN's inv_freq [dim / 2] as Transformers' `_compute_yarn_parameters` computes it, each step in
 * f32 as PyTorch takes it: pos = theta^(2i / dim), extrapolated 1 / pos and interpolated
 * 1 / (factor · pos), and the extrapolation weight 1 - clamp((i - low) / (high - low), 0, 1) over
 * the correction range [low, high] (dims where `betaFast` and `betaSlow` rotations fit in the
 * original context: dim · ln(original / (2π · beta)) / (2 ln theta), floored and ceiled when
 * `truncate`, clamped to 0 .. dim - 1; high - low at least 0.001). The reference forward uses it
 * too.
 */
export function yarnInvFreq(dim: number, theta: number, s: YarnRopeScaling): Float32Array {
  const f = Math.fround;
  const corr = (rotations: number) =>
    (dim * Math.log(s.originalMaxPositions / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
  let low = corr(s.betaFast);
  let high = corr(s.betaSlow);
  if (s.truncate) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001;
  const factor = f(s.factor);
  return Float32Array.from({ length: dim / 2 }, (_, i) => {
    const pos = f(theta ** f((2 * i) / dim));
    const extrapolated = f(1 / pos);
    const interpolated = f(1 / f(factor * pos));
    const ramp = Math.min(Math.max(f(f(i - low) / f(high - low)), 0), 1);
    const keep = f(1 - ramp);
    return f(f(interpolated * f(1 - keep)) + f(extrapolated * keep));
  });
}

/**
 * inv_freq [dim / 2] as Hugging Face computes it, dim the rotary width (headDim, or rotaryDim for
 * partial rotary): 1 / theta^(2i / dim) in f32, then, with linear scaling, divided by its factor, or with
 * llama3 scaling, `_compute_llama3_parameters`: wavelengths above original/lowFreqFactor are divided
 * by `factor`, those below original/highFreqFactor kept, and the band between smoothly
 * interpolated. Intermediate steps run in f64 and round to f32 at the end (torch runs them in f32,
 * so the last bit may differ). LongRoPE (`_compute_longrope_parameters`): 1 / (factors[i] ·
 * theta^(2i / dim)), each step rounded to f32 as torch takes it, bit for bit the reference's
 * `ropeInverseFrequencies`; throws InvalidInputError unless there are dim / 2 factors. YaRN:
 * {@link yarnInvFreq}.
 */
export function ropeInvFreq(dim: number, theta: number, scaling?: RopeScaling): Float32Array {
  const half = dim / 2;
  if (scaling?.type === 'yarn') return yarnInvFreq(dim, theta, scaling);
  if (scaling?.type === 'longrope') {
    const factors = scaling.factors;
    if (factors.length !== half)
      throw new InvalidInputError(
        `ropeInvFreq: LongRoPE has ${factors.length} factors for ${half} rotary pairs (rotaryDim ${dim})`,
      );
    return Float32Array.from({ length: half }, (_, i) => {
      const base = Math.fround(theta ** Math.fround((2 * i) / dim));
      return 1 / Math.fround(Math.fround(factors[i]!) * base);
    });
  }
  const inv = Float32Array.from({ length: half }, (_, i) =>
    Math.fround(1 / Math.fround(theta ** Math.fround((2 * i) / dim))),
  );
  if (!scaling) return inv;
  if (scaling.type === 'linear') return inv.map((f) => f / scaling.factor);
  if (scaling.type === 'proportional')
    return inv.map((f, i) => (i < scaling.rotatedPairs ? f / scaling.factor : 0));
  const { factor, lowFreqFactor: lo, highFreqFactor: hi, originalMaxPositions: old } = scaling;
  const lowWavelen = old / lo;
  const highWavelen = old / hi;
  return inv.map((f) => {
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < highWavelen) return f;
    if (wavelen > lowWavelen) return f / factor;
    const smooth = (old / wavelen - lo) / (hi - lo);
    return (1 - smooth) * (f / factor) + smooth * f;
  });
}

/**
 * Reference RoPE, in place on x [M, nHeads, headDim]: angle = f32(pos · inv_freq[i]), then the
 * exact cos/sin of that f32 angle (f64), output rounded to f32. With `rotaryDim` < headDim (layout
 * 'half'), pairs (i, i + rotaryDim/2) of the first rotaryDim elements are rotated and the others
 * left as they are; invFreq then holds rotaryDim / 2 entries (`ropeInvFreq(rotaryDim, ...)`).
 */
export function ropeRef(
  x: Float32Array,
  nHeads: number,
  headDim: number,
  positions: Uint32Array,
  invFreq: Float32Array,
  layout: RopeOptions['layout'],
  rotaryDim = headDim,
  attentionFactor = 1,
): void {
  const half = rotaryDim / 2;
  const af = Math.fround(attentionFactor);
  positions.forEach((pos, m) => {
    for (let h = 0; h < nHeads; h++) {
      const base = (m * nHeads + h) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(pos * invFreq[i]!);
        const c = af === 1 ? Math.cos(angle) : Math.fround(Math.cos(angle)) * af;
        const s = af === 1 ? Math.sin(angle) : Math.fround(Math.sin(angle)) * af;
        const ia = base + (layout === 'half' ? i : 2 * i);
        const ib = base + (layout === 'half' ? i + half : 2 * i + 1);
        const a = x[ia]!;
        const b = x[ib]!;
        x[ia] = a * c - b * s;
        x[ib] = b * c + a * s;
      }
    }
  });
}

function ropeWgsl(
  layout: RopeOptions['layout'],
  attentionFactor = 1,
  queryTemperature?: QueryTemperature,
): WgslVariant {
  return wgslVariant(shaders.rope, Params, {
    WG,
    INTERLEAVED: layout === 'interleaved',
    ...attentionFactorVars({ attentionFactor }),
    ...queryTemperatureVars({ queryTemperature }),
  });
}

/**
 * Multiplies each query row m of x [M, heads, headDim] by the query temperature at positions[m]
 * (in f32), as Ministral 3 does after RoPE; the reference of the kernels' Q_TEMP variant.
 */
export function queryTemperatureRef(
  x: Float32Array,
  rowWidth: number,
  positions: ArrayLike<number>,
  t: QueryTemperature,
): void {
  for (let m = 0; m < positions.length; m++) {
    const scale = queryTemperatureAt(t, positions[m]!);
    if (scale === 1) continue;
    for (let i = m * rowWidth; i < (m + 1) * rowWidth; i++) x[i] = Math.fround(x[i]! * scale);
  }
}

/**
 * Rotary embedding on the GPU (rope.wgsl), in place on q [M, heads, headDim] and
 * k [M, kvHeads, headDim] in one dispatch, at explicit positions (u32 [M], each below 102,900:
 * the kernel's Cody-Waite reduction by π/2 is exact while the quadrant count stays below 2^16);
 * with `rotaryDim`, on the first rotaryDim elements of each head only. Owns the inv_freq buffer.
 */
export class Rope {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  /** [rotaryDim / 2] f32, uploaded once. */
  readonly invFreq: GPUBuffer;
  private readonly rotaryDim: number;

  /** Checks the options, gets the pipeline (see {@link Rope.prepare}) and uploads inv_freq. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: RopeOptions,
  ) {
    const { heads, kvHeads, headDim, theta } = options;
    for (const [name, v] of Object.entries({ heads, kvHeads, headDim }))
      if (!Number.isInteger(v) || v < 1) throw new InvalidInputError(`Rope: ${name} must be ≥ 1, got ${v}`);
    if (headDim % 2 !== 0) throw new InvalidInputError(`Rope: headDim must be even, got ${headDim}`);
    if (!(theta > 0)) throw new InvalidInputError(`Rope: theta must be > 0, got ${theta}`);
    this.rotaryDim = checkedRotaryDim('Rope', options);
    if (options.queryTemperature && this.rotaryDim !== headDim)
      throw new InvalidInputError('Rope: a query temperature needs RoPE on the whole head');
    this.pipeline = ctx.pipelines.get(
      'rope',
      ...ropeWgsl(options.layout, options.attentionFactor, options.queryTemperature),
    );
    this.uniform = new UniformSlot(ctx, Params, 'rope-params');
    this.invFreq = uploadBuffer(ctx, ropeTable(options, this.rotaryDim), 'rope-inv-freq');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(
    ctx: GpuContext,
    layout: RopeOptions['layout'],
    attentionFactor = 1,
    queryTemperature?: QueryTemperature,
  ): Promise<void> {
    await ctx.pipelines.prepare('rope', ...ropeWgsl(layout, attentionFactor, queryTemperature));
  }

  /** Encodes the rotation of `rows` tokens. positions: [rows] u32; q, k: rotated in place. */
  encode(pass: GPUComputePassEncoder, q: GPUBuffer, k: GPUBuffer, positions: GPUBuffer, rows: number): void {
    const { heads, kvHeads, headDim } = this.options;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`Rope: rows must be ≥ 1, got ${rows}`);
    const need: [string, GPUBuffer, number][] = [
      ['q', q, rows * heads * headDim * 4],
      ['k', k, rows * kvHeads * headDim * 4],
      ['positions', positions, rows * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes) throw new InvalidInputError(`Rope: ${name} holds ${b.size} bytes, need ${bytes}`);
    const rotaryDim = this.rotaryDim;
    this.uniform.write({ M: rows, heads, kvHeads, headDim, rotaryDim });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, positions, this.invFreq, q, k]));
    const pairs = (rows * (heads + kvHeads) * rotaryDim) / 2;
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil(pairs / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
    this.invFreq.destroy();
  }
}
