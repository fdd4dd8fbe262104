// How a matmul's work maps onto dispatches (src/kernels/matmul/matmul.ts runs them): the serial
// form's threads and columns, the split-K form's lanes, units and load widths, and the GEMM tiles
// of both (matmul_serial.wgsl, matmul_split_k.wgsl), plus the W8A8 kernel's accumulator counts.
import {
  CODE_BITS,
  GEOMETRY,
  isIntFormat,
  latticeFormat,
  lowPlaneBits,
  type WeightFormat,
} from '../../quant/formats.js';

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

/**
 * The tile of the prefill GEMM (matmul_gemm.wgsl): {@link GEMM_THREADS} threads, a grid of 8 x 8,
 * each computing GEMM_THREAD_ROWS rows of x by 4 · GEMM_THREAD_QUADS output columns: a tile of
 * GEMM_ROWS x GEMM_COLUMNS outputs.
 */
export const GEMM_THREAD_ROWS = 4;
export const GEMM_THREAD_QUADS = 2;
export const GEMM_THREADS = 64;
export const GEMM_ROWS = 8 * GEMM_THREAD_ROWS;
export const GEMM_COLUMNS = 32 * GEMM_THREAD_QUADS;

/**
 * Fewest rows a prefill chunk has for {@link Matmul} to take the GEMM (below, the tile would be
 * mostly rows past M and the decode form's tiles serve as well).
 */
export const GEMM_MIN_ROWS = 16;

/** Output columns per row group (the WGSL constant R) of the split-K form: 1 in the GEMV, 2 in the tiles. */
export function columnsPerGroup(tm: number): number {
  return tm === 1 ? 1 : 2;
}

/** Threads per workgroup of the split-K form (its norm prologue sums as rmsnorm.wgsl's 64 threads do). */
export const SPLIT_K_THREADS = 64;

/**
 * Threads a split-K decode matmul (the GEMV) aims to launch: enough that every thread having one
 * trip's loads in flight (64 bytes of codes) keeps ~4 MB in flight, past what an H100 needs to
 * stream at full bandwidth (bandwidth × latency ≈ 2.3 MB; bench/occupancy.ts has the model).
 */
const GEMV_TARGET_THREADS = 65536;

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
export const WIDE_BLOCKS: Readonly<Record<number, number>> = { 2: 4, 3: 8, 4: 2, 5: 8, 6: 4 };

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
export function loadsPerUnit(format: WeightFormat, wide: boolean): number {
  if (format === 'f32') return 4;
  if (format === 'f16') return 2;
  return wide && planar(format) ? (WIDE_BLOCKS[CODE_BITS[format]]! * lowPlaneBits(format)) / 8 + 1 : 1;
}

/** Formats whose codes are stored in a low plane and a high plane (3-, 5- and 6-bit codes). */
export function planar(format: WeightFormat): boolean {
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
const GEMV_MAX_THREADS = 262144;

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
export function gridPerGroup(format: WeightFormat): boolean {
  return isIntFormat(format) && GEOMETRY[format].unit === 32;
}
