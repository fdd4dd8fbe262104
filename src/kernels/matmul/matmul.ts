// Matmul with fused dequantisation: y [M, N] = x [M, K] · Wᵀ, W [N, K] in any WeightFormat.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, type WgslVars, wgslVariant } from '../../gpu/wgsl.js';
import {
  CODE_BITS,
  codeBias,
  codeWordType,
  dequantize,
  GEOMETRY,
  IQ4_VALUES,
  iq4Format,
  isIntFormat,
  type LatticeFormat,
  latticeBlockWords,
  latticeFormat,
  latticeGrid,
  lowPlaneBits,
  type QuantizedMatrix,
  type WeightFormat,
} from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { type GateActivation, siluMulRef } from '../elementwise/elementwise.js';
import type { GpuMatrix, GpuMatrixPart } from './matrix.js';

/**
 * Uniforms of matmul_serial.wgsl, matmul_split_k.wgsl and matmul_w8a8.wgsl: batch M, total N (the
 * stride of y), K, first x row, the part being dispatched (its first output column and row count),
 * the RMSNorm epsilon of a fused norm (the matmul's NORM variant; 0 and unused otherwise) and the
 * lanes per output of matmul_split_k.wgsl ({@link splitLanes}; unused elsewhere).
 */
export const MatmulParams = defineUniforms('Params', {
  M: 'u32',
  N: 'u32',
  K: 'u32',
  x_off: 'u32',
  n_off: 'u32',
  n_rows: 'u32',
  eps: 'f32',
  lanes: 'u32',
});
const Params = MatmulParams;

/** Largest batch (rows of x) one {@link Matmul} dispatch accepts. */
export const MATMUL_MAX_M = 64;

/** Uniform values of one part's dispatch (shared by Matmul and MatmulW8A8). */
export function matmulParams(
  w: GpuMatrix,
  part: GpuMatrixPart,
  M: number,
  xOffsetRows: number,
  eps = 0,
  lanes = 0,
): Record<LayoutKeys<typeof MatmulParams>, number> {
  return {
    M,
    N: w.rows,
    K: w.cols,
    x_off: xOffsetRows,
    n_off: part.row0,
    n_rows: part.rows,
    eps,
    lanes,
  };
}

/**
 * Accumulators per thread (the WGSL constant MT of matmul_w8a8.wgsl) of the GEMM variant that
 * serves batches up to `maxM` rows: the next power of two, at least 2.
 */
export function accumulators(maxM: number): number {
  let mt = 2;
  while (mt < maxM) mt *= 2;
  return mt;
}

/**
 * Accumulator counts of the W8A8 GEMM variants an instance for `maxM` rows compiles (the default
 * of {@link PartedMatmul}; {@link Matmul} tiles instead, see {@link matmulTiles}): 4 and 16 below
 * {@link accumulators}(maxM), then that one. A batch runs the smallest variant that holds it: a
 * thread with 64 accumulators makes 64 loop trips per weight block and holds 64 registers (spilled
 * on many GPUs) even for the 2 to 8 rows of a small draft tree.
 */
export function gemmVariants(maxM: number): number[] {
  const top = accumulators(maxM);
  return [...[4, 16].filter((mt) => mt < top), top];
}

/**
 * Rows of x per tile (the WGSL constant TM) of the GEMM variants a {@link Matmul} for `maxM` rows
 * compiles. A batch runs the smallest tile that holds it, and batches over 8 rows run the 8-row
 * tile once per 8 rows (each weight block read once per tile and multiplied by its TM rows).
 * Serial form: 2, 4 and 8, as far as `maxM` needs them (a thread's unrolled accumulators cost a
 * CPU implementation per tile row, computed or not). Split-K form: the one tile that holds
 * min(maxM, 8) rows; a short batch computes only its rows, so smaller tiles would save only
 * registers, at a pipeline (a compile at load) each.
 */
export function matmulTiles(maxM: number, serial = true): number[] {
  if (!serial) return [Math.min(8, accumulators(maxM))];
  return [2, 4, 8].filter((tm) => tm === 2 || tm / 2 < maxM);
}

/** Output columns per row group (the WGSL constant R) of the split-K form: 1 in the GEMV, 2 in the tiles. */
function columnsPerGroup(tm: number): number {
  return tm === 1 ? 1 : 2;
}

