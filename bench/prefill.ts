// Prefill benchmark (npm run bench:prefill, bench/prefill-cli.mjs): the adapter's f32 FMA peak from
// a register-only microkernel, then the matmul's decode form of the context's kernel forms (what
// every prompt chunk ran before the prefill GEMM: its 2- to 8-row tiles over M rows) against the prefill GEMM (matmul_gemm.wgsl) on
// prompt-sized batches, each as a share of that peak. Timed by the wall clock around one submitted
// dispatch (best of `reps`, after a warm-up that also compiles). The peak is measured again before
// each format's rows and the best kept, as each row keeps its best time: on a shared machine both
// then approach what a quiet one gives, and the figures are only comparable within one run.
import { createBuffer, uploadBuffer } from '../src/gpu/buffers.js';
import { describeAdapter, type GpuContext } from '../src/gpu/device.js';
import { BindGroupCache } from '../src/kernels/bind.js';
import { loadPrefillGemm, Matmul } from '../src/kernels/matmul/matmul.js';
import { uploadMatrix } from '../src/kernels/matmul/matrix.js';
import { GEMM_MIN_ROWS } from '../src/kernels/matmul/plan.js';
import { MAX_FORWARD_TOKENS } from '../src/model/blocks/gpu.js';
import { quantize, type WeightFormat } from '../src/quant/formats.js';

/** One timed matmul: `form` decode (the batch-invariant tiles) or gemm (the prefill GEMM). */
export interface PrefillRow {
  format: WeightFormat;
  form: 'decode' | 'gemm';
  M: number;
  N: number;
  K: number;
  ms: number;
  /** Achieved FLOP/s, 2·M·N·K / time. */
  flops: number;
  /** flops / peak_flops. */
  of_peak: number;
}

export interface PrefillReport {
  adapter: string;
  kernels: 'gpu' | 'serial';
  /** f32 FLOP/s of the register-only FMA microkernel (the best of its runs). */
  peak_flops: number;
  /** Tokens per forward a prompt is prefilled in (the runner's limit). */
  chunk: number;
  rows: PrefillRow[];
}

export interface PrefillOptions {
  formats: WeightFormat[];
  /** Batches (rows of x). */
  ms: number[];
  /** [N, K] weight shapes. */
  shapes: [number, number][];
  reps: number;
  /** The forms to time (default both). */
  forms?: readonly ('decode' | 'gemm')[];
  log: (line: string) => void;
}

// The microkernel: each thread runs ITERS trips of 8 independent vec4 FMAs, in registers only.
const PEAK_ITERS = 4096;
const PEAK_THREADS = 64;
const PEAK_WGSL = `
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@compute @workgroup_size(${PEAK_THREADS})
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let s = f32(g.x) * 1e-9;
  var a0 = vec4<f32>(s); var a1 = a0 + 1.0; var a2 = a0 + 2.0; var a3 = a0 + 3.0;
  var a4 = a0 + 4.0; var a5 = a0 + 5.0; var a6 = a0 + 6.0; var a7 = a0 + 7.0;
  let m = vec4<f32>(0.99999);
  let c = vec4<f32>(1e-7);
  for (var i = 0u; i < ${PEAK_ITERS}u; i++) {
    a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
    a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
  }
  out[g.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}`;

/** Best wall-clock ms of `reps` submissions of `encode` (one warm-up first). */
async function time(
  ctx: GpuContext,
  reps: number,
  encode: (pass: GPUComputePassEncoder) => void,
): Promise<number> {
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r <= reps; r++) {
    const enc = ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    encode(pass);
    pass.end();
    const t0 = performance.now();
    ctx.device.queue.submit([enc.finish()]);
    await ctx.device.queue.onSubmittedWorkDone();
    if (r > 0) best = Math.min(best, performance.now() - t0);
  }
  return best;
}

/** f32 FLOP/s of the register-only FMA microkernel over `groups` workgroups. */
async function peakFlops(ctx: GpuContext, groups: number, reps: number): Promise<number> {
  const threads = groups * PEAK_THREADS;
  const out = createBuffer(ctx, threads * 16, 'peak-out');
  const module = ctx.device.createShaderModule({ code: PEAK_WGSL });
  const pipeline = ctx.device.createComputePipeline({
    layout: 'auto',
    compute: { module, entryPoint: 'main' },
  });
  const bind = ctx.device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: out } }],
  });
  const ms = await time(ctx, reps, (pass) => {
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(groups);
  });
  out.destroy();
  return (threads * PEAK_ITERS * 8 * 4 * 2) / (ms / 1000);
}

/** Deterministic weights in [-1, 1). */
function randomWeights(n: number, seed: number): Float32Array {
  const w = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    w[i] = s / 2 ** 31 - 1;
  }
  return w;
}

/** Runs the benchmark: the peak, then per format and shape the decode form and the GEMM at every M. */
export async function runPrefillBench(ctx: GpuContext, o: PrefillOptions): Promise<PrefillReport> {
  let peak = 0;
  const measurePeak = async () => {
    const now = await peakFlops(ctx, 256, o.reps);
    peak = Math.max(peak, now);
    o.log(`peak ${(now / 1e9).toFixed(2)} GFLOP/s (best so far ${(peak / 1e9).toFixed(2)})`);
  };
  await loadPrefillGemm();
  const rows: PrefillRow[] = [];
  const binds = new BindGroupCache(ctx.device);
  const maxM = Math.max(...o.ms);
  for (const [N, K] of o.shapes) {
    const weights = randomWeights(N * K, N + K);
    const x = uploadBuffer(ctx, randomWeights(maxM * K, 7), 'x'); // [maxM, K]
    const y = createBuffer(ctx, maxM * N * 4, 'y'); // [maxM, N]
    for (const format of o.formats) {
      await measurePeak();
      const w = uploadMatrix(ctx, quantize(weights, N, K, format), 'w');
      // The decode form, and the GEMM (taken by default in the GPU forms only: set here).
      const mm = new Matmul(ctx, binds, w, { maxM });
      const tiled = new Matmul(ctx, binds, w, { maxM, prefillGemm: true });
      for (const M of o.ms)
        for (const form of ['decode', 'gemm'] as const) {
          if ((form === 'gemm' && M < GEMM_MIN_ROWS) || !(o.forms ?? ['decode', 'gemm']).includes(form))
            continue;
          const ms = await time(ctx, o.reps, (pass) =>
            form === 'gemm' ? tiled.encode(pass, x, y, M, 0, true) : mm.encode(pass, x, y, M),
          );
          const flops = (2 * M * N * K) / (ms / 1000);
          rows.push({ format, form, M, N, K, ms, flops, of_peak: 0 });
          o.log(
            `${format} ${form} M=${M} N=${N} K=${K}: ${ms.toFixed(1)} ms, ${(flops / 1e9).toFixed(2)} GFLOP/s`,
          );
        }
      mm.destroy();
      tiled.destroy();
      w.destroy();
    }
    x.destroy();
    y.destroy();
  }
  await measurePeak();
  for (const r of rows) r.of_peak = r.flops / peak;
  return {
    adapter: describeAdapter(ctx.adapter),
    kernels: ctx.kernels,
    peak_flops: peak,
    chunk: MAX_FORWARD_TOKENS,
    rows,
  };
}
