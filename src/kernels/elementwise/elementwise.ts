import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, type WgslVars, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const WG = 64;
const SiluParams = defineUniforms('Params', { M: 'u32', I: 'u32' });
export const AddParams = defineUniforms('Params', { n: 'u32' });
const GatherParams = defineUniforms('Params', { R: 'u32', n: 'u32' });
const GateParams = defineUniforms('Params', { n: 'u32', stride: 'u32', offset: 'u32' });
/** Every variant switch of elementwise.wgsl off (a kernel turns its own on). */
export const OFF: WgslVars = {
  WG,
  SILU_MUL: false,
  FUSED: false,
  GELU: false,
  ADD: false,
  GATHER: false,
  SIGMOID_GATE: false,
  SOFTCAP: false,
  SCALE: false,
};

export function checkSize(op: string, name: string, b: GPUBuffer, bytes: number): void {
  if (b.size < bytes) throw new InvalidInputError(`${op}: ${name} holds ${b.size} bytes, need ${bytes}`);
}

export function checkCount(op: string, name: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) throw new InvalidInputError(`${op}: ${name} must be ≥ 1, got ${v}`);
}

function siluWgsl(fused: boolean, activation: GateActivation): WgslVariant {
  return wgslVariant(shaders.elementwise, SiluParams, {
    ...OFF,
    SILU_MUL: true,
    FUSED: fused,
    GELU: activation === 'gelu',
  });
}

function addWgsl(): WgslVariant {
  return wgslVariant(shaders.elementwise, AddParams, { ...OFF, ADD: true });
}

function gatherWgsl(): WgslVariant {
  return wgslVariant(shaders.elementwise, GatherParams, { ...OFF, GATHER: true });
}

function gateWgsl(): WgslVariant {
  return wgslVariant(shaders.elementwise, GateParams, { ...OFF, SIGMOID_GATE: true });
}

/** One dispatch of one invocation per element over n elements (the flat grid of the header). */
export function dispatchFlat(ctx: GpuContext, pass: GPUComputePassEncoder, n: number): void {
  ctx.counter.dispatch(pass, ...grid(Math.ceil(n / WG), ctx.limits.maxComputeWorkgroupsPerDimension));
}

/**
 * The activation of a gated MLP's gate ({@link SiluMul}, and a gated Matmul's epilogue): `silu`
 * (SwiGLU: Llama, Qwen) or `gelu`, the tanh approximation {@link geluTanh} (GeGLU: Gemma).
 */
export type GateActivation = 'silu' | 'gelu';

/**
 * Reference GELU, tanh approximation, in f64: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), PyTorch's
 * `gelu(approximate='tanh')` and HF's `gelu_pytorch_tanh` (the callers round the result to f32).
 * The kernels compute the same function as x · sigmoid(2·√(2/π)·(…)) in f32 (gate_act.wgsl).
 */
export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

/**
 * act(g) · u in f32: silu as the kernel computes it (`g / (1 + exp(-g)) * u`), gelu from the f64
 * {@link geluTanh} rounded once.
 */
function gateMul(g: number, u: number, activation: GateActivation): number {
  const a = activation === 'gelu' ? geluTanh(g) : g / Math.fround(1 + Math.fround(Math.exp(-g)));
  return Math.fround(Math.fround(a) * u);
}

/**
 * Reference gated MLP combine h = act(gate) · up (`activation` default `silu`). `up` null: gate and
 * up are the two halves of each row of one [M, 2I] `gate` buffer (gate first); else `gate` and `up`
 * are separate [M, I] arrays. Returns h [M, I].
 */
export function siluMulRef(
  gate: Float32Array,
  up: Float32Array | null,
  M: number,
  I: number,
  activation: GateActivation = 'silu',
): Float32Array {
  const h = new Float32Array(M * I);
  for (let m = 0; m < M; m++)
    for (let i = 0; i < I; i++)
      h[m * I + i] = up
        ? gateMul(gate[m * I + i]!, up[m * I + i]!, activation)
        : gateMul(gate[m * 2 * I + i]!, gate[m * 2 * I + I + i]!, activation);
  return h;
}

