// Matmul with fused dequantisation: y [M, N] = x [M, K] · Wᵀ, W [N, K] in any WeightFormat. The
// pipelines and dispatches of one resident matrix (PartedMatmul, Matmul), their compile ahead of
// use (prepareMatmul), a lattice format's codebook, and the plain-TS references. The variant and
// its WGSL are variant.ts's, the dispatch sizes plan.ts's.
import { InvalidInputError } from '../../errors.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import type { LayoutKeys } from '../../gpu/uniforms.js';
import type { WgslVariant } from '../../gpu/wgsl.js';
import {
  dequantize,
  type LatticeFormat,
  latticeFormat,
  latticeGrid,
  type QuantizedMatrix,
  type WeightFormat,
} from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { type GateActivation, siluMulRef } from '../elementwise/elementwise.js';
import type { GpuMatrix } from './matrix.js';
import { GEMM_COLUMNS, GEMM_MIN_ROWS, GEMM_ROWS, gemmVariants, matmulTiles } from './plan.js';
import {
  gatedEpilogue,
  type MatmulEpilogue,
  type MatmulNorm,
  type MatmulOptions,
  MatmulParams,
  type MatmulVariant,
  type MatrixShape,
  matmulParams,
  matmulRowsPerWorkgroup,
  matmulVariant,
  matmulWgsl,
} from './variant.js';

/** Largest batch (rows of x) one dispatch of a decode form or of the W8A8 matmul accepts. */
export const MATMUL_MAX_M = 64;

/** Largest batch one {@link Matmul} accepts: a prompt chunk through the prefill GEMM. */
export const PREFILL_MAX_M = 512;

/** The prefill GEMM's WGSL, once {@link loadPrefillGemm} has imported it (./gemm.ts). */
let gemmWgsl: ((format: WeightFormat, v: MatmulVariant) => WgslVariant) | undefined;

/**
 * Imports the prefill GEMM's WGSL (a module of its own, so the engine's first chunk does not carry
 * it). {@link prepareMatmul} with `prefill` and the runner of a context in the GPU forms call it;
 * a {@link Matmul} asked for the GEMM before it throws.
 */
export async function loadPrefillGemm(): Promise<void> {
  gemmWgsl ??= (await import('./gemm.js')).matmulGemmWgsl;
}

/** Each context's lattice codebooks, uploaded on first use. */
const LATTICE_TABLES = new WeakMap<GpuContext, Map<LatticeFormat, GPUBuffer>>();

/**
 * The codebook of a lattice format (src/quant/iq-grids.ts: 2 to 8 KiB) as a storage buffer of
 * `ctx`, uploaded once per context and shared by every matmul and embedding of that format.
 */
export function latticeTable(ctx: GpuContext, format: LatticeFormat): GPUBuffer {
  let tables = LATTICE_TABLES.get(ctx);
  if (!tables) {
    tables = new Map();
    LATTICE_TABLES.set(ctx, tables);
  }
  let buf = tables.get(format);
  if (!buf) {
    buf = uploadBuffer(ctx, latticeGrid(format), `${format}-codebook`);
    tables.set(format, buf);
  }
  return buf;
}

/**
 * Compiles (and waits for) the GEMV and the largest GEMM tile a {@link Matmul} of this format,
 * shape and these options needs, so WGSL errors surface as {@link GpuStepError} with diagnostics
 * instead of a later validation error. The smaller tiles share their WGSL and compile on first
 * use. `prefill`: the prefill GEMM too (matmul_gemm.wgsl; loaded by {@link loadPrefillGemm}) where
 * maxM reaches {@link GEMM_MIN_ROWS}. The shape picks the load width ({@link wideLoads}) and the lanes ({@link splitLanes}).
 */
