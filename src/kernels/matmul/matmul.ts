// Matmul with fused dequantisation: y [M, N] = x [M, K] · Wᵀ, W [N, K] in any WeightFormat.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import {
  CODE_BITS,
  checkShape,
  codeWordType,
  dataWords,
  dequantize,
  isIntFormat,
  packedBytes,
  type QuantizedMatrix,
  scaleWords,
  splitAlign,
  type WeightFormat,
} from './quant.js';

/**
 * Uniforms of matmul.wgsl and matmul_w8a8.wgsl: batch M, total N (the stride of y), K, first x row,
 * and the part being dispatched (its first output column and row count).
 */
export const MatmulParams = defineUniforms('Params', {
  M: 'u32',
  N: 'u32',
  K: 'u32',
  x_off: 'u32',
  n_off: 'u32',
  n_rows: 'u32',
});
const Params = MatmulParams;

/** Largest batch (rows of x) one {@link Matmul} dispatch accepts. */
export const MATMUL_MAX_M = 64;

/**
 * Rows [row0, row0 + rows) of a {@link GpuMatrix}, each buffer within one storage binding. The
 * part's flat elements start at row0·K, a multiple of `splitAlign(format)`, so its data and scales
 * are the words of those elements (the layouts of `QuantizedMatrix`) starting at word 0.
 */
export interface GpuMatrixPart {
  readonly row0: number;
  readonly rows: number;
  /** Codes (or floats) of the part's flat elements, u32 words. */
  readonly data: GPUBuffer;
  /** Block metadata of the part's flat elements (integer formats). */
  readonly scales?: GPUBuffer;
}

/**
 * A weight matrix resident on the GPU in its packed format (never expanded). Its rows are split
 * into parts so that no buffer exceeds the device's storage-binding and buffer limits; a matmul
 * dispatches once per part (one part for all but the largest matrices, e.g. a big LM head).
 */
export interface GpuMatrix {
  readonly format: WeightFormat;
  /** N: output features. */
  readonly rows: number;
  /** K: input features. */
  readonly cols: number;
  readonly parts: readonly GpuMatrixPart[];
  /** Bytes a matmul reads (packed data + scales, see `packedBytes`). */
  readonly bytes: number;
  destroy(): void;
}

/**
 * Uploads a packed matrix as-is (no expansion), split by rows into parts whose buffers each fit
 * `maxBindingBytes` (default: the smaller of the device's maxStorageBufferBindingSize and
 * maxBufferSize). Every part but the first starts at a row whose flat index row0·K is a multiple
 * of `splitAlign(format)` (a whole group pair or super-block), so each part's words are a plain
 * slice of `data` and `scales`. Throws {@link InvalidInputError} when K is not a multiple of 16 (the
 * kernels' block), when the arrays have the wrong sizes, or when no aligned run of rows fits.
 */
