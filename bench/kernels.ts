// Kernel benchmark: GEMV/GEMM time per weight format, effective bandwidth of the weight bytes, and
// the bandwidth of a plain copy measured in the same run. Engine code only (no DOM, no node:), so a
// page (bench/kernels-page.ts) or a test can call it.

import { createBuffer, uploadBuffer } from '../src/gpu/buffers.js';
import type { GpuContext } from '../src/gpu/device.js';
import { GpuTimer } from '../src/gpu/timing.js';
import { defineUniforms } from '../src/gpu/uniforms.js';
import { renderWgsl } from '../src/gpu/wgsl.js';
import { SplitAttention, visWords } from '../src/kernels/attention/attention-split.js';
import { BindGroupCache, UniformSlot } from '../src/kernels/bind.js';
import { grid } from '../src/kernels/dispatch.js';
import { AddInPlace } from '../src/kernels/elementwise/elementwise.js';
import { type KvFormat, KvWrite, kvWordsPerSlot, packHalves } from '../src/kernels/kv/kv.js';
import { Matmul, prepareMatmul } from '../src/kernels/matmul/matmul.js';
import { type GpuMatrix, uploadGatedPair, uploadMatrix } from '../src/kernels/matmul/matrix.js';
import { RmsNorm } from '../src/kernels/norm/rmsnorm.js';
import { QkvRope, type QkvRopeOptions } from '../src/kernels/rope/qkv-rope.js';
import { Rope } from '../src/kernels/rope/rope.js';
import { isW8A8Format, MatmulW8A8, prepareW8A8, QuantizeAct } from '../src/kernels/w8a8/w8a8.js';
import {
  bitsPerWeight,
  dataWords,
  f32ToF16Bits,
  isIntFormat,
  type QuantizedMatrix,
  scaleWords,
  type WeightFormat,
} from '../src/quant/formats.js';
import { Attention } from './attention.js';
// The copy kernel measures bandwidth only here, so it lives in bench/ and does not ship.
import copyBw from './copy_bw.wgsl?raw';

/** One measured kernel × shape. */
export interface BenchRow {
  /** `matmul` (f32 activations) or `w8a8` (int8 activations; quantiser included in the time). */
  kernel: 'matmul' | 'w8a8';
  format: WeightFormat;
  M: number;
  N: number;
  K: number;
  /** Weight bytes read per call (packed data + scales). */
  bytes: number;
  /** Bits per weight of the format at this shape (bytes · 8 / (N · K)). */
  bits: number;
  medianMs: number;
  /** bytes / median time. */
  gbps: number;
  /** Copy kernel bandwidth (bytes read + written per second) in the same run. */
  copyGbps: number;
  /** gbps / copyGbps. */
  ratio: number;
  timing: 'timestamp' | 'wall';
  reps: number;
  /** Why a row was not measured (e.g. a buffer over the binding limit). */
  skipped?: string;
}

/** Options of {@link runKernelBench}. */
export interface KernelBenchOptions {
  /** Fewer repetitions and a smaller copy buffer. */
  quick?: boolean;
  /** [N, K] weight shapes; default decode GEMVs 2048×2048 and Llama down_proj 4096×11008. */
  shapes?: [number, number][];
  /** Batch sizes; default [1] (GEMV). */
  batches?: number[];
  formats?: WeightFormat[];
  /** Progress lines (the page forwards them to the console). */
  log?: (line: string) => void;
}

const CopyParams = defineUniforms('Params', { n: 'u32' });

/**
 * Runs the benchmark: the copy kernel first, then for each shape, batch and format a Matmul (and a
 * W8A8 row for int8/int4/int2 weights). Weights are synthetic packed data of the right size (values
 * do not change the speed). Times are medians of GPU timestamps when the device has them, else of
 * wall time around submit + onSubmittedWorkDone.
 */