/** Reference of {@link GatherRows}: out[r] = h[rows[r]], h [M, n] → out [R, n]. */
export function gatherRowsRef(h: Float32Array, n: number, rows: Uint32Array): Float32Array {
  const out = new Float32Array(rows.length * n);
  rows.forEach((r, i) => {
    out.set(h.subarray(r * n, (r + 1) * n), i * n);
  });
  return out;
}

/**
 * Static sizes of {@link SigmoidGate}: x rows are `n` wide; the gate of row m is
 * src[m · stride + offset + i], i < n (offset + n ≤ stride).
 */
export interface SigmoidGateOptions {
  n: number;
  stride: number;
  offset: number;
}

/**
 * Reference of {@link SigmoidGate} in f32, as the kernel computes it: returns x [M, n] with
 * x[m, i] · (1 / (1 + exp(-src[m · stride + offset + i]))), M = x.length / n; src [M, stride].
 */
export function sigmoidGateRef(x: Float32Array, src: Float32Array, o: SigmoidGateOptions): Float32Array {
  const { n, stride, offset } = o;
  const out = new Float32Array(x.length);
  for (let m = 0; m < x.length / n; m++)
    for (let i = 0; i < n; i++) {
      const g = src[m * stride + offset + i]!;
      const sig = Math.fround(1 / Math.fround(1 + Math.fround(Math.exp(-g))));
      out[m * n + i] = Math.fround(x[m * n + i]! * sig);
    }
  return out;
}

/**
 * The gated MLP combine h = act(gate) · up on the GPU, act = silu (SwiGLU, the default) or gelu
 * (GeGLU; see {@link GateActivation}). Two input layouts (a pipeline each per activation):
 * `fused: true` reads one [M, 2I] buffer whose rows are gate | up (one matmul over gate_proj and
 * up_proj stacked, the fast path), `fused: false` reads separate gate and up [M, I] buffers.
 */
export class SiluMul {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof SiluParams>>;