/** Threads per workgroup of the split-K form (its norm prologue sums as rmsnorm.wgsl's 64 threads do). */
const SPLIT_K_THREADS = 64;

/**
 * Threads a split-K decode matmul (the GEMV) aims to launch: enough that every thread having one
 * trip's loads in flight (64 bytes of codes) keeps ~4 MB in flight, past what an H100 needs to
 * stream at full bandwidth (bandwidth × latency ≈ 2.3 MB; bench/occupancy.ts has the model).
 */
export const GEMV_TARGET_THREADS = 65536;

/** Threads per workgroup of the serial form (see {@link GpuContext.kernels}). */
export const SERIAL_THREADS = 4;

/**
 * Output columns per thread of the serial form. On SwiftShader (demo target, f16), 8 against 4
 * took a 17-row pass from ~285 to ~210 ms and a one-row pass from ~36 to ~31 ms (2 gave ~310 ms
 * at 17 rows; 16 gained 10% at 17 rows and lost 10% at one). Threads per workgroup (4, 16) made
 * no difference there; 4 keeps the most workgroups for a CPU with many cores.
 */
export const SERIAL_COLUMNS = 8;

/** Blocks of 16 codes in a unit of the WIDE split-K form, by bits per code (see {@link blocksPerUnit}). */
const WIDE_BLOCKS: Readonly<Record<number, number>> = { 2: 4, 3: 8, 4: 2, 5: 8, 6: 4 };

/**
 * Blocks of 16 elements one unit of the split-K form covers for a `format` matrix of K columns
 * (the WGSL constant U) where {@link wideLoads} holds: 2 for the 4-bit formats and 4 for int2 (one
 * 16-byte load of codes), 8 for the 5-bit formats (a chunk of 128: four loads of nibbles and one
 * of high bits) and 4 for q6_k (half a chunk: two loads of nibbles and one of high bits); else 1
 * (a block of f32 takes four loads, of f16 two); q3_k's unit is a chunk of 128 too, in two loads of
 * 2-bit codes and one of high bits.
 */
export function blocksPerUnit(format: WeightFormat, K: number): number {
  return wideLoads(format, K) ? WIDE_BLOCKS[CODE_BITS[format]]! : 1;
}

/**
 * 16-byte loads per unit (the WGSL constant UV): the f32 and f16 blocks are 64 and 32 bytes; a
 * wide planar unit (3-, 5- and 6-bit codes) is U · LB / 8 loads of its low plane (LB bits per code)
 * and one of high bits; the others one load (the narrow planar read is three u32 words as one).
 */
function loadsPerUnit(format: WeightFormat, wide: boolean): number {
  if (format === 'f32') return 4;
  if (format === 'f16') return 2;
  return wide && planar(format) ? (WIDE_BLOCKS[CODE_BITS[format]]! * lowPlaneBits(format)) / 8 + 1 : 1;
}

/** Formats whose codes are stored in a low plane and a high plane (3-, 5- and 6-bit codes). */
function planar(format: WeightFormat): boolean {
  return lowPlaneBits(format) > 0;
}

/**
 * Units each lane loads before it uses any, per trip (the WGSL constant UT), for a `format` matrix
 * read `wide` or not ({@link wideLoads}): 64 bytes of codes per weight row in the GEMV (one unit of f32, two of f16, four of
 * the others: 16 bytes each, or 8, 4 and 12 in the narrow reads; one wide planar unit, 80 or 48
 * bytes), half that in the tiles, which hold twice the rows and TM accumulators per row. The sums
 * do not depend on it.
 */
export function unitsPerTrip(format: WeightFormat, tm: number, wide: boolean): number {
  const gemv = format === 'f32' ? 1 : format === 'f16' ? 2 : planar(format) && wide ? 1 : 4;
  return tm === 1 ? gemv : Math.max(1, gemv / 2);
}

/**
 * Most threads {@link splitLanes} launches to give every lane a single trip: about what the largest
 * GPUs hold resident (an H100: 132 SMs × 2048).
 */
export const GEMV_MAX_THREADS = 262144;

