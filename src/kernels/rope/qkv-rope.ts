import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { type KvFormat, type KvLayerBuffers, kvRows, kvWordsPerSlot, kvWriteRef } from '../kv/kv.js';
import { isKvInt } from '../kv/kv-quant.js';
import { rmsNormRef } from '../norm/rmsnorm.js';
import {
  attentionFactorVars,
  checkedRotaryDim,
  type QueryTemperature,
  queryTemperatureRef,
  queryTemperatureVars,
  type RopeOptions,
  ropeRef,
  ropeTable,
} from './rope.js';

const WG = 64; // rmsnorm.wgsl's: the QK-norm reduction must add in the same order
const Params = defineUniforms('Params', {
  heads: 'u32',
  kvHeads: 'u32',
  headDim: 'u32',
  capacity: 'u32',
  eps: 'f32',
  ring: 'u32',
  vEps: 'f32',
});

/**
 * Static options of {@link QkvRope}: RoPE's (with `rotaryDim`, a multiple of 4 here), the KV
 * cache's, and the family switches.
 */
export interface QkvRopeOptions extends RopeOptions {
  /** KV cache slots. */
  capacity: number;
  /** KV cache element type; defaults to 'f32'. */
  format?: KvFormat;
  /**
   * Rows of a ring cache (a sliding-window layer's; see KvShape.ring): k and v of slot s are written
   * at row s mod ring of buffers [ring, kvHeads, headDim]. 0 or absent: no ring.
   */
  ring?: number;
  /** A q|k|v bias vector [qWidth + 2 · kvWidth] (q|k with valueFromKey) is added first (Qwen2). */
  bias: boolean;
  /** Per-head RMSNorm of q and k with weights [headDim] before RoPE (Qwen3): its epsilon. */
  qkNormEps?: number;
  /**
   * Rows are q | k | v | gate, the gate [qWidth] of gated attention (Qwen3.5) last: the row
   * stride is 2 · qWidth + 2 · kvWidth, and the gate columns are left for SigmoidGate.
   */
  outputGate?: boolean;
  /**
   * Per-head RMSNorm of v without a weight before the cache write (Gemma 4's v_norm): its epsilon;
   * v · (mean(v²) + eps)^-½, summed as the QK-norm.
   */
  valueNorm?: number;
  /**
   * Rows are q | k only (Gemma 4's attention_k_eq_v full layers): the row stride is qWidth +
   * kvWidth, and v is k's columns as loaded (+ bias), before the QK-norm and RoPE (then
   * `valueNorm`). Not with `outputGate`.
   */
  valueFromKey?: boolean;
}

/**
 * The qkv row stride of `o`: qWidth + 2 · kvWidth, plus qWidth with `outputGate`, less kvWidth with
 * `valueFromKey`.
 */
export function qkvRowWidth(o: QkvRopeOptions): number {
  const qWidth = o.heads * o.headDim;
  return (o.outputGate ? 2 : 1) * qWidth + (o.valueFromKey ? 1 : 2) * o.kvHeads * o.headDim;
}

/** The bias width of `o`: its q|k|v (q|k with `valueFromKey`) columns, qkvRowWidth without a gate. */
function biasWidth(o: QkvRopeOptions): number {
  return (o.heads + (o.valueFromKey ? 1 : 2) * o.kvHeads) * o.headDim;
}

/** The per-layer weights {@link QkvRope.encode} binds; each present exactly when its option is on. */
export interface QkvRopeWeights {
  /** [qWidth + 2 · kvWidth] q|k|v bias ([qWidth + kvWidth] q|k with valueFromKey). */
  bias?: GPUBuffer;
  /** [headDim] q_norm weight. */
  qNorm?: GPUBuffer;
  /** [headDim] k_norm weight. */
  kNorm?: GPUBuffer;
}

/** Inputs of {@link qkvRopeRef}. */
export interface QkvRopeInputs {
  /** [T, qkvRowWidth(o)] output of the concatenated q|k|v(|gate) matmul. */
  qkv: Float32Array;
  /** [T] RoPE positions. */
  positions: Uint32Array;
  /** [T] cache slots. */
  slots: Uint32Array;
  bias?: Float32Array;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  /**
   * [kvRows, kvHeads, headDim] f32 caches (capacity rows, or `ring` with a ring), written at `slots`
   * (values as the cache holds them).
   */
  kCache: Float32Array;
  vCache: Float32Array;
}

/**
 * Reference of {@link QkvRope}, composed of the unfused references: bias add (f32), rmsNormRef per
 * head (of q and k with a QK-norm; of v with a weight of ones with `valueNorm`), ropeRef on q and
 * k, kvWriteRef. Returns q [T, heads, headDim] and writes k and v into the caches (as f32: an f16
 * cache holds these values rounded to halves).
 */