export async function runKernelBench(ctx: GpuContext, opts: KernelBenchOptions = {}): Promise<BenchRow[]> {
  const log = opts.log ?? (() => {});
  const reps = opts.quick ? 3 : 10;
  const shapes = opts.shapes ?? [
    [2048, 2048],
    [4096, 11008],
  ];
  const batches = opts.batches ?? [1];
  const formats = opts.formats ?? ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];
  const timer = new GpuTimer(ctx, reps + 1);
  const binds = new BindGroupCache(ctx.device);
  const copyGbps = await benchCopy(ctx, binds, timer, reps, opts.quick ? 16 << 20 : 64 << 20);
  log(`copy: ${copyGbps.toFixed(2)} GB/s`);
  const rows: BenchRow[] = [];
  for (const [N, K] of shapes)
    for (const M of batches)
      for (const format of formats) {
        const kernels: BenchRow['kernel'][] = [
          'matmul',
          ...(isW8A8Format(format) ? (['w8a8'] as const) : []),
        ];
        for (const kernel of kernels) {
          const row = await benchMatmul(ctx, binds, timer, { kernel, format, M, N, K, reps, copyGbps });
          log(
            `${kernel} ${format} (${row.bits.toFixed(3)} bits/weight) M=${M} ${N}x${K}: ${row.skipped ?? `${row.medianMs.toFixed(3)} ms, ${row.gbps.toFixed(2)} GB/s (${(row.ratio * 100).toFixed(0)}% of copy)`}`,
          );
          rows.push(row);
        }
      }
  timer.destroy();
  return rows;
}

/** Median time in ms of `reps` submissions of one pass recorded by `record` (after one warm-up). */
async function timePass(
  ctx: GpuContext,
  timer: GpuTimer,
  reps: number,
  record: (pass: GPUComputePassEncoder) => void,
): Promise<number> {
  const once = async (timed: boolean) => {
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass(timed ? timer.passDescriptor('bench') : {});
    record(pass);
    pass.end();
    const t0 = performance.now();
    ctx.device.queue.submit([enc.finish()]);
    await ctx.device.queue.onSubmittedWorkDone();
    return performance.now() - t0;
  };
  await once(false);
  const wall: number[] = [];
  for (let i = 0; i < reps; i++) wall.push(await once(timer.enabled));
  const gpu = (await timer.read()).map((r) => r.ns / 1e6);
  return median(gpu.length === reps ? gpu : wall);
}

/**
 * Median ms of each of a pair of recordings, timed alternately (A, B, A, B, ...) after one
 * warm-up each, so a change in the machine's load during the run falls on both alike. `timer`
 * must hold 2 · reps passes.
 */
async function timeAlternating(
  ctx: GpuContext,
  timer: GpuTimer,
  reps: number,
  pair: [(pass: GPUComputePassEncoder) => void, (pass: GPUComputePassEncoder) => void],
): Promise<[number, number]> {
  const [a, b] = (await timeInterleaved(ctx, timer, reps, pair)).map((ms) => median(ms));
  return [a!, b!];
}

/**
 * The `reps` times in ms of each recording, timed in rounds (each recording once per round, after
 * one warm-up each), so a change in the machine's load falls on all alike. `timer` must hold
 * records.length · reps passes.
 */
async function timeInterleaved(
  ctx: GpuContext,
  timer: GpuTimer,
  reps: number,
  records: readonly ((pass: GPUComputePassEncoder) => void)[],
): Promise<number[][]> {
  const once = async (i: number, timed: boolean) => {
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass(timed ? timer.passDescriptor(String(i)) : {});
    records[i]!(pass);
    pass.end();
    const t0 = performance.now();
    ctx.device.queue.submit([enc.finish()]);
    await ctx.device.queue.onSubmittedWorkDone();
    return performance.now() - t0;
  };
  for (let i = 0; i < records.length; i++) await once(i, false);
  const wall: number[][] = records.map(() => []);
  for (let r = 0; r < reps; r++)
    for (let i = 0; i < records.length; i++) wall[i]!.push(await once(i, timer.enabled));
  const gpu = await timer.read();
  return records.map((_, i) => {
    const ms = gpu.filter((g) => g.label === String(i)).map((g) => g.ns / 1e6);
    return ms.length === reps ? ms : wall[i]!;
  });
}

function median(v: number[]): number {
  const s = [...v].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

async function benchCopy(
  ctx: GpuContext,
  binds: BindGroupCache,
  timer: GpuTimer,
  reps: number,
  bytes: number,
): Promise<number> {
  const size = Math.min(bytes, ctx.limits.maxStorageBufferBindingSize);
  const n = Math.floor(size / 16);
  const pipeline = await ctx.pipelines.prepare('copy_bw', 'vec4', () => ({
    code: renderWgsl(copyBw, { PARAMS: CopyParams.wgsl }),
  }));
  const src = createBuffer(ctx, n * 16, 'bench-copy-src');
  const dst = createBuffer(ctx, n * 16, 'bench-copy-dst');
  const params = new UniformSlot(ctx, CopyParams, 'bench-copy-params');
  params.write({ n });
  const ms = await timePass(ctx, timer, reps, (pass) => {
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, binds.get(pipeline, [params.buffer, src, dst]));
    pass.dispatchWorkgroups(...grid(Math.ceil(n / 256), ctx.limits.maxComputeWorkgroupsPerDimension));
  });
  src.destroy();
  dst.destroy();
  params.destroy();
  return (2 * n * 16) / (ms * 1e6);
}