/**
 * Lanes that split the K of one output in the split-K form (the WGSL constant KL, a uniform) for a
 * `format` matrix [N, K]: a power of two from 4 to 64, no more than the row has units (no lane
 * idle). First the fewest that launch N · KL ≥ {@link GEMV_TARGET_THREADS} threads; then more,
 * while the launch stays within {@link GEMV_MAX_THREADS}, until every lane's units fit one GEMV trip
 * (the whole matrix requested at once: what a matrix smaller than a GPU's bandwidth × latency
 * needs). It is the matrix's own, so its GEMV and its tiles sum every output in one order (batch
 * invariance).
 */
export function splitLanes(format: WeightFormat, N: number, K: number): number {
  const units = K / 16 / blocksPerUnit(format, K);
  const trip = unitsPerTrip(format, 1, wideLoads(format, K));
  let kl = 4;
  while (kl < 64 && 2 * kl <= units && N * kl < GEMV_TARGET_THREADS) kl *= 2;
  while (kl < 64 && 2 * kl <= units && Math.ceil(units / kl) > trip && 2 * kl * N <= GEMV_MAX_THREADS)
    kl *= 2;
  return kl;
}

/**
 * Output columns one workgroup of the matmul computes in the variant with `tm` rows of x per tile
 * (1: the GEMV) and this layout: serial {@link SERIAL_THREADS} · {@link SERIAL_COLUMNS}; split-K
 * (64 / lanes) row groups of {@link columnsPerGroup} columns.
 */
export function matmulRowsPerWorkgroup(tm: number, v: Pick<MatmulVariant, 'serial' | 'lanes'>): number {
  return v.serial ? SERIAL_THREADS * SERIAL_COLUMNS : (SPLIT_K_THREADS / v.lanes) * columnsPerGroup(tm);
}

/**
 * What a {@link Matmul} does after the product: `store` y = x·Wᵀ; `add` y += x·Wᵀ (the residual
 * add, exactly the add kernel's `y + tmp`); `silu` y = silu(x·gateᵀ) · (x·upᵀ) over a gated pair
 * (see {@link uploadGatedPair}), and `gelu` y = gelu_tanh(x·gateᵀ) · (x·upᵀ) (GeGLU), each exactly
 * as the elementwise SiluMul computes it with that activation.
 */
export type MatmulEpilogue = 'store' | 'add' | GateActivation;

/** Whether an epilogue gates: `silu` and `gelu` take (and only they take) a gated pair. */
export function gatedEpilogue(epilogue: MatmulEpilogue): epilogue is GateActivation {
  return epilogue === 'silu' || epilogue === 'gelu';
}

/**
 * A fused RMSNorm before the product: x is the un-normed residual and the matmul multiplies W by
 * rmsnorm(x)·g, bit-identical to RmsNorm (kernels/norm) then Matmul. `weight` is the norm's
 * f32 [K] buffer; `onePlus` scales by 1 + weight (as RmsNormOptions.onePlus).
 */
export interface MatmulNorm {
  readonly weight: GPUBuffer;
  readonly eps: number;
  readonly onePlus?: boolean;
}

/** Static options of a {@link Matmul}: the largest batch, the fused prologue and epilogue. */
export interface MatmulOptions {
  /** Largest M accepted by encode (default 16, at most {@link MATMUL_MAX_M}). */
  maxM?: number;
  norm?: MatmulNorm;
  /** Default `store`. */
  epilogue?: MatmulEpilogue;
}

/** The parts of a matmul variant (either form) that do not depend on the accumulator count. */
export interface MatmulVariant {
  /** f16 weights read as native f16 (needs the device's shader-f16; see {@link useHalf}). */
  readonly half: boolean;
  /** Fused RMSNorm prologue, and whether it scales by 1 + weight. */
  readonly norm: false | 'weight' | 'one-plus';
  readonly epilogue: MatmulEpilogue;
  /** The serial form (see {@link GpuContext.kernels}); else K is split over `lanes` lanes. */
  readonly serial: boolean;
  /** Split-K only: lanes per output ({@link splitLanes} of the matrix); 0 in the serial form. */
  readonly lanes: number;
  /** Split-K only: 2- to 6-bit codes read 16 bytes per load (see {@link wideLoads}). */
  readonly wide: boolean;
  /** Serial GEMV only: a loop trip covers a group's two blocks on one grid (see {@link groupPairs}). */
  readonly pairs: boolean;
}

