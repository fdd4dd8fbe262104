// What picks and renders a matmul variant: the uniforms every part's dispatch writes, the static
// options (fused norm, epilogue), the variant a format, shape and context take, and its template
// values and pipeline key over matmul_serial.wgsl or matmul_split_k.wgsl (the dispatch sizes they
// take are plan.ts's). quantScaleVars and codeVars serve the other kernels that decode weights.
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, type WgslVars, wgslVariant } from '../../gpu/wgsl.js';
import {
  CODE_BITS,
  codeBias,
  codeWordType,
  IQ4_VALUES,
  iq4Format,
  isIntFormat,
  latticeBlockWords,
  latticeFormat,
  lowPlaneBits,
  type WeightFormat,
} from '../../quant/formats.js';
import type { GateActivation } from '../elementwise/elementwise.js';
import type { GpuMatrix, GpuMatrixPart } from './matrix.js';
import {
  columnsPerGroup,
  gridPerGroup,
  groupPairs,
  loadsPerUnit,
  planar,
  SERIAL_COLUMNS,
  SERIAL_THREADS,
  SPLIT_K_THREADS,
  splitLanes,
  unitsPerTrip,
  WIDE_BLOCKS,
  wideLoads,
} from './plan.js';

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
  /** Largest M accepted by encode (default 16, at most PREFILL_MAX_M: matmul.ts). */
  maxM?: number;
  norm?: MatmulNorm;
  /** Default `store`. */
  epilogue?: MatmulEpilogue;
  /**
   * Whether a prefill of GEMM_MIN_ROWS rows or more takes the tiled GEMM (matmul_gemm.wgsl).
   * Default: in the GPU forms, not in the serial ones (bench:prefill compares them with it set).
   */
  prefillGemm?: boolean;
}

/** The parts of a matmul variant (either form) that do not depend on the accumulator count. */
export interface MatmulVariant {
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
export function matmulWgsl(format: WeightFormat, tm: number, v: MatmulVariant): WgslVariant {
  return wgslVariant(matmulTemplate(v), MatmulParams, matmulVars(format, tm, v));
}

/**
 * The template of a matmul variant's form: matmul_serial.wgsl or matmul_split_k.wgsl (the expert
 * matmul of kernels/moe renders their GROUPS variant from it).
 */
export function matmulTemplate(v: Pick<MatmulVariant, 'serial'>): string {
  return v.serial ? shaders.matmul_serial : shaders.matmul_split_k;
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
    // The expert matmul's variant (kernels/moe/experts.ts sets it, with its own uniforms).
    GROUPS: false,
  };
}

/**
 * Output columns one workgroup of the matmul computes in the variant with `tm` rows of x per tile
 * (1: the GEMV) and this layout: serial {@link SERIAL_THREADS} · {@link SERIAL_COLUMNS}; split-K
 * (64 / lanes) row groups of {@link columnsPerGroup} columns.
 */
export function matmulRowsPerWorkgroup(tm: number, v: Pick<MatmulVariant, 'serial' | 'lanes'>): number {
  return v.serial ? SERIAL_THREADS * SERIAL_COLUMNS : (SPLIT_K_THREADS / v.lanes) * columnsPerGroup(tm);
}