async function benchMatmul(
  ctx: GpuContext,
  binds: BindGroupCache,
  timer: GpuTimer,
  o: {
    kernel: BenchRow['kernel'];
    format: WeightFormat;
    M: number;
    N: number;
    K: number;
    reps: number;
    copyGbps: number;
  },
): Promise<BenchRow> {
  const { kernel, format, M, N, K, reps, copyGbps } = o;
  const q = syntheticMatrix(format, N, K);
  const base = {
    kernel,
    format,
    M,
    N,
    K,
    copyGbps,
    reps,
    bits: bitsPerWeight(format, N, K),
    timing: timer.enabled ? 'timestamp' : 'wall',
  } as const;
  let w: ReturnType<typeof uploadMatrix>;
  try {
    w = uploadMatrix(ctx, q, `bench-${format}`);
  } catch (e) {
    const skipped = e instanceof Error ? e.message : String(e);
    return { ...base, bytes: 0, medianMs: 0, gbps: 0, ratio: 0, skipped };
  }
  const x = uploadBuffer(ctx, syntheticF32(M * K, 7), 'bench-x');
  const y = createBuffer(ctx, M * N * 4, 'bench-y');
  let ms: number;
  if (kernel === 'matmul') {
    await prepareMatmul(ctx, format, { rows: N, cols: K }, M);
    const mm = new Matmul(ctx, binds, w, { maxM: M });
    ms = await timePass(ctx, timer, reps, (pass) => mm.encode(pass, x, y, M));
    mm.destroy();
  } else {
    await prepareW8A8(ctx, format, M);
    const quant = new QuantizeAct(ctx, binds, K);
    const mm = new MatmulW8A8(ctx, binds, w, { maxM: M });
    const xq = createBuffer(ctx, M * K, 'bench-xq');
    const sx = createBuffer(ctx, M * 4, 'bench-sx');
    ms = await timePass(ctx, timer, reps, (pass) => {
      quant.encode(pass, x, xq, sx, M);
      mm.encode(pass, xq, sx, y, M);
    });
    quant.destroy();
    mm.destroy();
    xq.destroy();
    sx.destroy();
  }
  const bytes = w.bytes;
  w.destroy();
  x.destroy();
  y.destroy();
  const gbps = bytes / (ms * 1e6);
  return { ...base, bytes, medianMs: ms, gbps, ratio: gbps / copyGbps };
}

/** One point of {@link runBatchCurve}: a Matmul over M rows against the same matrix at M = 1. */
export interface BatchCurveRow {
  /** `NxK`, or `2x{I}x{K} gated` (gate·up with the SiLU epilogue). */
  shape: string;
  format: WeightFormat;
  M: number;
  /** Fastest and median of the timed passes. */
  minMs: number;
  medianMs: number;
  /** minMs / (min ms at M = 1), both from this run. */
  vsGemv: number;
  timing: 'timestamp' | 'wall';
}

/**
 * The cost of a batch against a GEMV, per matrix: one Matmul (maxM 64) per shape, every M timed
 * in the same rounds (M = 1, 2, ..., 64, then again), so the ratios to M = 1 hold whatever the
 * machine's speed; the ratio is of the fastest passes, the least disturbed by other processes on
 * a shared CPU. Default shapes: the bundled demo target's (models/kjv-target: q|k|v 768x256,
 * gate·up 2x688x256, down 256x688, LM head 4096x256) and 2048x2048; f16 weights (the demo's).
 */
