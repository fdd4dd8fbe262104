import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { geluTanh } from '../elementwise/elementwise.js';

const WG = 64;
const CombineParams = defineUniforms('Params', { rows: 'u32', width: 'u32', eps: 'f32', proj_scale: 'f32' });
const GateParams = defineUniforms('Params', { width: 'u32', stride: 'u32', offset: 'u32' });

/** Static options of {@link PleCombine}: the per-layer inputs' shape, the model's width and the norm's eps. */
export interface PleCombineOptions {
  /** Layers L: each token has L slices of `width` values. */
  layers: number;
  /** Per-layer input width P (the norm's width). */
  width: number;
  /** Hidden size H: the projection is scaled by f32(1/√H). */
  hidden: number;
  eps: number;
}

/** Static options of {@link PleGate}: the per-layer inputs' shape. */
export type PleGateOptions = Pick<PleCombineOptions, 'layers' | 'width'>;

/**
 * Reference of {@link PleCombine}, rounding as the model's reference does (`pleRef`, its `rmsNorm`):
 * for each slice r of P values of proj, tok [T, L·P], v = f32(proj · f32(1/√H)); mean of v² summed
 * in f64, rounded to f32; n = f32(w · f32(v · 1/√(mean + eps))); out = f32(f32(n + tok) · f32(1/√2)).
 * Returns out [T, L·P].
 */
export function pleCombineRef(
  proj: Float32Array,
  tok: Float32Array,
  norm: Float32Array,
  opts: PleCombineOptions,
): Float32Array {
  const { width: P, hidden, eps } = opts;
  const scale = Math.fround(1 / Math.sqrt(hidden));
  const mix = Math.fround(Math.SQRT1_2);
  const out = new Float32Array(proj.length);
  const v = new Float32Array(P);
  for (let base = 0; base < proj.length; base += P) {
    let ss = 0;
    for (let i = 0; i < P; i++) {
      v[i] = proj[base + i]! * scale;
      ss += v[i]! ** 2;
    }
    const inv = 1 / Math.sqrt(Math.fround(ss / P) + eps);
    for (let i = 0; i < P; i++) {
      const n = Math.fround(norm[i]! * Math.fround(v[i]! * inv));
      out[base + i] = Math.fround(n + tok[base + i]!) * mix;
    }
  }
  return out;
}

/**
 * Reference of {@link PleGate} for layer `layer`: out[t, j] = f32(f32(geluTanh(g[t, j])) ·
 * inputs[t, layer·P + j]), g [T, P], inputs [T, L·P] ({@link pleCombineRef}'s output). Returns out [T, P].
 */
export function pleGateRef(
  g: Float32Array,
  inputs: Float32Array,
  layer: number,
  opts: PleGateOptions,
): Float32Array {
  const { layers: L, width: P } = opts;
  const out = new Float32Array(g.length);
  for (let t = 0; t < g.length / P; t++)
    for (let j = 0; j < P; j++)
      out[t * P + j] = Math.fround(geluTanh(g[t * P + j]!)) * inputs[t * L * P + layer * P + j]!;
  return out;
}

function combineWgsl(): WgslVariant {
  return wgslVariant(shaders.ple_combine, CombineParams, { WG });
}

function gateWgsl(): WgslVariant {
  return wgslVariant(shaders.ple_gate, GateParams, { WG, GELU: true });
}

/** Throws unless each named option is a positive integer. */
function checkCounts(kernel: string, counts: Record<string, number>): void {
  for (const [name, v] of Object.entries(counts))
    if (!Number.isInteger(v) || v < 1)
      throw new InvalidInputError(`${kernel}: ${name} must be a positive integer, got ${v}`);
}

/** Throws unless each buffer holds its bytes. */
function checkSizes(kernel: string, bufs: Record<string, [GPUBuffer, number]>): void {
  for (const [name, [b, bytes]] of Object.entries(bufs))
    if (b.size < bytes)
      throw new InvalidInputError(`${kernel}: ${name} holds ${b.size} bytes, need ${bytes}`);
}

/** Throws unless `out` is none of `inputs`. */
function checkDistinct(kernel: string, out: GPUBuffer, inputs: Record<string, GPUBuffer>): void {
  for (const [name, b] of Object.entries(inputs))
    if (b === out) throw new InvalidInputError(`${kernel}: out and ${name} must be different buffers`);
}