export function qkvRopeRef(o: QkvRopeOptions, a: QkvRopeInputs): Float32Array {
  const { heads, kvHeads, headDim: D } = o;
  const qW = heads * D;
  const kvW = kvHeads * D;
  const W = qkvRowWidth(o);
  const T = a.positions.length;
  const cols = (from: number, n: number) => {
    const x = new Float32Array(T * n);
    for (let m = 0; m < T; m++)
      for (let i = 0; i < n; i++) {
        const b = a.bias ? a.bias[from + i]! : 0;
        x[m * n + i] = a.bias ? Math.fround(a.qkv[m * W + from + i]! + b) : a.qkv[m * W + from + i]!;
      }
    return x;
  };
  let q: Float32Array = cols(0, qW);
  let k: Float32Array = cols(qW, kvW);
  let v: Float32Array = cols(o.valueFromKey ? qW : qW + kvW, kvW);
  if (o.valueNorm !== undefined) v = rmsNormRef(v, new Float32Array(D).fill(1), { n: D, eps: o.valueNorm });
  if (o.qkNormEps !== undefined) {
    if (!a.qNorm || !a.kNorm) throw new InvalidInputError('qkvRopeRef: QK-norm needs qNorm and kNorm');
    q = rmsNormRef(q, a.qNorm, { n: D, eps: o.qkNormEps });
    k = rmsNormRef(k, a.kNorm, { n: D, eps: o.qkNormEps });
  }
  const R = checkedRotaryDim('qkvRopeRef', o);
  const inv = ropeTable(o, R);
  ropeRef(q, heads, D, a.positions, inv, o.layout, R, o.attentionFactor);
  ropeRef(k, kvHeads, D, a.positions, inv, o.layout, R, o.attentionFactor);
  if (o.queryTemperature) queryTemperatureRef(q, qW, a.positions, o.queryTemperature);
  kvWriteRef({ capacity: o.capacity, kvHeads, headDim: D, ring: o.ring }, a.kCache, a.vCache, k, v, a.slots);
  return q;
}

interface Variant {
  D: number;
  rotaryDim: number;
  gate: boolean;
  f16: boolean;
  /** K and V go to f32 staging rows (an integer cache: KvQuantWrite rounds them in). */
  stage: boolean;
  bias: boolean;
  norm: boolean;
  vNorm: boolean;
  vFromK: boolean;
  interleaved: boolean;
  /** LongRoPE's or YaRN's attention factor (1: none). */
  attentionFactor: number;
  queryTemperature: QueryTemperature | undefined;
}

function variantOf(o: QkvRopeOptions): Variant {
  return {
    D: o.headDim,
    rotaryDim: o.rotaryDim ?? o.headDim,
    gate: o.outputGate ?? false,
    f16: o.format === 'f16',
    stage: isKvInt(o.format),
    bias: o.bias,
    norm: o.qkNormEps !== undefined,
    vNorm: o.valueNorm !== undefined,
    vFromK: o.valueFromKey ?? false,
    interleaved: o.layout === 'interleaved',
    attentionFactor: o.attentionFactor ?? 1,
    queryTemperature: o.queryTemperature,
  };
}

function wgsl(v: Variant): WgslVariant {
  // Optional bindings follow the fixed ones (0 .. 7) in the order bias, q_norm, k_norm.
  const bias = 8;
  const qn = v.bias ? 9 : 8;
  return wgslVariant(shaders.qkv_rope, Params, {
    WG,
    D: v.D,
    ROT: v.rotaryDim,
    OUTPUT_GATE: v.gate,
    KV_F16: v.f16,
    STAGE_KV: v.stage,
    BIAS: v.bias,
    QK_NORM: v.norm,
    V_NORM: v.vNorm,
    V_FROM_K: v.vFromK,
    PER_HEAD: v.norm || v.vNorm,
    INTERLEAVED: v.interleaved,
    ...attentionFactorVars({ attentionFactor: v.attentionFactor }),
    ...queryTemperatureVars({ queryTemperature: v.queryTemperature }),
    BIAS_BINDING: bias,
    QN_BINDING: qn,
    KN_BINDING: qn + 1,
  });
}

/**
 * From the output of one concatenated q|k|v matmul to attention's inputs in one dispatch
 * (qkv_rope.wgsl): optional q|k|v bias (Qwen2), optional QK-norm (Qwen3), RoPE on q and k at
 * explicit positions (on the first rotaryDim elements of each head with partial rotary; Qwen3.5),
 * optional weightless V norm (Gemma 4), rows optionally q|k|v|gate (Qwen3.5's gated attention; the
 * gate is read by SigmoidGate, not here) or q|k with v taken from k (Gemma 4's full layers), q
 * written to a [T, heads, headDim] buffer and k, v written into one layer's KV cache at explicit
 * slots (at rows slot mod ring of a ring cache). Bit-identical to AddInPlace ×3, RmsNorm ×3 (v's
 * with a weight of ones), Rope and KvWrite (with the same ring) in sequence (eight dispatches at
 * most, one). Any headDim that is a multiple of 4 (Gemma 4's 512 included). Its one
 * uniform is static and written at construction, so encoding writes no buffer; owns the inv_freq
 * buffer.
 */
export class QkvRope {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  /** [rotaryDim / 2] f32, uploaded once. */
  readonly invFreq: GPUBuffer;