export async function runBatchCurve(
  ctx: GpuContext,
  opts: { quick?: boolean; formats?: WeightFormat[]; batches?: number[]; log?: (line: string) => void } = {},
): Promise<BatchCurveRow[]> {
  const log = opts.log ?? (() => {});
  const reps = opts.quick ? 5 : 10;
  const batches = opts.batches ?? [1, 2, 4, 8, 17, 33, 64];
  const shapes: [number, number, boolean][] = [
    [768, 256, false],
    [688, 256, true],
    [256, 688, false],
    [4096, 256, false],
    [2048, 2048, false],
  ];
  const timer = new GpuTimer(ctx, batches.length * reps + 1);
  const binds = new BindGroupCache(ctx.device);
  const rows: BatchCurveRow[] = [];
  for (const format of opts.formats ?? (['f16'] as const))
    for (const [N, K, gated] of shapes) {
      const shape = gated ? `2x${N}x${K} gated` : `${N}x${K}`;
      const epilogue = gated ? 'silu' : 'store';
      const maxM = Math.max(...batches);
      const w = gated
        ? uploadGatedPair(ctx, syntheticMatrix(format, N, K), syntheticMatrix(format, N, K), 'bench-gu')
        : uploadMatrix(ctx, syntheticMatrix(format, N, K), 'bench-w');
      await prepareMatmul(ctx, format, { rows: N, cols: K }, maxM, { epilogue });
      const mm = new Matmul(ctx, binds, w, { maxM, epilogue });
      const x = uploadBuffer(ctx, syntheticF32(maxM * K, 7), 'bench-x');
      const y = createBuffer(ctx, maxM * N * 4, 'bench-y');
      const times = await timeInterleaved(
        ctx,
        timer,
        reps,
        batches.map((M) => (pass: GPUComputePassEncoder) => mm.encode(pass, x, y, M)),
      );
      const gemvMs = Math.min(...times[0]!);
      batches.forEach((M, i) => {
        const minMs = Math.min(...times[i]!);
        const row: BatchCurveRow = {
          shape,
          format,
          M,
          minMs,
          medianMs: median(times[i]!),
          vsGemv: minMs / gemvMs,
          timing: timer.enabled ? 'timestamp' : 'wall',
        };
        log(
          `batch ${format} ${shape} M=${M}: ${minMs.toFixed(3)} ms, ${row.vsGemv.toFixed(2)}x M=${batches[0]}`,
        );
        rows.push(row);
      });
      mm.destroy();
      for (const b of [x, y]) b.destroy();
      w.destroy();
    }
  timer.destroy();
  return rows;
}

/**
 * Packed weights of the right size with arbitrary codes (any words are valid codes, the lattice
 * formats' included); scales of integer formats are f16 0.01 (and, for int4/int2, sub-scales and
 * sub-mins of arbitrary bits; the other formats' sub-scale fields read 0x211f's bits), so values
 * stay finite and small.
 */
function syntheticMatrix(format: WeightFormat, rows: number, cols: number): QuantizedMatrix {
  const data = new Uint32Array(dataWords(format, rows * cols));
  let s = 0x12345678;
  const next = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  };
  if (format === 'f32') data.set(new Uint32Array(syntheticF32(data.length, 3).buffer));
  else if (format === 'f16')
    for (let i = 0; i < data.length; i++) {
      const r = next();
      data[i] =
        (f32ToF16Bits(((r & 0xffff) / 65536) * 2 - 1) |
          (f32ToF16Bits(((r >>> 16) / 65536) * 2 - 1) << 16)) >>>
        0;
    }
  else for (let i = 0; i < data.length; i++) data[i] = next();
  if (!isIntFormat(format)) return { format, rows, cols, data };
  const scales = new Uint32Array(scaleWords(format, rows * cols));
  const half = f32ToF16Bits(0.01);
  const words = format === 'int4' ? 4 : format === 'int2' ? 5 : 1;
  for (let i = 0; i < scales.length; i++)
    scales[i] = i % words === words - 1 ? (half | (half << 16)) >>> 0 : next();
  return { format, rows, cols, data, scales };
}

