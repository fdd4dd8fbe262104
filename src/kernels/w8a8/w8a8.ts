// W8A8 (and W4A8, W2A8): per-token int8 activations times integer weights with i32 dot products.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { codeWordType, decode, type QuantizedMatrix } from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { PartedMatmul } from '../matmul/matmul.js';
import type { GpuMatrix } from '../matmul/matrix.js';
import { gemmVariants } from '../matmul/plan.js';
import { MatmulParams, quantScaleVars } from '../matmul/variant.js';

const ActParams = defineUniforms('Params', { M: 'u32', K: 'u32', x_off: 'u32' });
const MmParams = MatmulParams;

/** Per-token int8 activations: codes [M, K] (Int8Array), scales [M] and the GPU packing [M, K/4]. */
export interface QuantizedActivations {
  q: Int8Array;
  scale: Float32Array;
  packed: Uint32Array;
}

/**
 * Reference of the activation quantiser: per row, scale = max|x| / 127 and q = clamp(round(x /
 * scale), -127, 127) with round half to even, all in f32 (q = 0 for an all-zero row). Packed 4 per
 * u32 like int8 weights. The GPU divides with WGSL's `/`, which may be off by an ulp, so a GPU code
 * can differ from this one by 1 at a near-tie.
 */
export function quantizeActRef(x: Float32Array, M: number, K: number): QuantizedActivations {
  if (x.length !== M * K || K % 4 !== 0)
    throw new InvalidInputError(`quantizeActRef: x has ${x.length} elements for [${M}, ${K}] (K % 4 == 0)`);
  const q = new Int8Array(M * K);
  const scale = new Float32Array(M);
  for (let m = 0; m < M; m++) {
    let amax = 0;
    for (let k = 0; k < K; k++) amax = Math.max(amax, Math.abs(x[m * K + k]!));
    const s = Math.fround(amax / 127);
    scale[m] = s;
    if (amax === 0) continue;
    for (let k = 0; k < K; k++) {
      const v = roundHalfEven(Math.fround(x[m * K + k]! / s));
      q[m * K + k] = Math.min(127, Math.max(-127, v));
    }
  }
  return { q, scale, packed: new Uint32Array(q.buffer) };
}

/**
 * Reference W8A8 product from int8 activations: y[m, n] = sx[m] · Σ_k qx[m, k] · (a_k·q_k − b_k),
 * with (a, b) the weight grid at element k of row n and q its code (`decode`), in f64: the GPU's
 * per-block i32 sums are exact, so only its f32 scaling differs. Also returns
 * Σ_k |sx·qx|·(|a_k·q_k| + |b_k|) per output, the scale of the test tolerance (the GPU sums
 * a·Σqx·q and b·Σqx apart).
 */
export function w8a8Ref(
  w: QuantizedMatrix,
  act: QuantizedActivations,
  M: number,
): { y: Float32Array; magnitude: Float32Array } {
  checkIntFormat(w.format, 'w8a8Ref');
  const { rows: N, cols: K } = w;
  const { grid, codes } = decode(w);
  const y = new Float32Array(M * N);
  const magnitude = new Float32Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let s = 0;
      let a = 0;
      for (let k = 0; k < K; k++) {
        const i = n * K + k;
        const x = act.q[m * K + k]!;
        const aq = grid.scaleAt(i) * codes[i]!;
        s += x * (aq - grid.offsetAt(i));
        a += Math.abs(x) * (Math.abs(aq) + Math.abs(grid.offsetAt(i)));
      }
      y[m * N + n] = s * act.scale[m]!;
      magnitude[m * N + n] = a * act.scale[m]!;
    }
  return { y, magnitude };
}

/** The weight formats the W8A8 kernel multiplies (integer codes of at most 8 bits, one word per block). */
export type W8A8Format = 'int8' | 'q4_0' | 'int4' | 'int2';

/** Whether MatmulW8A8 takes weights in `format` (see {@link W8A8Format}). */
export function isW8A8Format(format: string): format is W8A8Format {
  return format === 'int8' || format === 'q4_0' || format === 'int4' || format === 'int2';
}

function checkIntFormat(format: string, where: string): asserts format is W8A8Format {
  if (!isW8A8Format(format))
    throw new InvalidInputError(`${where}: weight format ${format} is not int8, q4_0, int4 or int2`);
}

function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

function actWgsl(): WgslVariant {
  return wgslVariant(shaders.quantize_act, ActParams);
}

/** Weight rows per workgroup of the serial form (one per thread; see {@link GpuContext.kernels}). */
const SERIAL_ROWS = 4;

function w8a8Wgsl(format: W8A8Format, mt: number, serial: boolean): WgslVariant {
  return wgslVariant(shaders.matmul_w8a8, MmParams, {
    SERIAL: serial,
    ST: SERIAL_ROWS,
    MT: mt,
    RC: Math.min(mt, 16),
    WTYPE: codeWordType(format),
    ...quantScaleVars(format),
    NIBBLES: format === 'q4_0' || format === 'int4',
    OFFSET: format === 'int4' || format === 'int2',
  });
}