/**
 * Whether a matmul over `format` weights takes the `enable f16;` variant: only f16 weights, and
 * only on a device with shader-f16 (the f32 unpacking serves everything else, and SwiftShader).
 * Both give the same values: f16 widens to f32 exactly.
 */
export function useHalf(ctx: Pick<GpuContext, 'features'>, format: WeightFormat): boolean {
  return format === 'f16' && ctx.features.f16;
}

/**
 * Whether matmul_split_k.wgsl reads the codes of a `format` matrix with K columns 16 bytes at a
 * time (its WIDE variant: one vec4<u32> holds 32 nibble or 64 2-bit codes, or a planar unit's
 * nibbles or high bits): when K is a multiple of the unit ({@link blocksPerUnit}: 32 elements for
 * the 4-bit formats, 64 for int2 and q6_k, 128 for the 5-bit ones), so that every row starts on a
 * unit. Other K read 8 (4-bit), 4 (int2) or 12 (planar) bytes per 16-element block; f32, f16 and
 * int8 read 16 bytes per block anyway.
 */
export function wideLoads(format: WeightFormat, K: number): boolean {
  if (latticeFormat(format)) return false;
  const blocks = WIDE_BLOCKS[CODE_BITS[format]];
  return blocks !== undefined && K % (16 * blocks) === 0;
}

/**
 * Whether matmul_serial.wgsl's GEMV walks a `format` matrix of K columns a group (32 elements,
 * two blocks) per loop trip, computing each row's grid once per trip: for the formats with a grid
 * per 32 (all but int2 and q6_k) when K % 32 == 0, so that every row starts on a group. The sums
 * are the same, block after block. On
 * SwiftShader this took the int4 GEMV at 4096x11008 from 1.08x to 0.87x the f16 one's time (q4_0
 * from 0.88x to 0.71x), the branch that picked each group's first block gone.
 */
export function groupPairs(format: WeightFormat, K: number): boolean {
  return gridPerGroup(format) && K % 32 === 0;
}

/** Formats whose grid is one per 32 elements (a group, or a Q4_K / Q5_K / IQ4_XS sub-block). */
function gridPerGroup(format: WeightFormat): boolean {
  return isIntFormat(format) && GEOMETRY[format].unit === 32;
}

/**
 * The flags of quant_scales.wgsl for `format` (which grid its scales decode to), set by every
 * kernel that includes it (matmul, matmul_w8a8, embed): each integer format's own, Q4_K's and
 * Q5_K's shared 6-bit sub-scale fields as SC6.
 */