export async function prepareMatmul(
  ctx: GpuContext,
  format: WeightFormat,
  shape: MatrixShape,
  maxM = 16,
  opts: Omit<MatmulOptions, 'maxM' | 'norm'> & { norm?: Pick<MatmulNorm, 'onePlus'>; prefill?: boolean } = {},
): Promise<void> {
  const v = matmulVariant(ctx, format, shape, opts);
  // The GEMV and the largest tile; the smaller tiles compile when a batch first needs them.
  const tms = maxM > 1 ? [1, matmulTiles(maxM, v.serial).at(-1)!] : [1];
  const wgsl = tms.map((tm) => matmulWgsl(format, tm, v));
  if (opts.prefill && maxM >= GEMM_MIN_ROWS) {
    await loadPrefillGemm();
    wgsl.push(gemmWgsl!(format, v));
  }
  await Promise.all(wgsl.map((code) => ctx.pipelines.prepare('matmul', ...code)));
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
  /**
   * GEMM variants by accumulator count, smallest first (see {@link gemmVariants}). The largest
   * (every prefill of more rows than the others hold runs it) is compiled with the GEMV; the
   * others when a batch first needs them, so an engine that never verifies 2-4 rows never pays
   * for their compiles (seconds on a software GPU, and part of every load's time to ready).
   */
  private readonly gemms: { mt: number; pipeline: GPUComputePipeline | undefined }[];
  private readonly compile: (mt: number) => GPUComputePipeline;
  /** One uniform slot per part of w. */
  private readonly params: UniformSlot<LayoutKeys<typeof MatmulParams>>[];
  /** The split-K lanes per output the kernel reads from its uniforms (0: a kernel without them). */
  protected lanes = 0;

  /**
   * `name` prefixes error messages; `kernel` and `wgsl(mt)` name and render the pipeline of a
   * variant with `mt` accumulators (1 for the GEMV), whose workgroups each compute
   * `rowsPerWorkgroup(mt)` rows of a part (default 1). `variants` are the GEMM variants' `mt`
   * (default {@link gemmVariants}(maxM)); a batch runs the smallest that holds it, or the largest
   * (which then loops over the batch). `limit` bounds maxM (default {@link MATMUL_MAX_M}).
   */
  protected constructor(
    protected readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly w: GpuMatrix,
    maxM: number,
    protected readonly name: string,
    kernel: string,
    wgsl: (mt: number) => WgslVariant,
    private readonly rowsPerWorkgroup: (mt: number) => number = () => 1,
    variants: (maxM: number) => number[] = gemmVariants,
    limit = MATMUL_MAX_M,
  ) {
    this.maxM = maxM;
    if (!Number.isInteger(maxM) || maxM < 1 || maxM > limit)
      throw new InvalidInputError(`${name}: maxM = ${maxM} must be an integer in [1, ${limit}]`);
    this.compile = (mt) => ctx.pipelines.get(kernel, ...wgsl(mt));
    this.gemv = this.compile(1);
    const mts = maxM > 1 ? variants(maxM) : [];
    this.gemms = mts.map((mt, i) => ({
      mt,
      pipeline: i === mts.length - 1 ? this.compile(mt) : undefined,
    }));
    this.params = w.parts.map(
      (_, i) => new UniformSlot(ctx, MatmulParams, `${kernel}-${w.format}-params-${i}`),
    );
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

  /**
   * Dispatches every part: bindings uniform, weights, `inputs`..., y, then scales, then `after`...
   * `eps` goes to the uniforms (a fused norm's).
   */
  protected dispatch(
    pass: GPUComputePassEncoder,
    inputs: readonly GPUBuffer[],
    y: GPUBuffer,
    M: number,
    xOffsetRows: number,
    after: readonly GPUBuffer[] = [],
    eps = 0,
  ): void {
    const gemm = this.gemms.find((g) => g.mt >= M) ?? this.gemms.at(-1);
    if (gemm && M > 1) gemm.pipeline ??= this.compile(gemm.mt);
    const [mt, pipeline] = M === 1 || !gemm?.pipeline ? [1, this.gemv] : [gemm.mt, gemm.pipeline];
    const rows = this.rowsPerWorkgroup(mt);
    this.dispatchParts(
      pass,
      pipeline,
      (part) => Math.ceil(part / rows),
      inputs,
      y,
      M,
      xOffsetRows,
      after,
      eps,
    );
  }

  /**
   * Dispatches every part on `pipeline`, `groups(rows of the part)` workgroups each: bindings
   * uniform, weights, `inputs`..., y, then scales, then `after`...
   */
  protected dispatchParts(
    pass: GPUComputePassEncoder,
    pipeline: GPUComputePipeline,
    groups: (partRows: number) => number,
    inputs: readonly GPUBuffer[],
    y: GPUBuffer,
    M: number,
    xOffsetRows: number,
    after: readonly GPUBuffer[],
    eps: number,
  ): void {
    pass.setPipeline(pipeline);
    this.w.parts.forEach((part, i) => {
      const slot = this.params[i]!;
      slot.write(matmulParams(this.w, part, M, xOffsetRows, eps, this.lanes));
      const buffers = [slot.buffer, part.data, ...inputs, y];
      if (part.scales) buffers.push(part.scales);
      buffers.push(...after);
      pass.setBindGroup(0, this.binds.get(pipeline, buffers));
      this.ctx.counter.dispatch(
        pass,
        ...grid(groups(part.rows), this.ctx.limits.maxComputeWorkgroupsPerDimension),
      );
    });
  }

  destroy(): void {
    for (const slot of this.params) slot.destroy();
  }
}

/**
 * y [M, N] = x [M, K] · Wᵀ for one resident weight matrix, with the layer's neighbours optionally
 * fused in (see {@link MatmulOptions}): an RMSNorm of x before, and a residual add or the SiLU or
 * GELU gate of a gated pair after, each giving the same bits as the separate kernels. M = 1 runs the GEMV
 * variant, 2..maxM the smallest GEMM tile ({@link matmulTiles}) that holds M rows, or the 8-row
 * tile once per 8 rows: each weight block is read once per tile. All accumulate every output in
 * the same order (serial: all of K per thread; split-K: the matrix's lane split, lanes added in
 * order in workgroup memory), so a row's result is bit-identical whatever M is (batch
 * invariance). One dispatch per part of W.
 */
export class Matmul extends PartedMatmul {
  private readonly norm: MatmulNorm | undefined;
  /** A lattice format's codebook (binding 5), shared per context (see {@link latticeTable}). */
  private readonly table: GPUBuffer | undefined;
  readonly epilogue: MatmulEpilogue;
  /** The prefill GEMM (matmul_gemm.wgsl), compiled when a prefill first takes it (see {@link prepareMatmul}). */
  private gemm: GPUComputePipeline | undefined;
  private readonly variant: MatmulVariant;
  /**
   * Whether prefill takes the GEMM ({@link MatmulOptions.prefillGemm}; by default in the GPU forms:
   * on the CPU drivers the serial form's prompt chunks ran as fast as the GEMM's or faster, whose
   * workgroups and barriers are what a CPU implementation charges for; bench/RESULTS.md).
   */
  private readonly tiled: boolean;

  constructor(ctx: GpuContext, binds: BindGroupCache, w: GpuMatrix, opts: MatmulOptions = {}) {
    const v = matmulVariant(ctx, w.format, w, opts);
    if (gatedEpilogue(v.epilogue) !== (w.gated === true))
      throw new InvalidInputError(
        `Matmul: epilogue ${v.epilogue} ${w.gated ? 'cannot take' : 'needs'} a gated pair (uploadGatedPair)`,
      );
    const norm = opts.norm;
    if (norm && !(norm.eps >= 0))
      throw new InvalidInputError(`Matmul: norm eps must be ≥ 0, got ${norm.eps}`);
    if (norm && norm.weight.size < w.cols * 4)
      throw new InvalidInputError(`Matmul: norm weight holds ${norm.weight.size} bytes, needs ${w.cols * 4}`);
    super(
      ctx,
      binds,
      w,
      opts.maxM ?? 16,
      'Matmul',
      'matmul',
      (tm) => matmulWgsl(w.format, tm, v),
      (tm) => matmulRowsPerWorkgroup(tm, v),
      (maxM) => matmulTiles(maxM, v.serial),
      PREFILL_MAX_M,
    );
    this.norm = norm;
    this.epilogue = v.epilogue;
    this.lanes = v.lanes;
    this.table = latticeFormat(w.format) ? latticeTable(ctx, w.format) : undefined;
    this.variant = v;
    this.tiled = opts.prefillGemm ?? !v.serial;
  }

  /**
   * Records y[0..M) = f(x[xOffsetRows .. xOffsetRows + M)) · Wᵀ into `pass` (f: the fused norm, if
   * any; `add`: y += ...). x holds f32 rows of K elements, y M rows of N elements (N = the outputs,
   * I for a gated pair). Creates nothing after the first call per buffer set. `prefill`: the rows
   * are a prompt chunk, which at {@link GEMM_MIN_ROWS} rows or more takes the tiled GEMM in the GPU
   * forms (matmul_gemm.wgsl: other bits than the decode forms', within the tests' tolerance);
   * decode and draft trees leave it false, so their rows stay bit-identical whatever M is.
   */
  encode(
    pass: GPUComputePassEncoder,
    x: GPUBuffer,
    y: GPUBuffer,
    M: number,
    xOffsetRows = 0,
    prefill = false,
  ): void {
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
    const norm = this.norm;
    const after = [...(this.table ? [this.table] : []), ...(norm ? [norm.weight] : [])];
    const eps = norm?.eps ?? 0;
    if (!prefill || !this.tiled || M < GEMM_MIN_ROWS) {
      this.dispatch(pass, [x], y, M, xOffsetRows, after, eps);
      return;
    }
    if (!gemmWgsl)
      throw new InvalidInputError(
        'Matmul.encode: the prefill GEMM is not loaded (await loadPrefillGemm() first)',
      );
    this.gemm ??= this.ctx.pipelines.get('matmul', ...gemmWgsl(this.w.format, this.variant));
    const tiles = Math.ceil(M / GEMM_ROWS);
    const groups = (rows: number) => tiles * Math.ceil(rows / GEMM_COLUMNS);
    this.dispatchParts(pass, this.gemm, groups, [x], y, M, xOffsetRows, after, eps);
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

/**
 * Reference of a gated {@link Matmul} (epilogue `silu` or `gelu`): h [M, I] = act(x·gateᵀ) ·
 * (x·upᵀ), the {@link matmulRef} of each matrix combined by the elementwise `siluMulRef`. Its
 * magnitude scales the sums' by about how far their errors δg, δu move h: |δh| ≤ 1.13·|u|·|δg| +
 * |g|·|δu| (act' ≤ 1.1 for silu, 1.13 for gelu_tanh; |act(g)| ≤ |g|).
 */
export function gatedMatmulRef(
  gate: QuantizedMatrix,
  up: QuantizedMatrix,
  x: Float32Array,
  M: number,
  activation: GateActivation,
): { y: Float32Array; magnitude: Float32Array } {
  const g = matmulRef(gate, x, M);
  const u = matmulRef(up, x, M);
  const magnitude = g.magnitude.map(
    (a, i) => a * (Math.abs(u.y[i]!) + 1) + u.magnitude[i]! * Math.abs(g.y[i]!),
  );
  return { y: siluMulRef(g.y, u.y, M, gate.rows, activation), magnitude };
}