function syntheticF32(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

/** One measured attention pass: the split kernel against the one-workgroup-per-(row, head) kernel. */
export interface AttentionBenchRow {
  /** Keys each query sees (decode at slot context - 1). */
  context: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  format: KvFormat;
  /** Median ms of `Attention` (attention.wgsl). */
  unsplitMs: number;
  /** Median ms of `SplitAttention` (attention_split.wgsl, plus attention_merge.wgsl past one chunk). */
  splitMs: number;
  /** unsplitMs / splitMs. */
  speedup: number;
  /** Dispatches of the split pass (1 within one chunk, else 2). */
  splitDispatches: number;
  timing: 'timestamp' | 'wall';
}

/**
 * Decode attention (T = 1) at each context, split against unsplit, both timed in this run on the
 * same cache contents: the shape of Llama 3.2 1B (32 heads, 8 KV heads, headDim 64) by default.
 */
export async function runAttentionBench(
  ctx: GpuContext,
  opts: { quick?: boolean; contexts?: number[]; formats?: KvFormat[]; log?: (line: string) => void } = {},
): Promise<AttentionBenchRow[]> {
  const log = opts.log ?? (() => {});
  const reps = opts.quick ? 3 : 10;
  const [heads, kvHeads, headDim] = [32, 8, 64];
  const timer = new GpuTimer(ctx, 2 * reps);
  const binds = new BindGroupCache(ctx.device);
  const rows: AttentionBenchRow[] = [];
  for (const format of opts.formats ?? (['f32', 'f16'] as const))
    for (const context of opts.contexts ?? [512, 4096]) {
      const shape = { heads, kvHeads, headDim, capacity: context, format };
      const words = kvWordsPerSlot(shape) * context;
      const kc = uploadBuffer(ctx, syntheticCache(format, words, 5), 'bench-kc');
      const vc = uploadBuffer(ctx, syntheticCache(format, words, 6), 'bench-vc');
      const q = uploadBuffer(ctx, syntheticF32(heads * headDim, 7), 'bench-q');
      const out = createBuffer(ctx, heads * headDim * 4, 'bench-attn-out');
      const ends = uploadBuffer(ctx, new Uint32Array([0]), 'bench-ends');
      const vis = uploadBuffer(ctx, visWords([0]), 'bench-vis');
      const base = context - 1;
      const slots = uploadBuffer(ctx, new Uint32Array([base]), 'bench-slots');
      await Attention.prepare(ctx, format);
      await SplitAttention.prepare(ctx, shape);
      const unsplit = new Attention(ctx, binds, shape);
      const split = new SplitAttention(ctx, binds, { ...shape, maxRows: 1 });
      const [unsplitMs, splitMs] = await timeAlternating(ctx, timer, reps, [
        (pass) => unsplit.encode(pass, q, kc, vc, ends, out, 1, base),
        (pass) => split.encode(pass, q, kc, vc, vis, slots, slots, out, 1, base),
      ]);
      const row: AttentionBenchRow = {
        context,
        heads,
        kvHeads,
        headDim,
        format,
        unsplitMs,
        splitMs,
        speedup: unsplitMs / splitMs,
        splitDispatches: SplitAttention.dispatches(base, 1),
        timing: timer.enabled ? 'timestamp' : 'wall',
      };
      log(
        `attention ${format} decode at ${context} keys (${heads}/${kvHeads} heads, headDim ${headDim}): unsplit ${unsplitMs.toFixed(3)} ms, split ${splitMs.toFixed(3)} ms (${row.splitDispatches} dispatches), ${row.speedup.toFixed(2)}x`,
      );
      rows.push(row);
      unsplit.destroy();
      split.destroy();
      for (const b of [kc, vc, q, out, ends, vis, slots]) b.destroy();
    }
  timer.destroy();
  return rows;
}

/** Cache words of small values: f32 as is, or two halves per word for an f16 cache. */
function syntheticCache(format: KvFormat, words: number, seed: number): Uint32Array {
  const f = syntheticF32(format === 'f16' ? 2 * words : words, seed);
  return format === 'f16' ? packHalves(f) : new Uint32Array(f.buffer);
}

/** One measured q|k|v post-processing pass: {@link QkvRope} against the kernels it replaces. */
export interface QkvBenchRow {
  /** Which family's switches: 'qwen2' (bias), 'qwen3' (QK-norm). */
  family: 'qwen2' | 'qwen3';
  T: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Median ms of bias adds / QK-norms, Rope and KvWrite in sequence. */
  unfusedMs: number;
  unfusedDispatches: number;
  /** Median ms of the one QkvRope dispatch. */
  fusedMs: number;
  /** unfusedMs / fusedMs. */
  speedup: number;
  timing: 'timestamp' | 'wall';
}

/**
 * The fused q|k|v → RoPE → KV-write kernel against the sequence it replaces, timed in this run:
 * Qwen2-0.5B's shape with its bias (14 heads, 2 KV heads, headDim 64) and Qwen3-0.6B's with
 * QK-norm (16 heads, 8 KV heads, headDim 128), at decode (T = 1) and a 64-row prefill chunk.
 */
export async function runQkvBench(
  ctx: GpuContext,
  opts: { quick?: boolean; log?: (line: string) => void } = {},
): Promise<QkvBenchRow[]> {
  const log = opts.log ?? (() => {});
  const reps = opts.quick ? 3 : 10;
  const timer = new GpuTimer(ctx, 2 * reps);
  const binds = new BindGroupCache(ctx.device);
  const rows: QkvBenchRow[] = [];
  const families = [
    ['qwen2', 14, 2, 64],
    ['qwen3', 16, 8, 128],
  ] as const;
  for (const [family, heads, kvHeads, headDim] of families)
    for (const T of [1, 64]) {
      const capacity = 4096;
      const o: QkvRopeOptions = {
        heads,
        kvHeads,
        headDim,
        theta: 1e6,
        layout: 'half',
        capacity,
        bias: family === 'qwen2',
        ...(family === 'qwen3' ? { qkNormEps: 1e-6 } : {}),
      };
      const [qW, kvW] = [heads * headDim, kvHeads * headDim];
      const W = qW + 2 * kvW;
      const f = (n: number, seed: number, label: string) => uploadBuffer(ctx, syntheticF32(n, seed), label);
      const qkv = f(T * W, 1, 'bench-qkv');
      const [q, k, v] = [f(T * qW, 2, 'bench-q'), f(T * kvW, 3, 'bench-k'), f(T * kvW, 4, 'bench-v')];
      const [qn, kn] = [
        createBuffer(ctx, T * qW * 4, 'bench-qn'),
        createBuffer(ctx, T * kvW * 4, 'bench-kn'),
      ];
      const bias = f(W, 5, 'bench-bias');
      const [qBias, kvBias] = [f(T * qW, 6, 'bench-qbias'), f(T * kvW, 7, 'bench-kvbias')];
      const [qNorm, kNorm] = [f(headDim, 8, 'bench-qnorm'), f(headDim, 9, 'bench-knorm')];
      const positions = uploadBuffer(
        ctx,
        Uint32Array.from({ length: T }, (_, i) => 1000 + i),
        'bench-pos',
      );
      const cache = {
        k: createBuffer(ctx, capacity * kvW * 4, 'bench-kc'),
        v: createBuffer(ctx, capacity * kvW * 4, 'bench-vc'),
      };
      await Promise.all([
        QkvRope.prepare(ctx, o),
        Rope.prepare(ctx, 'half'),
        RmsNorm.prepare(ctx),
        AddInPlace.prepare(ctx),
        KvWrite.prepare(ctx),
      ]);
      const fused = new QkvRope(ctx, binds, o);
      const rope = new Rope(ctx, binds, o);
      const write = new KvWrite(ctx, binds, o);
      const adds = [new AddInPlace(ctx, binds), new AddInPlace(ctx, binds), new AddInPlace(ctx, binds)];
      const norms = [
        new RmsNorm(ctx, binds, { n: headDim, eps: 1e-6 }),
        new RmsNorm(ctx, binds, { n: headDim, eps: 1e-6 }),
      ];
      const weights = o.bias ? { bias } : { qNorm, kNorm };
      const unfused = (pass: GPUComputePassEncoder) => {
        if (o.bias) {
          adds[0]!.encode(pass, qBias, q, T * qW);
          adds[1]!.encode(pass, kvBias, k, T * kvW);
          adds[2]!.encode(pass, kvBias, v, T * kvW);
          rope.encode(pass, q, k, positions, T);
          write.encode(pass, k, v, positions, cache, T);
        } else {
          norms[0]!.encode(pass, q, qNorm, qn, T * heads);
          norms[1]!.encode(pass, k, kNorm, kn, T * kvHeads);
          rope.encode(pass, qn, kn, positions, T);
          write.encode(pass, kn, v, positions, cache, T);
        }
      };
      const before = ctx.counter.dispatches;
      const [unfusedMs, fusedMs] = await timeAlternating(ctx, timer, reps, [
        unfused,
        (pass) => fused.encode(pass, qkv, positions, positions, qn, cache, T, weights),
      ]);
      const unfusedDispatches = (ctx.counter.dispatches - before) / (reps + 1) - 1; // the fused pass is 1
      const row: QkvBenchRow = {
        family,
        T,
        heads,
        kvHeads,
        headDim,
        unfusedMs,
        unfusedDispatches,
        fusedMs,
        speedup: unfusedMs / fusedMs,
        timing: timer.enabled ? 'timestamp' : 'wall',
      };
      log(
        `qkv ${family} T=${T} (${heads}/${kvHeads} heads, headDim ${headDim}): unfused ${unfusedMs.toFixed(3)} ms (${unfusedDispatches} dispatches), fused ${fusedMs.toFixed(3)} ms, ${row.speedup.toFixed(2)}x`,
      );
      rows.push(row);
      for (const x of [fused, rope, write, ...adds, ...norms]) x.destroy();
      for (const b of [qkv, q, k, v, qn, kn, bias, qBias, kvBias, qNorm, kNorm, positions, cache.k, cache.v])
        b.destroy();
    }
  timer.destroy();
  return rows;
}

// --- GEMV bandwidth at decode (bench/gpu-run.sh) ---

/** One GEMV (M = 1) of one weight format and shape, timed over many calls per pass. */
export interface GemvBandwidthRow {
  format: WeightFormat;
  N: number;
  K: number;
  /** Weight bytes one call reads (packed data + scales). */
  bytes: number;
  bits: number;
  /** Weight copies the calls rotate through, so that their bytes exceed the GPU's caches. */
  copies: number;
  /** Calls per timed pass (rounds over the copies). */
  calls: number;
  /** Median time of one call: a pass's time / calls. */
  usPerCall: number;
  /** bytes / usPerCall. */
  gbps: number;
  /** Copy bandwidth in the same run, timed the same way. */
  copyGbps: number;
  /** gbps / copyGbps. */
  ratio: number;
  timing: 'timestamp' | 'wall';
  skipped?: string;
}

/**
 * The formats {@link runGemvBandwidthBench} times by default: weft's own, then the GGUF block
 * formats a file's matrices are placed in as stored, from 6.56 down to 2.06 bits per weight (which
 * of the i-quants could be weft formats too depends on these rows: issue 40).
 */
export const GEMV_FORMATS: readonly WeightFormat[] = [
  'f32',
  'f16',
  'int8',
  'q4_0',
  'int4',
  'int2',
  'q6_k',
  'q5_k',
  'iq4_nl',
  'iq4_xs',
  'q3_k',
  'iq3_s',
  'iq3_xxs',
  'iq2_s',
  'iq2_xs',
  'iq2_xxs',
];

/** Options of {@link runGemvBandwidthBench}. */
export interface GemvBandwidthOptions {
  /** [N, K] shapes; default Llama-3.2-1B's decode GEMVs (q/o, gate/up, down, LM head). */
  shapes?: [number, number][];
  formats?: WeightFormat[];
  /** Weight bytes read per timed pass: enough that GPU time dominates timer resolution. */
  passBytes?: number;
  /** Least bytes of weight copies rotated through, more than the last-level cache holds. */
  spreadBytes?: number;
  /** Timed passes per row (median), after one warm-up. */
  reps?: number;
  log?: (line: string) => void;
}

/**
 * Effective bandwidth of the decode GEMV per weight format against a plain copy, both timed in
 * this run the same way: each timed pass repeats the kernel until it has read `passBytes`, rotating
 * through enough weight copies that they exceed `spreadBytes` (a matrix that stays in L2 would be
 * timed at cache, not memory, speed). Times are GPU timestamps where the device has them.
 */
export async function runGemvBandwidthBench(
  ctx: GpuContext,
  opts: GemvBandwidthOptions = {},
): Promise<GemvBandwidthRow[]> {
  const log = opts.log ?? (() => {});
  const reps = opts.reps ?? 5;
  const passBytes = opts.passBytes ?? 4 * 2 ** 30;
  const spreadBytes = opts.spreadBytes ?? 256 * 2 ** 20;
  const shapes = opts.shapes ?? [
    [2048, 2048],
    [8192, 2048],
    [2048, 8192],
    [128256, 2048],
  ];
  const formats = opts.formats ?? [...GEMV_FORMATS];
  const timer = new GpuTimer(ctx, reps);
  const binds = new BindGroupCache(ctx.device);
  const copyGbps = await repeatedCopyGbps(ctx, binds, timer, reps, spreadBytes, passBytes);
  log(`gemv: copy ${copyGbps.toFixed(1)} GB/s (${spreadBytes} B buffer, ${passBytes} B per pass)`);
  const rows: GemvBandwidthRow[] = [];
  for (const [N, K] of shapes)
    for (const format of formats) {
      const row = await gemvBandwidth(ctx, binds, timer, { format, N, K, reps, passBytes, spreadBytes });
      const done = { ...row, copyGbps, ratio: row.gbps / copyGbps };
      log(
        `gemv ${format} ${N}x${K}: ${done.skipped ?? `${done.usPerCall.toFixed(2)} us/call, ${done.gbps.toFixed(1)} GB/s, ${(100 * done.ratio).toFixed(0)}% of copy (${done.copies} copies, ${done.calls} calls/pass)`}`,
      );
      rows.push(done);
    }
  timer.destroy();
  return rows;
}

/** Copy bandwidth (bytes read + written per second) of `bytes` copied until `passBytes` moved per pass. */
async function repeatedCopyGbps(
  ctx: GpuContext,
  binds: BindGroupCache,
  timer: GpuTimer,
  reps: number,
  bytes: number,
  passBytes: number,
): Promise<number> {
  const n = Math.floor(Math.min(bytes, ctx.limits.maxStorageBufferBindingSize) / 16);
  const rounds = Math.max(1, Math.ceil(passBytes / (2 * n * 16)));
  const pipeline = await ctx.pipelines.prepare('copy_bw', 'vec4', () => ({
    code: renderWgsl(copyBw, { PARAMS: CopyParams.wgsl }),
  }));
  const src = createBuffer(ctx, n * 16, 'gemv-copy-src');
  const dst = createBuffer(ctx, n * 16, 'gemv-copy-dst');
  const params = new UniformSlot(ctx, CopyParams, 'gemv-copy-params');
  params.write({ n });
  const ms = await timePass(ctx, timer, reps, (pass) => {
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, binds.get(pipeline, [params.buffer, src, dst]));
    for (let r = 0; r < rounds; r++)
      pass.dispatchWorkgroups(...grid(Math.ceil(n / 256), ctx.limits.maxComputeWorkgroupsPerDimension));
  });
  for (const b of [src, dst]) b.destroy();
  params.destroy();
  return (rounds * 2 * n * 16) / (ms * 1e6);
}