/**
 * Compiles (and waits for) the quantiser and the W8A8 GEMV and largest GEMM pipelines of a weight
 * format; the smaller GEMM variants compile on first use (see PartedMatmul).
 */
export async function prepareW8A8(ctx: GpuContext, format: string, maxM = 16): Promise<void> {
  checkIntFormat(format, 'prepareW8A8');
  const serial = ctx.kernels === 'serial';
  await ctx.pipelines.prepare('quantize_act', ...actWgsl());
  await ctx.pipelines.prepare('matmul_w8a8', ...w8a8Wgsl(format, 1, serial));
  if (maxM > 1)
    await ctx.pipelines.prepare('matmul_w8a8', ...w8a8Wgsl(format, gemmVariants(maxM).at(-1)!, serial));
}

/**
 * Per-token activation quantiser: x rows [xOffsetRows, xOffsetRows + M) of K f32 → xq [M, K/4]
 * packed int8 and sx [M] scales. A row's codes never depend on M.
 */
export class QuantizeAct {
  private readonly pipeline: GPUComputePipeline;
  private readonly params: UniformSlot<LayoutKeys<typeof ActParams>>;

  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly K: number,
  ) {
    if (!Number.isInteger(K) || K < 4 || K % 4 !== 0)
      throw new InvalidInputError(`QuantizeAct: K = ${K} must be a positive multiple of 4`);
    this.pipeline = ctx.pipelines.get('quantize_act', ...actWgsl());
    this.params = new UniformSlot(ctx, ActParams, 'quantize_act-params');
  }

  /** Records the quantisation of M rows of x into `xq` and `sx`. */
  encode(
    pass: GPUComputePassEncoder,
    x: GPUBuffer,
    xq: GPUBuffer,
    sx: GPUBuffer,
    M: number,
    xOffsetRows = 0,
  ): void {
    const K = this.K;
    if (!Number.isInteger(M) || M < 1)
      throw new InvalidInputError(`QuantizeAct.encode: M = ${M} must be >= 1`);
    if (x.size < (xOffsetRows + M) * K * 4)
      throw new InvalidInputError(
        `QuantizeAct.encode: x has ${x.size} bytes, needs ${(xOffsetRows + M) * K * 4}`,
      );
    if (xq.size < M * K)
      throw new InvalidInputError(`QuantizeAct.encode: xq has ${xq.size} bytes, needs ${M * K}`);
    if (sx.size < M * 4)
      throw new InvalidInputError(`QuantizeAct.encode: sx has ${sx.size} bytes, needs ${M * 4}`);
    this.params.write({ M, K, x_off: xOffsetRows });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.params.buffer, x, xq, sx]));
    this.ctx.counter.dispatch(pass, ...grid(M, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.params.destroy();
  }
}

/**
 * y [M, N] = dequantised product of int8 activations (xq, sx from {@link QuantizeAct}) and an
 * integer weight matrix (int8, q4_0, int4, int2), with `dot4I8Packed` and i32 sums per 16-element
 * block, each block's sums scaled by its grid in f32. Like
 * `Matmul`: GEMV for M = 1, GEMM reading each weight once for 2..maxM rows, and row results
 * bit-identical whatever M is.
 */
export class MatmulW8A8 extends PartedMatmul {
  constructor(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, opts: { maxM?: number } = {}) {
    const format = w.format;
    checkIntFormat(format, 'MatmulW8A8');
    const serial = ctx.kernels === 'serial';
    super(
      ctx,
      binds,
      w,
      opts.maxM ?? 16,
      'MatmulW8A8',
      'matmul_w8a8',
      (mt) => w8a8Wgsl(format, mt, serial),
      () => (serial ? SERIAL_ROWS : 1),
    );
  }

  /** Records y[0..M) from rows [xOffsetRows, xOffsetRows + M) of xq/sx. */
  encode(
    pass: GPUComputePassEncoder,
    xq: GPUBuffer,
    sx: GPUBuffer,
    y: GPUBuffer,
    M: number,
    xOffsetRows = 0,
  ): void {
    const { rows: N, cols: K } = this.w;
    this.checkRows(M, xOffsetRows);
    const rows = xOffsetRows + M;
    if (xq.size < rows * K)
      throw new InvalidInputError(`MatmulW8A8.encode: xq has ${xq.size} bytes, needs ${rows * K}`);
    if (sx.size < rows * 4)
      throw new InvalidInputError(`MatmulW8A8.encode: sx has ${sx.size} bytes, needs ${rows * 4}`);
    if (y.size < M * N * 4)
      throw new InvalidInputError(`MatmulW8A8.encode: y has ${y.size} bytes, needs ${M * N * 4}`);
    this.dispatch(pass, [xq, sx], y, M, xOffsetRows);
  }
}
