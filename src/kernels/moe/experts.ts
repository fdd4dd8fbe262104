// The expert stack of a mixture layer resident on the GPU (one matrix per expert, whole experts per
// part), and the expert-indexed matmul over it: every group of the routing table (table.ts) runs
// its expert's rows, reading only the chosen experts' weights, one dispatch per part, with no host
// round trip (the group sizes stay on the GPU). The kernel is the matmul's own (the GROUPS variant of
// matmul_serial.wgsl and matmul_split_k.wgsl), so every weight format runs in both forms, and each
// output is summed in the order of a plain Matmul over that expert (batch invariance).
import { InvalidInputError } from '../../errors.js';
import { createBuffer, writeBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import {
  checkShape,
  dataWords,
  isIntFormat,
  latticeFormat,
  packedBytes,
  type QuantizedMatrix,
  scaleWords,
  splitAlign,
  type WeightFormat,
} from '../../quant/formats.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import type { GateActivation } from '../elementwise/elementwise.js';
import { gatedMatmulRef, latticeTable, matmulRef } from '../matmul/matmul.js';
import { maxBinding } from '../matmul/matrix.js';
import { matmulTiles } from '../matmul/plan.js';
import {
  type MatmulVariant,
  matmulRowsPerWorkgroup,
  matmulTemplate,
  matmulVariant,
  matmulVars,
} from '../matmul/variant.js';
import { maxGroups, type RouteShape, routeTableLayout } from './table.js';

/** Experts [e0, e0 + experts) of a {@link GpuExperts}, each buffer within one storage binding. */
export interface GpuExpertsPart {
  readonly e0: number;
  readonly experts: number;
  /** Codes (or floats) of the part's experts, one after another, u32 words. */
  readonly data: GPUBuffer;
  /** Their block metadata (integer formats). */
  readonly scales?: GPUBuffer;
}

/**
 * The experts of one projection of a mixture layer, each an [N, K] matrix (a gated expert: its N
 * gate rows, then its N up rows) in one packed format, resident on the GPU. Expert e's matrix is
 * the packed [WRF · N, K] matrix (WRF = 2 gated, else 1) at flat element (e - part.e0) · WRF · N ·
 * K of its part: every expert starts on a whole block of codes and scales.
 */
export interface GpuExperts {
  readonly format: WeightFormat;
  readonly experts: number;
  /** N: outputs per expert (a gated expert's I). */
  readonly rows: number;
  /** K: input features. */
  readonly cols: number;
  /** Each expert holds its gate rows then its up rows (a `silu` or `gelu` {@link ExpertMatmul}). */
  readonly gated: boolean;
  /** Whole experts per part, each part within the device's binding limits. */
  readonly parts: readonly GpuExpertsPart[];
  /** Bytes one expert's matrix (both halves if gated) reads: `packedBytes`. */
  readonly expertBytes: number;
  /** Bytes of all experts. */
  readonly bytes: number;
  destroy(): void;
}

/** What an {@link ExpertMatmul} does after the product: store it, or gate (see `MatmulEpilogue`). */
export type ExpertEpilogue = 'store' | GateActivation;

/**
 * Allocates (unfilled) an expert stack of `experts` matrices [N, K] in `format` (`gated`: each its
 * gate [N, K] then its up [N, K]), as many whole experts per part as fit `maxBindingBytes` (default:
 * the device's smaller of maxStorageBufferBindingSize and maxBufferSize) and keep the part's flat
 * element indices within u32. Fill it with {@link writeExpertRows}. Throws
 * {@link InvalidInputError} (naming `label`) when K % 16 != 0, when an expert's elements (each half's,
 * gated) are not a multiple of `splitAlign(format)` (an expert, or its up half, would not start on
 * a block), or when one expert exceeds the binding.
 */
export function allocateExperts(
  ctx: GpuContext,
  format: WeightFormat,
  experts: number,
  N: number,
  K: number,
  label: string,
  gated = false,
  maxBindingBytes = maxBinding(ctx),
): GpuExperts {
  checkShape(format, N, K);
  if (!Number.isInteger(experts) || experts < 1)
    throw new InvalidInputError(`allocateExperts ${label}: experts = ${experts} must be a positive integer`);
  if (K % 16 !== 0)
    throw new InvalidInputError(`allocateExperts ${label}: K = ${K} must be a multiple of 16`);
  const wrf = gated ? 2 : 1;
  const align = splitAlign(format);
  if ((N * K) % align !== 0)
    throw new InvalidInputError(
      `allocateExperts ${label}: ${format} expert${gated ? ' half' : ''} [${N}, ${K}] has ${N * K} elements, not a multiple of ${align}: ${gated ? 'its up half or ' : ''}the next expert would not start on a block`,
    );
  const elements = wrf * N * K;
  const [dataBytes, scaleBytes] = [4 * dataWords(format, elements), 4 * scaleWords(format, elements)];
  // Whole experts per part: within the binding, and flat element indices within u32.
  const perPart = Math.min(
    Math.floor(maxBindingBytes / Math.max(dataBytes, scaleBytes)),
    Math.floor(2 ** 32 / elements),
  );
  if (perPart < 1)
    throw new InvalidInputError(
      `allocateExperts ${label}: one ${format} expert [${wrf * N}, ${K}] (${dataBytes} bytes) exceeds ${maxBindingBytes} bytes`,
    );
  const parts: GpuExpertsPart[] = [];
  for (let e0 = 0; e0 < experts; e0 += perPart) {
    const n = Math.min(perPart, experts - e0);
    const tag = `${label}[${e0}:${e0 + n}]`;
    const data = createBuffer(ctx, n * dataBytes, `${tag}.data`);
    const scales = isIntFormat(format) ? createBuffer(ctx, n * scaleBytes, `${tag}.scales`) : undefined;
    parts.push({ e0, experts: n, data, ...(scales ? { scales } : {}) });
  }
  const expertBytes = packedBytes(format, wrf * N, K);
  return {
    format,
    experts,
    rows: N,
    cols: K,
    gated,
    parts,
    expertBytes,
    bytes: experts * expertBytes,
    destroy() {
      for (const p of parts) {
        p.data.destroy();
        p.scales?.destroy();
      }
    },
  };
}

/**
 * Writes packed rows `q` (rows [row0, row0 + q.rows) of expert `expert`'s gate (half 0) or up
 * (half 1) matrix [N, K]; an ungated expert has only half 0) into its part. row0 · K and (row0 +
 * q.rows) · K must be multiples of `splitAlign(format)` (the aligned slices `sliceRows` cuts), so
 * the words written are those rows' alone. Throws {@link InvalidInputError} otherwise, and on a
 * format, shape or word count that does not match.
 */
export function writeExpertRows(
  ctx: GpuContext,
  m: GpuExperts,
  expert: number,
  half: 0 | 1,
  q: QuantizedMatrix,
  row0: number,
): void {
  const { format, rows: N, cols: K } = m;
  const where = `writeExpertRows: expert ${expert} half ${half} rows [${row0}, ${row0 + q.rows})`;
  const part = m.parts.find((p) => expert >= p.e0 && expert < p.e0 + p.experts);
  if (!Number.isInteger(expert) || !part)
    throw new InvalidInputError(`${where}: expert must be an integer in [0, ${m.experts})`);
  if (half !== 0 && !(half === 1 && m.gated))
    throw new InvalidInputError(
      `${where}: ${m.gated ? 'a gated expert has halves 0 and 1' : 'half must be 0'}`,
    );
  if (q.format !== format || q.cols !== K)
    throw new InvalidInputError(
      `${where}: got ${q.format} [${q.rows}, ${q.cols}], the experts are ${format} [${N}, ${K}]`,
    );
  const end = row0 + q.rows;
  const align = splitAlign(format);
  if (!Number.isInteger(row0) || row0 < 0 || end > N || (row0 * K) % align !== 0 || (end * K) % align !== 0)
    throw new InvalidInputError(
      `${where} of ${N}: must lie within the expert and start and end on a multiple of ${align} elements (K = ${K})`,
    );
  if (
    q.data.length !== dataWords(format, q.rows * K) ||
    (q.scales?.length ?? 0) !== scaleWords(format, q.rows * K)
  )
    throw new InvalidInputError(
      `${where}: ${q.data.length} data and ${q.scales?.length ?? 0} scale words, expected ${dataWords(format, q.rows * K)} and ${scaleWords(format, q.rows * K)}`,
    );
  // Every offset is a multiple of the block, so the words before it are those of whole blocks.
  const at = ((expert - part.e0) * (m.gated ? 2 : 1) + half) * N * K + row0 * K;
  writeBuffer(ctx, part.data, q.data, 4 * dataWords(format, at));
  if (part.scales && q.scales) writeBuffer(ctx, part.scales, q.scales, 4 * scaleWords(format, at));
}

/**
 * Uniforms of the matmul's GROUPS variant: MatmulParams' fields (M unused: each group's count
 * takes its place; N the stride of y; x_off, n_off 0; n_rows = N per expert), then the part's
 * experts [e0, e0 + experts), the flat elements per expert (stride = WRF · N · K), the word
 * offsets of the routing table's groups and members, and whether x rows are gathered (1) or the
 * sorted rows (0).
 */
export const ExpertParams = defineUniforms('Params', {
  M: 'u32',
  N: 'u32',
  K: 'u32',
  x_off: 'u32',
  n_off: 'u32',
  n_rows: 'u32',
  eps: 'f32',
  lanes: 'u32',
  e0: 'u32',
  experts: 'u32',
  stride: 'u32',
  groups: 'u32',
  members: 'u32',
  gather: 'u32',
});

/** The shape and options an {@link ExpertMatmul} compiles for. */
interface ExpertVariant {
  readonly format: WeightFormat;
  readonly v: MatmulVariant;
  /** Rows per tile of the GEMM variants, smallest first (the matmul's, for the route's maxRows). */
  readonly tiles: readonly number[];
}

function expertVariant(
  ctx: GpuContext,
  format: WeightFormat,
  N: number,
  K: number,
  route: RouteShape,
  epilogue: ExpertEpilogue,
): ExpertVariant {
  checkEpilogue(epilogue);
  // Split-K lanes for the outputs of a decode step (its topK groups of N each); the GEMV and the
  // tiles share them, so every output sums in one order.
  const v = matmulVariant(ctx, format, { rows: N * route.topK, cols: K }, { epilogue });
  return { format, v, tiles: route.maxRows > 1 ? matmulTiles(route.maxRows, v.serial) : [] };
}

/** Throws unless `epilogue` is one the expert matmul runs (no residual add: the combine adds). */
function checkEpilogue(epilogue: ExpertEpilogue): void {
  if (epilogue !== 'store' && epilogue !== 'silu' && epilogue !== 'gelu')
    throw new InvalidInputError(`ExpertMatmul: epilogue ${String(epilogue)} must be store, silu or gelu`);
}

/** Pipeline key and WGSL of the GROUPS variant with `tm` rows per tile (1: the GEMV). */
function expertWgsl(e: ExpertVariant, tm: number): WgslVariant {
  return wgslVariant(matmulTemplate(e.v), ExpertParams, { ...matmulVars(e.format, tm, e.v), GROUPS: true });
}

/** The kernel name of the expert matmul's pipelines. */
const KERNEL = 'matmul-experts';

/**
 * y[s] = W_e · x[gather ? members[s] : s] for every sorted position s of every group (expert e) of
 * a routing table, over an expert stack: one dispatch per part of the stack, workgroup z one group
 * slot (min(experts, T · topK) of them), reading only the chosen experts' weights. T = 1 runs the
 * GEMV variant, T > 1 the smallest tile that holds T rows (or the largest, looped), whatever the
 * groups' sizes, which only the GPU knows. A row's outputs are bit-identical whatever T is and
 * whichever rows share its experts (batch invariance). Epilogues: `store`, or `silu` / `gelu` over
 * a gated stack; no fused norm or residual add.
 */
export class ExpertMatmul {
  readonly epilogue: ExpertEpilogue;
  private readonly variant: ExpertVariant;
  private readonly gemv: GPUComputePipeline;
  /** The GEMM tiles, each compiled when a pass first needs it (the largest at once). */
  private readonly gemms: { tm: number; pipeline: GPUComputePipeline | undefined }[];
  private readonly params: UniformSlot<LayoutKeys<typeof ExpertParams>>[];
  /** A lattice format's codebook (binding 5). */
  private readonly table: GPUBuffer | undefined;
  private readonly layout: ReturnType<typeof routeTableLayout>;

  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly w: GpuExperts,
    readonly shape: RouteShape,
    opts: { epilogue?: ExpertEpilogue } = {},
  ) {
    const epilogue = opts.epilogue ?? 'store';
    checkEpilogue(epilogue);
    if ((epilogue !== 'store') !== w.gated)
      throw new InvalidInputError(
        `ExpertMatmul: epilogue ${epilogue} ${w.gated ? 'cannot take' : 'needs'} gated experts (allocateExperts gated)`,
      );
    if (shape.experts !== w.experts)
      throw new InvalidInputError(
        `ExpertMatmul: the route has ${shape.experts} experts, the stack ${w.experts}`,
      );
    for (const [name, n] of [
      ['topK', shape.topK],
      ['maxRows', shape.maxRows],
    ] as const)
      if (!Number.isInteger(n) || n < 1)
        throw new InvalidInputError(`ExpertMatmul: route ${name} = ${n} must be a positive integer`);
    if (maxGroups(shape) > ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(
        `ExpertMatmul: ${maxGroups(shape)} group slots exceed the device's ${ctx.limits.maxComputeWorkgroupsPerDimension} workgroups per dimension`,
      );
    this.epilogue = epilogue;
    this.variant = expertVariant(ctx, w.format, w.rows, w.cols, shape, epilogue);
    this.layout = routeTableLayout(shape);
    this.gemv = this.compile(1);
    const tiles = this.variant.tiles;
    this.gemms = tiles.map((tm, i) => ({
      tm,
      pipeline: i === tiles.length - 1 ? this.compile(tm) : undefined,
    }));
    this.params = w.parts.map(
      (_, i) => new UniformSlot(ctx, ExpertParams, `${KERNEL}-${w.format}-params-${i}`),
    );
    this.table = latticeFormat(w.format) ? latticeTable(ctx, w.format) : undefined;
  }

  /**
   * Compiles (and waits for) the GEMV and the largest tile an {@link ExpertMatmul} of this format,
   * shape and epilogue runs, so WGSL errors surface as `GpuStepError` with diagnostics (as
   * `prepareMatmul` does for a Matmul).
   */
  static async prepare(
    ctx: GpuContext,
    format: WeightFormat,
    N: number,
    K: number,
    shape: RouteShape,
    epilogue: ExpertEpilogue = 'store',
  ): Promise<void> {
    const e = expertVariant(ctx, format, N, K, shape, epilogue);
    const tms = [1, ...e.tiles.slice(-1)];
    await Promise.all(tms.map((tm) => ctx.pipelines.prepare(KERNEL, ...expertWgsl(e, tm))));
  }

  private compile(tm: number): GPUComputePipeline {
    return this.ctx.pipelines.get(KERNEL, ...expertWgsl(this.variant, tm));
  }

  /**
   * Records, for every group of `table` (the routing table of T rows of the pass, on the GPU): y[s]
   * = f(W_expert · x[gather ? members[s] : s]) for s in the group, f the epilogue. x holds f32 rows of
   * K (T token rows when gathering, else the T · topK sorted rows), y the T · topK sorted rows of N.
   * One dispatch per part, z = min(experts, T · topK) group slots. Creates nothing after the first
   * call per buffer set.
   */
  encode(
    pass: GPUComputePassEncoder,
    x: GPUBuffer,
    y: GPUBuffer,
    table: GPUBuffer,
    T: number,
    gather: boolean,
  ): void {
    const { rows: N, cols: K } = this.w;
    const k = this.shape.topK;
    if (!Number.isInteger(T) || T < 1 || T > this.shape.maxRows)
      throw new InvalidInputError(
        `ExpertMatmul.encode: T = ${T} must be an integer in [1, ${this.shape.maxRows}]`,
      );
    if (x === y) throw new InvalidInputError('ExpertMatmul.encode: x and y must be different buffers');
    const xRows = gather ? T : T * k;
    if (x.size < xRows * K * 4)
      throw new InvalidInputError(
        `ExpertMatmul.encode: x has ${x.size} bytes, needs ${xRows * K * 4} for [${xRows}, ${K}]`,
      );
    if (y.size < T * k * N * 4)
      throw new InvalidInputError(
        `ExpertMatmul.encode: y has ${y.size} bytes, needs ${T * k * N * 4} for [${T * k}, ${N}]`,
      );
    if (table.size < this.layout.words * 4)
      throw new InvalidInputError(
        `ExpertMatmul.encode: the routing table has ${table.size} bytes, needs ${this.layout.words * 4}`,
      );
    const gemm = this.gemms.find((g) => g.tm >= T) ?? this.gemms.at(-1);
    if (gemm && T > 1) gemm.pipeline ??= this.compile(gemm.tm);
    const [tm, pipeline] = T === 1 || !gemm?.pipeline ? [1, this.gemv] : [gemm.tm, gemm.pipeline];
    const perGroup = Math.ceil(N / matmulRowsPerWorkgroup(tm, this.variant.v));
    const [gx, gy] = grid(perGroup, this.ctx.limits.maxComputeWorkgroupsPerDimension);
    const slots = Math.min(this.w.experts, T * k);
    pass.setPipeline(pipeline);
    this.w.parts.forEach((part, i) => {
      const slot = this.params[i]!;
      slot.write({
        M: T,
        N,
        K,
        x_off: 0,
        n_off: 0,
        n_rows: N,
        eps: 0,
        lanes: this.variant.v.lanes,
        e0: part.e0,
        experts: part.experts,
        stride: (this.w.gated ? 2 : 1) * N * K,
        groups: this.layout.groups,
        members: this.layout.members,
        gather: gather ? 1 : 0,
      });
      const buffers = [slot.buffer, part.data, x, y];
      if (part.scales) buffers.push(part.scales);
      if (this.table) buffers.push(this.table);
      buffers.push(table);
      pass.setBindGroup(0, this.binds.get(pipeline, buffers));
      this.ctx.counter.dispatch(pass, gx, gy, slots);
    });
  }

  destroy(): void {
    for (const slot of this.params) slot.destroy();
  }
}

/**
 * Reference of {@link ExpertMatmul}: for every group of `table` (routeTableRef's layout for
 * `shape`), the matmulRef of its expert's matrix `w[e]` [N, K] (gated: gatedMatmulRef of `w[e]` as
 * the gate and `gated.up[e]` with `gated.activation`) over its rows of x (T token rows when
 * `gather`, else the T · topK sorted rows), at its sorted positions of y [T · topK, N]; with the
 * magnitude each output's tolerance scales by.
 */
export function expertMatmulRef(
  shape: RouteShape,
  table: Uint32Array,
  x: Float32Array,
  T: number,
  gather: boolean,
  w: readonly QuantizedMatrix[],
  gated?: { readonly up: readonly QuantizedMatrix[]; readonly activation: GateActivation },
): { y: Float32Array; magnitude: Float32Array } {
  const L = routeTableLayout(shape);
  const { rows: N, cols: K } = w[0]!;
  const y = new Float32Array(T * shape.topK * N);
  const magnitude = new Float32Array(y.length);
  for (let g = 0; g < table[0]!; g++) {
    const at = L.groups + 4 * g;
    const [e, first, count] = [table[at]!, table[at + 1]!, table[at + 2]!];
    const xs = new Float32Array(count * K);
    for (let i = 0; i < count; i++) {
      const row = gather ? table[L.members + first + i]! : first + i;
      xs.set(x.subarray(row * K, (row + 1) * K), i * K);
    }
    const r = gated
      ? gatedMatmulRef(w[e]!, gated.up[e]!, xs, count, gated.activation)
      : matmulRef(w[e]!, xs, count);
    y.set(r.y, first * N);
    magnitude.set(r.magnitude, first * N);
  }
  return { y, magnitude };
}