export function quantScaleVars(format: WeightFormat): WgslVars {
  return {
    INT8: format === 'int8',
    Q4_0: format === 'q4_0',
    Q4_1: format === 'q4_1',
    Q5_0: format === 'q5_0',
    Q5_1: format === 'q5_1',
    SC6: format === 'int4' || format === 'q5_k',
    Q6_K: format === 'q6_k',
    Q3_K: format === 'q3_k',
    IQ4_NL: format === 'iq4_nl',
    IQ4_XS: format === 'iq4_xs',
    INT2: format === 'int2',
    LATTICE: latticeFormat(format),
    IQ2_XXS: format === 'iq2_xxs',
    IQ2_XS: format === 'iq2_xs',
    IQ2_S: format === 'iq2_s',
    IQ3_XXS: format === 'iq3_xxs',
    IQ3_S: format === 'iq3_s',
    DW: latticeFormat(format) ? latticeBlockWords(format) : 0,
  };
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
 * The code-layout flags of `format` (matmul_common.wgsl, embed.wgsl): NIBBLES (4-bit codes, flat
 * nibbles; IQ4: each nibble stands for its value in IQ4_TABLE, the int8s of `IQ4_VALUES` packed
 * little-endian in four words), PLANAR (3-, 5- and 6-bit codes in a low plane of LB bits and a high
 * plane of HB bits, minus BIAS); INT8 and INT2 are {@link quantScaleVars}'.
 */
export function codeVars(format: WeightFormat): WgslVars {
  const bits = CODE_BITS[format];
  const lb = lowPlaneBits(format);
  return {
    NIBBLES: isIntFormat(format) && bits === 4,
    IQ4: iq4Format(format),
    IQ4_TABLE: IQ4_TABLE,
    PLANAR: planar(format),
    LB: lb,
    HB: planar(format) ? bits - lb : 0,
    BIAS: codeBias(format),
  };
}

/** `IQ4_VALUES` as WGSL: four u32 literals, byte k of word j the int8 of nibble 4j + k. */
const IQ4_TABLE = [0, 1, 2, 3]
  .map((j) => {
    let v = 0;
    for (let k = 0; k < 4; k++) v |= (IQ4_VALUES[4 * j + k]! & 0xff) << (8 * k);
    return `0x${(v >>> 0).toString(16)}u`;
  })
  .join(', ');

/** A matrix's shape: N output rows (a gated pair's outputs), K columns. */
export interface MatrixShape {
  readonly rows: number;
  readonly cols: number;
}

/** The variant a {@link Matmul} over a `format` matrix of this shape with these options runs on `ctx`. */
export function matmulVariant(
  ctx: Pick<GpuContext, 'features'> & Partial<Pick<GpuContext, 'kernels'>>,
  format: WeightFormat,
  shape: MatrixShape,
  opts: Omit<MatmulOptions, 'norm'> & { norm?: Pick<MatmulNorm, 'onePlus'> } = {},
): MatmulVariant {
  const serial = ctx.kernels === 'serial';
  const K = shape.cols;
  return {
    half: useHalf(ctx, format),
    norm: opts.norm ? (opts.norm.onePlus ? 'one-plus' : 'weight') : false,
    epilogue: opts.epilogue ?? 'store',
    serial,
    lanes: serial ? 0 : splitLanes(format, shape.rows, K),
    wide: !serial && wideLoads(format, K),
    pairs: serial && groupPairs(format, K),
  };
}

/**
 * Pipeline key and WGSL of one matmul variant (format × tile rows × fusions × paths): the serial
 * form's template (matmul_serial.wgsl) or the split-K form's (matmul_split_k.wgsl), each over
 * matmul_common.wgsl. The key names the form (SERIAL) with the other values.
 */
export function matmulSource(format: WeightFormat, tm: number, v: MatmulVariant): WgslVariant {
  const template = v.serial ? shaders.matmul_serial : shaders.matmul_split_k;
  return wgslVariant(template, Params, matmulVars(format, tm, v));
}

/**
 * The template values of matmul_serial.wgsl or matmul_split_k.wgsl (the form `v.serial` picks) for
 * the variant with `tm` rows of x per tile (1: the GEMV); bench/ renders other column counts from it.
 */
export function matmulVars(format: WeightFormat, tm: number, v: MatmulVariant): WgslVars {
  return {
    TM: tm,
    R: v.serial ? SERIAL_COLUMNS : columnsPerGroup(tm),
    TPR: v.serial ? SERIAL_THREADS : SPLIT_K_THREADS,
    // Which template renders (neither reads it): keeps the form in the pipeline key, which
    // bench/occupancy.ts reads back.
    SERIAL: v.serial,
    // Serial: a grid per group kept over its blocks (GROUPED), or a group per trip in the GEMV
    // (PAIRS; in the tiles the doubled block code took SwiftShader about twice as long to compile).
    PAIRS: v.pairs && tm === 1,
    GROUPED: v.serial && gridPerGroup(format) && !(v.pairs && tm === 1),
    ...(v.serial
      ? {}
      : {
          U: v.wide ? WIDE_BLOCKS[CODE_BITS[format]]! : 1,
          UV: loadsPerUnit(format, v.wide),
          UT: unitsPerTrip(format, tm, v.wide),
        }),
    HALF: v.half,
    WTYPE: v.wide ? 'vec4<u32>' : codeWordType(format),
    F32: format === 'f32',
    F16: format === 'f16',
    ...quantScaleVars(format),
    ...codeVars(format),
    WIDE: v.wide,
    SCALES: isIntFormat(format),
    NORM: v.norm !== false,
    ONE_PLUS: v.norm === 'one-plus',
    GAMMA_AT: latticeFormat(format) ? 6 : isIntFormat(format) ? 5 : 4,
    ADD: v.epilogue === 'add',
    GATED: gatedEpilogue(v.epilogue),
    GELU: v.epilogue === 'gelu',
  };
}

/**
 * Compiles (and waits for) the GEMV and the largest GEMM tile a {@link Matmul} of this format,
 * shape and these options needs, so WGSL errors surface as {@link GpuStepError} with diagnostics
 * instead of a later validation error. The smaller tiles share their source and compile on first
 * use. The shape picks the load width ({@link wideLoads}) and the lanes ({@link splitLanes}).
 */
export async function prepareMatmul(
  ctx: GpuContext,
  format: WeightFormat,
  shape: MatrixShape,
  maxM = 16,
  opts: Omit<MatmulOptions, 'maxM' | 'norm'> & { norm?: Pick<MatmulNorm, 'onePlus'> } = {},
): Promise<void> {
  const v = matmulVariant(ctx, format, shape, opts);
  // The GEMV and the largest tile; the smaller tiles compile when a batch first needs them.
  const tms = maxM > 1 ? [1, matmulTiles(maxM, v.serial).at(-1)!] : [1];
  await Promise.all(tms.map((tm) => ctx.pipelines.prepare('matmul', ...matmulSource(format, tm, v))));
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
  private readonly params: UniformSlot<LayoutKeys<typeof Params>>[];
  /** The split-K lanes per output the kernel reads from its uniforms (0: a kernel without them). */
  protected lanes = 0;

  /**
   * `name` prefixes error messages; `kernel` and `source(mt)` name and render the pipeline of a
   * variant with `mt` accumulators (1 for the GEMV), whose workgroups each compute
   * `rowsPerWorkgroup(mt)` rows of a part (default 1). `variants` are the GEMM variants' `mt`
   * (default {@link gemmVariants}(maxM)); a batch runs the smallest that holds it, or the largest
   * (which then loops over the batch).
   */
  protected constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly w: GpuMatrix,
    maxM: number,
    protected readonly name: string,
    kernel: string,
    source: (mt: number) => WgslVariant,
    private readonly rowsPerWorkgroup: (mt: number) => number = () => 1,
    variants: (maxM: number) => number[] = gemmVariants,
  ) {
    this.maxM = maxM;
    if (!Number.isInteger(maxM) || maxM < 1 || maxM > MATMUL_MAX_M)
      throw new InvalidInputError(`${name}: maxM = ${maxM} must be an integer in [1, ${MATMUL_MAX_M}]`);
    this.compile = (mt) => ctx.pipelines.get(kernel, ...source(mt));
    this.gemv = this.compile(1);
    const mts = maxM > 1 ? variants(maxM) : [];
    this.gemms = mts.map((mt, i) => ({
      mt,
      pipeline: i === mts.length - 1 ? this.compile(mt) : undefined,
    }));
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
    pass.setPipeline(pipeline);
    this.w.parts.forEach((part, i) => {
      const slot = this.params[i]!;
      slot.write(matmulParams(this.w, part, M, xOffsetRows, eps, this.lanes));
      const buffers = [slot.buffer, part.data, ...inputs, y];
      if (part.scales) buffers.push(part.scales);
      buffers.push(...after);
      pass.setBindGroup(0, this.binds.get(pipeline, buffers));
      const groups = Math.ceil(part.rows / rows);
      this.ctx.counter.dispatch(pass, ...grid(groups, this.ctx.limits.maxComputeWorkgroupsPerDimension));
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
      (tm) => matmulSource(w.format, tm, v),
      (tm) => matmulRowsPerWorkgroup(tm, v),
      (maxM) => matmulTiles(maxM, v.serial),
    );
    this.norm = norm;
    this.epilogue = v.epilogue;
    this.lanes = v.lanes;
    this.table = latticeFormat(w.format) ? latticeTable(ctx, w.format) : undefined;
  }

  /**
   * Records y[0..M) = f(x[xOffsetRows .. xOffsetRows + M)) · Wᵀ into `pass` (f: the fused norm, if
   * any; `add`: y += ...). x holds f32 rows of K elements, y M rows of N elements (N = the outputs,
   * I for a gated pair). Creates nothing after the first call per buffer set.
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
    const norm = this.norm;
    const after = [...(this.table ? [this.table] : []), ...(norm ? [norm.weight] : [])];
    this.dispatch(pass, [x], y, M, xOffsetRows, after, norm?.eps ?? 0);
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