/** One row of {@link runGemvBandwidthBench}, without the copy ratio. */
async function gemvBandwidth(
  ctx: GpuContext,
  binds: BindGroupCache,
  timer: GpuTimer,
  o: { format: WeightFormat; N: number; K: number; reps: number; passBytes: number; spreadBytes: number },
): Promise<Omit<GemvBandwidthRow, 'copyGbps' | 'ratio'>> {
  const { format, N, K, reps } = o;
  const q = syntheticMatrix(format, N, K);
  const base = {
    format,
    N,
    K,
    bits: bitsPerWeight(format, N, K),
    timing: timer.enabled ? 'timestamp' : 'wall',
  } as const;
  const weights: GpuMatrix[] = [];
  const free = () => {
    for (const w of weights) w.destroy();
  };
  try {
    weights.push(uploadMatrix(ctx, q, `gemv-${format}-0`));
    const bytes = weights[0]!.bytes;
    const copies = Math.max(1, Math.ceil(o.spreadBytes / bytes));
    while (weights.length < copies) weights.push(uploadMatrix(ctx, q, `gemv-${format}-${weights.length}`));
  } catch (e) {
    free();
    const skipped = e instanceof Error ? e.message : String(e);
    return { ...base, bytes: 0, copies: 0, calls: 0, usPerCall: 0, gbps: 0, skipped };
  }
  const bytes = weights[0]!.bytes;
  const rounds = Math.max(1, Math.ceil(o.passBytes / (bytes * weights.length)));
  const calls = rounds * weights.length;
  await prepareMatmul(ctx, format, { rows: N, cols: K }, 1);
  const x = uploadBuffer(ctx, syntheticF32(K, 7), 'gemv-x'); // [1, K]
  const y = createBuffer(ctx, N * 4, 'gemv-y'); // [1, N]
  const mms = weights.map((w) => new Matmul(ctx, binds, w, { maxM: 1 }));
  const ms = await timePass(ctx, timer, reps, (pass) => {
    for (let r = 0; r < rounds; r++) for (const mm of mms) mm.encode(pass, x, y, 1);
  });
  for (const mm of mms) mm.destroy();
  free();
  x.destroy();
  y.destroy();
  const usPerCall = (1000 * ms) / calls;
  return { ...base, bytes, copies: weights.length, calls, usPerCall, gbps: bytes / (usPerCall * 1e3) };
}