/**
 * Gemma 4's per-layer inputs on the GPU (ple_combine.wgsl), from the two halves the model computes
 * for each token: proj = per_layer_model_projection · x (a matmul) and tok = the per-layer table's
 * row of the token times √P (an Embedding), both [T, L·P]. Each slice of P values is scaled by
 * 1/√H, RMS-normed with the weight [P], added to tok and scaled by 1/√2 (see {@link pleCombineRef}).
 */
export class PleCombine {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof CombineParams>>;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link PleCombine.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: PleCombineOptions,
  ) {
    const { layers, width, hidden, eps } = options;
    checkCounts('PleCombine', { layers, width, hidden });
    if (!(eps >= 0)) throw new InvalidInputError(`PleCombine: eps must be ≥ 0, got ${eps}`);
    this.pipeline = ctx.pipelines.get('ple_combine', ...combineWgsl());
    this.uniform = new UniformSlot(ctx, CombineParams, 'ple-combine-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('ple_combine', ...combineWgsl());
  }

  /**
   * Encodes out = the per-layer inputs of `rows` tokens. proj, tok, out: [rows, L·P] (out aliases
   * neither input); norm: [P].
   */
  encode(
    pass: GPUComputePassEncoder,
    proj: GPUBuffer,
    tok: GPUBuffer,
    norm: GPUBuffer,
    out: GPUBuffer,
    rows: number,
  ): void {
    const { layers, width, hidden, eps } = this.options;
    checkCounts('PleCombine', { rows });
    checkDistinct('PleCombine', out, { proj, tok });
    const bytes = rows * layers * width * 4;
    checkSizes('PleCombine', {
      proj: [proj, bytes],
      tok: [tok, bytes],
      norm: [norm, width * 4],
      out: [out, bytes],
    });
    this.uniform.write({ rows: rows * layers, width, eps, proj_scale: Math.fround(1 / Math.sqrt(hidden)) });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, proj, tok, norm, out]));
    this.ctx.counter.dispatch(pass, ...grid(rows * layers, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * One layer's gated per-layer input on the GPU (ple_gate.wgsl): out [T, P] = gelu_tanh(g) · layer
 * l's slice of {@link PleCombine}'s output, g [T, P] = per_layer_input_gate · x; gelu_tanh is
 * GeGLU's (gate_act.wgsl). Each layer has its own uniform, written at construction, so the layers
 * encoded in one pass keep theirs and encoding writes no buffer (T is the grid's y).
 */
export class PleGate {
  private readonly pipeline: GPUComputePipeline;
  /** Uniform l holds layer l's slice offset. */
  private readonly uniforms: UniformSlot<LayoutKeys<typeof GateParams>>[];

  /** Checks the options, gets the pipeline (see {@link PleGate.prepare}) and writes each layer's uniform. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: PleGateOptions,
  ) {
    const { layers, width } = options;
    checkCounts('PleGate', { layers, width });
    this.pipeline = ctx.pipelines.get('ple_gate', ...gateWgsl());
    this.uniforms = Array.from({ length: layers }, (_, l) => {
      const u = new UniformSlot(ctx, GateParams, `ple-gate-params-${l}`);
      u.write({ width, stride: layers * width, offset: l * width });
      return u;
    });
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('ple_gate', ...gateWgsl());
  }

  /**
   * Encodes layer `layer`'s out = gelu_tanh(g) · inputs[:, layer·P .. (layer + 1)·P) for `rows`
   * tokens. g, out: [rows, P]; inputs: [rows, L·P]; out aliases neither.
   */
  encode(
    pass: GPUComputePassEncoder,
    g: GPUBuffer,
    inputs: GPUBuffer,
    out: GPUBuffer,
    rows: number,
    layer: number,
  ): void {
    const { layers, width } = this.options;
    const maxRows = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    checkCounts('PleGate', { rows });
    if (rows > maxRows)
      throw new InvalidInputError(`PleGate: rows must be ≤ ${maxRows} (the grid's y), got ${rows}`);
    if (!Number.isInteger(layer) || layer < 0 || layer >= layers)
      throw new InvalidInputError(`PleGate: layer must be an integer in [0, ${layers}), got ${layer}`);
    checkDistinct('PleGate', out, { g, inputs });
    checkSizes('PleGate', {
      g: [g, rows * width * 4],
      inputs: [inputs, rows * layers * width * 4],
      out: [out, rows * width * 4],
    });
    const uniform = this.uniforms[layer]!;
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [uniform.buffer, g, inputs, out]));
    this.ctx.counter.dispatch(pass, Math.ceil(width / WG), rows);
  }

  destroy(): void {
    for (const u of this.uniforms) u.destroy();
  }
}