  /**
   * Gets the pipeline of one layout and activation for intermediate size `intermediate` (see
   * {@link SiluMul.prepare}).
   */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    /** Intermediate size I. */
    readonly intermediate: number,
    readonly fused: boolean,
    readonly activation: GateActivation = 'silu',
  ) {
    checkCount('SiluMul', 'intermediate', intermediate);
    this.pipeline = ctx.pipelines.get('elementwise', ...siluWgsl(fused, activation));
    this.uniform = new UniformSlot(ctx, SiluParams, 'silu-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, fused: boolean, activation: GateActivation = 'silu'): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...siluWgsl(fused, activation));
  }

  /**
   * Encodes h = act(gate) · up for `rows` rows. Fused: `inputs` = [gu] with gu [rows, 2I];
   * else [gate, up], each [rows, I]. h: [rows, I], written.
   */
  encode(pass: GPUComputePassEncoder, inputs: readonly GPUBuffer[], h: GPUBuffer, rows: number): void {
    const I = this.intermediate;
    checkCount('SiluMul', 'rows', rows);
    if (inputs.length !== (this.fused ? 1 : 2))
      throw new InvalidInputError(
        `SiluMul: ${this.fused ? 'fused takes [gu]' : 'takes [gate, up]'}, got ${inputs.length} buffers`,
      );
    inputs.forEach((b, i) => {
      checkSize('SiluMul', `inputs[${i}]`, b, rows * I * (this.fused ? 8 : 4));
    });
    checkSize('SiluMul', 'h', h, rows * I * 4);
    this.uniform.write({ M: rows, I });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, ...inputs, h]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil((rows * I) / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/** Residual add in place, y += x over `n` floats, on the GPU. */
export class AddInPlace {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof AddParams>>;

  /** Gets the pipeline (compiled on first use; see {@link AddInPlace.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
  ) {
    this.pipeline = ctx.pipelines.get('elementwise', ...addWgsl());
    this.uniform = new UniformSlot(ctx, AddParams, 'add-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...addWgsl());
  }

  /** Encodes y[i] += x[i] for i < n (x and y distinct buffers). */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, n: number): void {
    checkCount('AddInPlace', 'n', n);
    if (x === y) throw new InvalidInputError('AddInPlace: x and y must be different buffers');
    checkSize('AddInPlace', 'x', x, n * 4);
    checkSize('AddInPlace', 'y', y, n * 4);
    this.uniform.write({ n });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, x, y]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil(n / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Gathers rows [R] (u32 indices) of a hidden buffer [M, n] into a compact [R, n] buffer, so the LM
 * head runs only on the rows whose logits are needed.
 */
export class GatherRows {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof GatherParams>>;

  /** Gets the pipeline for rows of `n` floats (see {@link GatherRows.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    /** Row width n. */
    readonly n: number,
  ) {
    checkCount('GatherRows', 'n', n);
    this.pipeline = ctx.pipelines.get('elementwise', ...gatherWgsl());
    this.uniform = new UniformSlot(ctx, GatherParams, 'gather-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...gatherWgsl());
  }

  /** Encodes out[r] = h[rows[r]] for r < count. rows: [count] u32 (each < h's row count); out: [count, n]. */
  encode(pass: GPUComputePassEncoder, h: GPUBuffer, rows: GPUBuffer, out: GPUBuffer, count: number): void {
    checkCount('GatherRows', 'count', count);
    checkSize('GatherRows', 'rows', rows, count * 4);
    checkSize('GatherRows', 'out', out, count * this.n * 4);
    checkSize('GatherRows', 'h', h, this.n * 4);
    this.uniform.write({ R: count, n: this.n });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, rows, h, out]));
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil((count * this.n) / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/**
 * Gated attention's output gate on the GPU, in place: x[m, i] *= sigmoid(src[m · stride + offset + i])
 * for i < n (Qwen3.5: attn_out [T, qWidth] times sigmoid of the gate columns of the q|k|v|gate
 * matmul's rows, offset qWidth + 2 · kvWidth, stride 2 · qWidth + 2 · kvWidth). The sizes are
 * static, in a uniform written at construction; the row count is the grid's y, so encoding writes
 * no buffer.
 */
export class SigmoidGate {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof GateParams>>;

  /** Checks the sizes, gets the pipeline (see {@link SigmoidGate.prepare}) and writes the uniform. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: SigmoidGateOptions,
  ) {
    const { n, stride, offset } = options;
    checkCount('SigmoidGate', 'n', n);
    checkCount('SigmoidGate', 'stride', stride);
    if (!Number.isInteger(offset) || offset < 0 || offset + n > stride)
      throw new InvalidInputError(
        `SigmoidGate: need 0 ≤ offset and offset + n ≤ stride, got offset ${offset}, n ${n}, stride ${stride}`,
      );
    this.pipeline = ctx.pipelines.get('elementwise', ...gateWgsl());
    this.uniform = new UniformSlot(ctx, GateParams, 'sigmoid-gate-params');
    this.uniform.write({ n, stride, offset });
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('elementwise', ...gateWgsl());
  }

  /** Encodes the gate of `rows` rows. x: [rows, n] (read-write); src: [rows, stride], another buffer. */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, src: GPUBuffer, rows: number): void {
    const { n, stride } = this.options;
    const maxRows = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    checkCount('SigmoidGate', 'rows', rows);
    if (rows > maxRows)
      throw new InvalidInputError(`SigmoidGate: rows must be ≤ ${maxRows} (the grid's y), got ${rows}`);
    if (x === src) throw new InvalidInputError('SigmoidGate: x and src must be different buffers');
    checkSize('SigmoidGate', 'x', x, rows * n * 4);
    checkSize('SigmoidGate', 'src', src, rows * stride * 4);
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, src, x]));
    this.ctx.counter.dispatch(pass, Math.ceil(n / WG), rows);
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