export function uploadMatrix(
  ctx: GpuContext,
  q: QuantizedMatrix,
  label: string,
  maxBindingBytes = Math.min(ctx.limits.maxStorageBufferBindingSize, ctx.limits.maxBufferSize),
): GpuMatrix {
  const { format, rows: N, cols: K } = q;
  checkShape(format, N, K);
  if (K % 16 !== 0) throw new InvalidInputError(`uploadMatrix ${label}: K = ${K} must be a multiple of 16`);
  const quantized = isIntFormat(format);
  if (q.data.length !== dataWords(format, N * K))
    throw new InvalidInputError(
      `uploadMatrix ${label}: data has ${q.data.length} words, expected ${dataWords(format, N * K)}`,
    );
  if (quantized && q.scales?.length !== scaleWords(format, N * K))
    throw new InvalidInputError(
      `uploadMatrix ${label}: ${format} needs ${scaleWords(format, N * K)} scale words, got ${q.scales?.length}`,
    );
  // Parts hold a multiple of `step` rows (so the next part starts aligned), as many as fit.
  const align = splitAlign(format);
  const step = align / gcd(K, align);
  const fits = (rows: number) =>
    4 * Math.max(dataWords(format, rows * K), scaleWords(format, rows * K)) <= maxBindingBytes;
  // The data array is the larger: start from its bytes per row and step down until both fit.
  let perPart = Math.floor(maxBindingBytes / ((K * CODE_BITS[format]) / 8)) + step;
  perPart -= perPart % step;
  while (perPart > 0 && !fits(perPart)) perPart -= step;
  if (perPart < 1)
    throw new InvalidInputError(
      `uploadMatrix ${label}: ${step} rows of ${format} [${N}, ${K}] (the smallest aligned part) exceed ${maxBindingBytes} bytes`,
    );
  const parts: GpuMatrixPart[] = [];
  for (let row0 = 0; row0 < N; row0 += perPart) {
    const rows = Math.min(perPart, N - row0);
    const tag = `${label}[${row0}:${row0 + rows}]`;
    // Word ranges of flat elements [row0·K, (row0 + rows)·K): exact at aligned starts; the last
    // part runs to the end of the arrays (the padding).
    const last = row0 + rows === N;
    const range = (words: (n: number) => number, total: number) =>
      [words(row0 * K), last ? total : words((row0 + rows) * K)] as const;
    const [d0, d1] = range((n) => dataWords(format, n), q.data.length);
    const data = uploadBuffer(ctx, q.data.subarray(d0, d1), `${tag}.data`);
    let scales: GPUBuffer | undefined;
    if (quantized) {
      const [s0, s1] = range((n) => scaleWords(format, n), q.scales!.length);
      scales = uploadBuffer(ctx, q.scales!.subarray(s0, s1), `${tag}.scales`);
    }
    parts.push({ row0, rows, data, ...(scales ? { scales } : {}) });
  }
  return {
    format,
    rows: N,
    cols: K,
    parts,
    bytes: packedBytes(format, N, K),
    destroy() {
      for (const p of parts) {
        p.data.destroy();
        p.scales?.destroy();
      }
    },
  };
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** Uniform values of one part's dispatch (shared by Matmul and MatmulW8A8). */
export function matmulParams(
  w: GpuMatrix,
  part: GpuMatrixPart,
  M: number,
  xOffsetRows: number,
): Record<LayoutKeys<typeof MatmulParams>, number> {
  return {
    M,
    N: w.rows,
    K: w.cols,
    x_off: xOffsetRows,
    n_off: part.row0,
    n_rows: part.rows,
  };
}

/**
 * Accumulators per thread (the WGSL constant MT) of the GEMM variant that serves batches up to
 * `maxM` rows: the next power of two, at least 2. Shared with the W8A8 kernel.
 */
export function accumulators(maxM: number): number {
  let mt = 2;
  while (mt < maxM) mt *= 2;
  return mt;
}

/**
 * Accumulator counts of the GEMM variants an instance for `maxM` rows compiles: 4 and 16 below
 * {@link accumulators}(maxM), then that one. A batch runs the smallest variant that holds it: a
 * thread with 64 accumulators makes 64 loop trips per weight block and holds 64 registers (spilled
 * on many GPUs) even for the 2 to 8 rows of a small draft tree.
 */
export function gemmVariants(maxM: number): number[] {
  const top = accumulators(maxM);
  return [...[4, 16].filter((mt) => mt < top), top];
}

/** Pipeline key and WGSL of one matmul variant (format × accumulators × reduction path). */
function matmulSource(format: WeightFormat, mt: number, subgroups: boolean): WgslVariant {
  return wgslVariant(shaders.matmul, Params, {
    MT: mt,
    RC: Math.min(mt, 16),
    SUBGROUPS: subgroups,
    WTYPE: codeWordType(format),
    F32: format === 'f32',
    F16: format === 'f16',
    INT8: format === 'int8',
    Q4_0: format === 'q4_0',
    INT4: format === 'int4',
    INT2: format === 'int2',
    NIBBLES: format === 'q4_0' || format === 'int4',
    SCALES: isIntFormat(format),
  });
}

/**
 * Compiles (and waits for) the GEMV and GEMM pipelines a {@link Matmul} of this format needs, so
 * WGSL errors surface as {@link GpuStepError} with diagnostics instead of a later validation error.
 */
export async function prepareMatmul(ctx: GpuContext, format: WeightFormat, maxM = 16): Promise<void> {
  const sg = ctx.features.subgroups;
  await ctx.pipelines.prepare('matmul', ...matmulSource(format, 1, sg));
  if (maxM > 1)
    await Promise.all(
      gemmVariants(maxM).map((mt) => ctx.pipelines.prepare('matmul', ...matmulSource(format, mt, sg))),
    );
}

/**
 * What every resident-weight matmul shares ({@link Matmul}, and `MatmulW8A8` in kernels/w8a8): a GEMV
 * pipeline for M = 1 and GEMM pipelines for 2..maxM rows of one kernel (see {@link gemmVariants}),
 * one uniform slot per part of the weight matrix, and the dispatch of every part with the inputs
 * its kernel binds.
 */
export abstract class PartedMatmul {
  readonly maxM: number;
  private readonly gemv: GPUComputePipeline;
  /** GEMM pipelines by accumulator count, smallest first (see {@link gemmVariants}). */
  private readonly gemms: { mt: number; pipeline: GPUComputePipeline }[];
  /** One uniform slot per part of w. */
  private readonly params: UniformSlot<LayoutKeys<typeof Params>>[];

  /**
   * `name` prefixes error messages; `kernel` and `source(mt)` name and render the pipeline of a
   * variant with `mt` accumulators (1 for the GEMV).
   */
  protected constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly w: GpuMatrix,
    maxM: number,
    protected readonly name: string,
    kernel: string,
    source: (mt: number) => WgslVariant,
  ) {
    this.maxM = maxM;
    if (!Number.isInteger(maxM) || maxM < 1 || maxM > MATMUL_MAX_M)
      throw new InvalidInputError(`${name}: maxM = ${maxM} must be an integer in [1, ${MATMUL_MAX_M}]`);
    this.gemv = ctx.pipelines.get(kernel, ...source(1));
    this.gemms =
      maxM > 1
        ? gemmVariants(maxM).map((mt) => ({ mt, pipeline: ctx.pipelines.get(kernel, ...source(mt)) }))
        : [];
    this.params = w.parts.map((_, i) => new UniformSlot(ctx, Params, `${kernel}-${w.format}-params-${i}`));
  }

  /** Checks M and the row offset of the input, naming this kernel in the error. */
  protected checkRows(M: number, xOffsetRows: number): void {
    if (!Number.isInteger(M) || M < 1 || M > this.maxM)
      throw new InvalidInputError(`${this.name}.encode: M = ${M} must be an integer in [1, ${this.maxM}]`);
    if (!Number.isInteger(xOffsetRows) || xOffsetRows < 0)
      throw new InvalidInputError(
        `${this.name}.encode: xOffsetRows = ${xOffsetRows} must be a non-negative integer`,
      );
  }

  /** Dispatches every part: bindings uniform, weights, `inputs`..., y, then scales. */
  protected dispatch(
    pass: GPUComputePassEncoder,
    inputs: readonly GPUBuffer[],
    y: GPUBuffer,
    M: number,
    xOffsetRows: number,
  ): void {
    const pipeline = M === 1 ? this.gemv : this.gemms.find((g) => g.mt >= M)!.pipeline;
    pass.setPipeline(pipeline);
    this.w.parts.forEach((part, i) => {
      const slot = this.params[i]!;
      slot.write(matmulParams(this.w, part, M, xOffsetRows));
      const buffers = [slot.buffer, part.data, ...inputs, y];
      if (part.scales) buffers.push(part.scales);
      pass.setBindGroup(0, this.binds.get(pipeline, buffers));
      this.ctx.counter.dispatch(pass, ...grid(part.rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
    });
  }

  destroy(): void {
    for (const slot of this.params) slot.destroy();
  }
}

/**
 * y [M, N] = x [M, K] · Wᵀ for one resident weight matrix. M = 1 runs the GEMV variant, 2..maxM the
 * smallest GEMM variant that holds M rows, which reads each weight once for the whole batch. All
 * accumulate every output in the same order, so a row's result is bit-identical whatever M is
 * (batch invariance). Uses the subgroup reduction when the context has subgroups, else a
 * workgroup-memory tree.
 */
export class Matmul extends PartedMatmul {
  constructor(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, opts: { maxM?: number } = {}) {
    const sg = ctx.features.subgroups;
    super(ctx, binds, w, opts.maxM ?? 16, 'Matmul', 'matmul', (mt) => matmulSource(w.format, mt, sg));
  }

  /**
   * Records y[0..M) = x[xOffsetRows .. xOffsetRows + M) · Wᵀ into `pass`. x holds f32 rows of K
   * elements, y receives M rows of N elements. Creates nothing after the first call per buffer set.
   */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number, xOffsetRows = 0): void {
    const { rows: N, cols: K } = this.w;
    this.checkRows(M, xOffsetRows);
    if (x === y) throw new InvalidInputError('Matmul.encode: x and y must be different buffers');
    if (x.size < (xOffsetRows + M) * K * 4)
      throw new InvalidInputError(
        `Matmul.encode: x has ${x.size} bytes, needs ${(xOffsetRows + M) * K * 4} for rows [${xOffsetRows}, ${xOffsetRows + M}) of K = ${K}`,
      );
    if (y.size < M * N * 4)
      throw new InvalidInputError(
        `Matmul.encode: y has ${y.size} bytes, needs ${M * N * 4} for [${M}, ${N}]`,
      );
    this.dispatch(pass, [x], y, M, xOffsetRows);
  }
}

/**
 * Reference: dequantize W, then y[m, n] = Σ_k x[m, k] · W[n, k] accumulated in f64 and rounded
 * once to f32 (the GPU's f32 sums differ from it by far less than the test tolerance). Also returns
 * Σ_k |x[m, k]| · |W[n, k]| per output, the scale the tolerance is relative to.
 */
export function matmulRef(
  q: QuantizedMatrix,
  x: Float32Array,
  M: number,
): { y: Float32Array; magnitude: Float32Array } {
  const w = dequantize(q);
  const { rows: N, cols: K } = q;
  const y = new Float32Array(M * N);
  const magnitude = new Float32Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let s = 0;
      let a = 0;
      for (let k = 0; k < K; k++) {
        const p = x[m * K + k]! * w[n * K + k]!;
        s += p;
        a += Math.abs(p);
      }
      y[m * N + n] = s;
      magnitude[m * N + n] = a;
    }
  return { y, magnitude };
}