  /** Checks the options, gets the pipeline (see {@link QkvRope.prepare}), writes the uniform, uploads inv_freq. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: QkvRopeOptions,
  ) {
    const { heads, kvHeads, headDim, theta, capacity } = options;
    for (const [name, v] of Object.entries({ heads, kvHeads, headDim, capacity }))
      if (!Number.isInteger(v) || v < 1)
        throw new InvalidInputError(`QkvRope: ${name} must be ≥ 1, got ${v}`);
    if (headDim % 4 !== 0)
      throw new InvalidInputError(`QkvRope: headDim must be a multiple of 4, got ${headDim}`);
    if (!(theta > 0)) throw new InvalidInputError(`QkvRope: theta must be > 0, got ${theta}`);
    // A rope unit holds two whole pairs, (2u, 2u + 1) and their partners at + rotaryDim/2.
    const rotaryDim = checkedRotaryDim('QkvRope', options);
    if (rotaryDim % 4 !== 0)
      throw new InvalidInputError(`QkvRope: rotaryDim must be a multiple of 4, got ${rotaryDim}`);
    const eps = options.qkNormEps ?? 0;
    if (!(eps >= 0)) throw new InvalidInputError(`QkvRope: qkNormEps must be ≥ 0, got ${eps}`);
    const vEps = options.valueNorm ?? 0;
    if (!(vEps >= 0)) throw new InvalidInputError(`QkvRope: valueNorm must be ≥ 0, got ${vEps}`);
    if (options.valueFromKey && options.outputGate)
      throw new InvalidInputError('QkvRope: valueFromKey and outputGate do not combine (rows q|k|gate?)');
    kvRows(options); // checks the ring
    this.pipeline = ctx.pipelines.get('qkv_rope', ...wgsl(variantOf(options)));
    this.uniform = new UniformSlot(ctx, Params, 'qkv-rope-params');
    this.uniform.write({ heads, kvHeads, headDim, capacity, eps, ring: options.ring ?? 0, vEps });
    this.invFreq = uploadBuffer(ctx, ropeTable(options, rotaryDim), 'qkv-rope-inv-freq');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, options: QkvRopeOptions): Promise<void> {
    await ctx.pipelines.prepare('qkv_rope', ...wgsl(variantOf(options)));
  }

  /**
   * Encodes `rows` tokens. qkv: [rows, qkvRowWidth(options)]; positions, slots: [rows] u32;
   * qOut: [rows, heads, headDim] (written); cache: one layer's K and V buffers, [kvRows, kvHeads,
   * headDim] each (written at slots, mod ring with a ring);
   * weights: the bias when options.bias, qNorm and kNorm when options.qkNormEps is set.
   */
  encode(
    pass: GPUComputePassEncoder,
    qkv: GPUBuffer,
    positions: GPUBuffer,
    slots: GPUBuffer,
    qOut: GPUBuffer,
    cache: KvLayerBuffers,
    rows: number,
    weights: QkvRopeWeights = {},
  ): void {
    const o = this.options;
    const { heads, kvHeads, headDim: D } = o;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`QkvRope: rows must be ≥ 1, got ${rows}`);
    const W = qkvRowWidth(o);
    // An integer cache's K and V go to f32 staging rows [rows, kvHeads, headDim] instead.
    const cacheBytes = isKvInt(o.format) ? rows * kvHeads * D * 4 : kvWordsPerSlot(o) * kvRows(o) * 4;
    const norm = o.qkNormEps !== undefined;
    const check = (name: string, b: GPUBuffer | undefined, bytes: number): GPUBuffer => {
      if (!b) throw new InvalidInputError(`QkvRope: ${name} is missing (the options ask for it)`);
      if (b.size < bytes)
        throw new InvalidInputError(`QkvRope: ${name} holds ${b.size} bytes, need ${bytes}`);
      return b;
    };
    if ((weights.bias !== undefined) !== o.bias || (weights.qNorm !== undefined) !== norm)
      throw new InvalidInputError(
        'QkvRope: pass the bias and the QK-norm weights exactly when the options name them',
      );
    const bound = [
      this.uniform.buffer,
      check('qkv', qkv, rows * W * 4),
      check('positions', positions, rows * 4),
      check('slots', slots, rows * 4),
      this.invFreq,
      check('qOut', qOut, rows * heads * D * 4),
      check('cache.k', cache.k, cacheBytes),
      check('cache.v', cache.v, cacheBytes),
    ];
    if (o.bias) bound.push(check('bias', weights.bias, biasWidth(o) * 4));
    if (norm) bound.push(check('qNorm', weights.qNorm, D * 4), check('kNorm', weights.kNorm, D * 4));
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, bound));
    // A norm: a workgroup per head; otherwise one invocation per 4-element unit (see the header).
    const perHead = norm || o.valueNorm !== undefined;
    const x = perHead ? heads + kvHeads : Math.ceil(((heads + 2 * kvHeads) * D) / 4 / WG);
    this.ctx.counter.dispatch(pass, x, rows);
  }

  destroy(): void {
    this.uniform.destroy();
    this.invFreq.destroy();
  }
}
