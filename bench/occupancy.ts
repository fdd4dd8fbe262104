// bench:occupancy: how much of a GPU's memory bandwidth each dispatch of a decode step can use,
// predicted from its launch shape by Little's law, for real model shapes, without a GPU and without
// weights. The runner is built for the model on a recording device (bench/record-gpu.ts: its
// buffers are allocated, never filled) and one greedy decode step is encoded, so the rows are the
// runner's real dispatches: their kernels, variants, grids and uniforms.
//
// The model. Streaming memory at bandwidth BW with latency L keeps BW · L bytes in flight (Little's
// law), so a kernel whose threads have F bytes requested at once streams at most F / L:
//   predicted fraction of bandwidth = min(1, F / (BW · L)),
//   F = min(threads launched, threads resident) · bytes each thread requests per trip,
// where a trip is what a thread loads before it first waits on a load (for the split-K matmul: one
// UT units of codes and grid words per weight row, see matmul_split_k.wgsl), and the bytes a thread
// requests per trip count each weight byte once (the matrix's bytes / threads / trips: the grid
// words several lanes share come from cache). A matrix can never have more than its own bytes in
// flight, so one smaller than 0.8 · BW · L cannot reach 80% by any launch shape: `bound` is that
// limit, the fraction with the whole matrix requested at once.
//
// The devices (bandwidth from the vendors' specifications; latency: loaded DRAM latency, taken as
// 750 / 700 / 700 ns: pointer-chasing measurements of recent GPUs (Chips and Cheese's memory-
// latency articles on the H100, Ada and Apple GPUs) give 500-700 ns idle, and queues at full
// bandwidth add to them; resident threads: the most threads the cores hold at once):
//   Apple M3 Max (40-core GPU): 400 GB/s; BW · L = 0.30 MB; 40 cores × 1024 threads (Apple documents
//     no per-core limit; 1024 is the largest threadgroup, a conservative one resident per core).
//   NVIDIA RTX 4090: 1008 GB/s; BW · L = 0.71 MB; 128 SMs × 1536 threads (Ada, compute capability 8.9).
//   NVIDIA H100 SXM5: 3350 GB/s; BW · L = 2.35 MB; 132 SMs × 2048 threads (Hopper, 9.0).
// Registers can lower residency below these; the split-K GEMV keeps ≤ 64 B of codes and 64 B of grid
// words per weight row per trip in registers, and launches at most N · 64 threads.

import type { KvFormat } from '../src/kernels/kv/kv.js';
import {
  blocksPerUnit,
  GEMM_COLUMNS,
  GEMM_ROWS,
  splitLanes,
  unitsPerTrip,
  wideLoads,
} from '../src/kernels/matmul/plan.js';
import { MatmulParams } from '../src/kernels/matmul/variant.js';
import { specFromConfig } from '../src/model/families/index.js';
import { createGpuRunner } from '../src/model/gpu/runner.js';
import { GREEDY } from '../src/model/runner.js';
import { weightShapes } from '../src/model/tensors.js';
import { packedBytes, type WeightFormat } from '../src/quant/formats.js';
import type { Quant } from '../src/quant/pack.js';
import { SCALE_MODELS, type ScaleShape } from '../test/fixtures/scale.js';
import { type RecordedBuffer, type RecordedDispatch, recordingGpu } from './record-gpu.js';

/** A GPU the model predicts for. */
export interface Device {
  readonly name: string;
  /** Bytes per second. */
  readonly bandwidth: number;
  /** Loaded DRAM latency, seconds. */
  readonly latency: number;
  /** Threads the device holds resident at once. */
  readonly residentThreads: number;
}

/** The three devices of the header. */
export const DEVICES: readonly Device[] = [
  { name: 'M3 Max', bandwidth: 400e9, latency: 750e-9, residentThreads: 40 * 1024 },
  { name: 'RTX 4090', bandwidth: 1008e9, latency: 700e-9, residentThreads: 128 * 1536 },
  { name: 'H100', bandwidth: 3350e9, latency: 700e-9, residentThreads: 132 * 2048 },
];

/**
 * f32 FMA throughput (FLOP/s, no tensor cores) of each device: NVIDIA's specifications (RTX 4090
 * 82.6 T, H100 SXM5 66.9 T); Apple publishes none for the M3 Max, so an estimate: 40 cores × 128
 * ALUs × 2 × 1.38 GHz = 14.1 T.
 */
export const F32_FLOPS: Readonly<Record<string, number>> = {
  'M3 Max': 14.1e12,
  'RTX 4090': 82.6e12,
  H100: 66.9e12,
};

/** Bytes a device must have in flight to stream at full bandwidth (Little's law). */
export function neededInFlight(d: Device): number {
  return d.bandwidth * d.latency;
}

/** One dispatch of a decode step, as the model sees it. */
export interface LaunchRow {
  /** What it computes: `q|k|v`, `o`, `gate|up`, `down`, `lm_head`, `attention`, `attention merge`, `sample` … */
  readonly name: string;
  /** `matmul` rows are the decode matmuls the GPU forms are held to (≥ 0.8 where `bound` allows). */
  readonly kind: 'matmul' | 'attention' | 'sample' | 'other';
  /** The pipeline, `kernel:variant`. */
  readonly pipeline: string;
  readonly workgroups: number;
  readonly threads: number;
  /** Bytes of weights (or KV cache, or logits) the dispatch reads from memory. */
  readonly bytes: number;
  /** Bytes each thread requests before its first wait (as issued, shared grid words included). */
  readonly requestBytes: number;
  /** Loads rounds per thread (trips). */
  readonly trips: number;
  /** Per device: bytes in flight, the predicted fraction of bandwidth, and the whole-matrix bound. */
  readonly devices: readonly { device: string; inFlight: number; predicted: number; bound: number }[];
}

/** A model × format's decode step. */
export interface OccupancyReport {
  readonly model: ScaleShape;
  readonly quant: Quant;
  /** Context length of the decode step (attention reads this many keys). */
  readonly context: number;
  /** The KV cache's format, and the bytes the step reads: weights, and cached K/V (every layer). */
  readonly kvFormat: KvFormat;
  readonly weightBytes: number;
  readonly attentionBytes: number;
  readonly dispatchesPerLayer: number;
  readonly dispatchesPerToken: number;
  /** Layer 0's dispatches and the per-token ones (embedding, LM head, sampler), in order. */
  readonly rows: LaunchRow[];
}

/** The variables of a pipeline key (`matmul:TM=1,R=1,F16,…`): `NAME=value`, or a flag as true. */
function keyVars(pipeline: string): Record<string, string | true> {
  const key = pipeline.slice(pipeline.indexOf(':') + 1);
  return Object.fromEntries(
    key.split(',').map((kv) => {
      const eq = kv.indexOf('=');
      return eq < 0 ? [kv, true] : [kv.slice(0, eq), kv.slice(eq + 1)];
    }),
  );
}

/** The u32 values of a recorded uniform buffer. */
function uniformU32(b: RecordedBuffer | undefined): Uint32Array {
  const bytes = b?.written ?? new Uint8Array(0);
  return new Uint32Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.byteLength / 4));
}

/** The name of the matrix a matmul dispatch reads, from its weight buffers' labels. */
function matrixName(buffers: readonly RecordedBuffer[]): string {
  const label = buffers.find((b) => /\.data$/.test(b.label))?.label ?? '';
  if (/qkv_proj/.test(label)) return 'q|k|v';
  if (/o_proj/.test(label)) return 'o';
  if (/gate_up_proj/.test(label)) return 'gate|up';
  if (/down_proj/.test(label)) return 'down';
  if (/lm_head|embed_tokens/.test(label)) return 'lm_head';
  return label;
}

/** Bytes of the grid words `scale_words` loads per unit (quant_scales.wgsl). */
function gridWordBytes(v: Record<string, string | true>): number {
  return v.INT4 ? 16 : v.INT2 ? 8 : v.INT8 || v.Q4_0 ? 4 : 0;
}

/** Bits per code of a matmul variant. */
function codeBits(v: Record<string, string | true>): number {
  return v.F32 ? 32 : v.F16 ? 16 : v.INT8 ? 8 : v.INT2 ? 2 : 4;
}

/** The prediction on each device for `threads` threads with `perTrip` unique bytes each at once. */
function predict(threads: number, perTrip: number, bytes: number): LaunchRow['devices'] {
  return DEVICES.map((d) => {
    const inFlight = Math.min(bytes, Math.min(threads, d.residentThreads) * perTrip);
    return {
      device: d.name,
      inFlight,
      predicted: Math.min(1, inFlight / neededInFlight(d)),
      bound: Math.min(1, bytes / neededInFlight(d)),
    };
  });
}

const product = (w: readonly number[]) => w.reduce((a, b) => a * b, 1);

/**
 * The split-K matmul's launch for one part of `rows` output rows whose K holds `units` units
 * (matmul_split_k.wgsl): `lanes` per output, `ut` units per trip; `bytes` of weights (codes and grid words).
 */
function splitKLaunch(bytes: number, rows: number, units: number, lanes: number, ut: number) {
  const perLane = Math.ceil(units / lanes);
  const trips = Math.ceil(perLane / ut);
  const threads = rows * lanes;
  return { threads, trips, perLane, devices: predict(threads, bytes / threads / trips, bytes) };
}

/**
 * The prediction for a GEMV over a `format` matrix [N, K] on the split-K form, as the runner would
 * launch it (its lanes, load width and trip): what bench/gpu-run.sh prints beside its measured
 * GEMV bandwidth.
 */
export function gemvPrediction(format: WeightFormat, N: number, K: number): LaunchRow['devices'] {
  const units = K / 16 / blocksPerUnit(format, K);
  return splitKLaunch(
    packedBytes(format, N, K),
    N,
    units,
    splitLanes(format, N, K),
    unitsPerTrip(format, 1, wideLoads(format, K)),
  ).devices;
}

/** The model's row for one recorded dispatch. */
function launchRows(d: RecordedDispatch, vocab: number): LaunchRow[] {
  const [kernel] = d.pipeline.split(':');
  const v = keyVars(d.pipeline);
  const workgroups = product(d.workgroups);
  const wgSize = Number(v.TPR ?? v.WG ?? 64);
  const base = { pipeline: d.pipeline, workgroups, threads: workgroups * wgSize };
  if (kernel === 'matmul' && !v.SERIAL) {
    const u = uniformU32(d.buffers[0]);
    const at = (name: string) => u[PARAM_FIELDS.indexOf(name)] ?? 0;
    const [K, rows, lanes] = [at('K'), at('n_rows'), at('lanes')];
    const wr = (v.GATED ? 2 : 1) * Number(v.R); // a gated pair streams gate and up rows
    const unitBlocks = Number(v.U);
    const ut = Number(v.UT);
    const bytes = d.buffers.filter((b) => /\.(data|scales)$/.test(b.label)).reduce((s, b) => s + b.size, 0);
    const launch = splitKLaunch(bytes, rows, K / 16 / unitBlocks, lanes, ut);
    const codeBytes = (unitBlocks * 16 * codeBits(v)) / 8;
    const requestBytes = wr * Math.min(ut, launch.perLane) * (codeBytes + gridWordBytes(v));
    return [
      {
        ...base,
        name: matrixName(d.buffers),
        kind: 'matmul',
        threads: launch.threads,
        bytes,
        requestBytes,
        trips: launch.trips,
        devices: launch.devices,
      },
    ];
  }
  if (kernel === 'attention_split' && !v.SERIAL) {
    // K and V of every key read once per (chunk, kv head). The scores: a thread's trip is one key
    // row (its dot products with the group's query heads wait on it), CH / WG keys per thread. The
    // weighted V: a thread's trip is VB vec4s of V rows (the accumulation waits on them), over keys
    // j ≡ part (mod S) of the chunk, S = WG / (D / 4) parts.
    const D = Number(v.D);
    // Bytes per element: f32, halves, or an integer head's codes plus its scale word (kv_quant.wgsl).
    const elt = v.KV_INT4 ? 0.5 + 4 / D : v.KV_INT ? 1 + 4 / D : v.KV_F16 ? 2 : 4;
    const cache = d.buffers.filter((b) => /_cache$/.test(b.label));
    const slots = cache[0] ? cache[0].size / (elt * D) : 0; // capacity · kvHeads
    const keys = Math.min(slots, d.workgroups[0] * Number(v.CH) * d.workgroups[1]);
    const half = keys * D * elt;
    const vb = Number(v.VB);
    const [kTrips, vTrips] = [Number(v.CH) / wgSize, Math.ceil(Number(v.CH) / (wgSize / (D / 4)) / vb)];
    const phase = (name: string, perThread: number, trips: number): LaunchRow => ({
      ...base,
      name,
      kind: 'attention',
      bytes: half,
      requestBytes: perThread,
      trips,
      devices: predict(base.threads, half / base.threads / trips, half),
    });
    return [phase('attention (K)', D * elt, kTrips), phase('attention (V)', vb * 4 * elt, vTrips)];
  }
  if ((kernel === 'topk' && v.CHUNK_PASS) || kernel === 'sample') {
    // One row of logits, a logit (4 bytes) per thread per trip.
    const bytes = 4 * vocab;
    const trips = Math.ceil(vocab / base.threads);
    const name = kernel === 'sample' ? 'sample' : 'sample (chunks)';
    return [
      {
        ...base,
        name,
        kind: 'sample',
        bytes,
        requestBytes: 4,
        trips,
        devices: predict(base.threads, 4, bytes),
      },
    ];
  }
  const name =
    kernel === 'attention_merge' ? 'attention merge' : kernel === 'topk' ? 'sample (merge)' : (kernel ?? '');
  return [{ ...base, name, kind: 'other', bytes: 0, requestBytes: 0, trips: 0, devices: [] }];
}

/** MatmulParams' fields in their uniform order. */
const PARAM_FIELDS = [...MatmulParams.wgsl.matchAll(/^\s+(\w+):/gm)].map((m) => m[1]!);

/**
 * Records one greedy decode step of `model` at `quant` with `context` keys before it on the GPU
 * forms (f16 KV cache, as a GPU gets by default), and models every dispatch.
 */
export async function occupancy(
  model: ScaleShape,
  quant: Quant,
  context: number,
  kvFormat: KvFormat = 'f16',
): Promise<OccupancyReport> {
  const spec = specFromConfig(SCALE_MODELS[model].config);
  // The checkpoint's names and shapes, as the loader checks them (never read: allocateOnly).
  const tensors = new Map([...weightShapes(spec)].map(([name, shape]) => [name, { shape: [...shape] }]));
  const { ctx, dispatches } = recordingGpu('gpu');
  const runner = await createGpuRunner(
    { spec, weights: { tensors, readF32: () => Promise.reject(new Error('no weights')) }, packed: undefined },
    { quant, capacity: context + 1, gpu: ctx, kvFormat, allocateOnly: true },
  );
  runner.resident.adopt(context);
  const step = runner.decode(0, GREEDY, 1);
  await step.next();
  step.close();
  // A layer's dispatches run from the first that binds one of its buffers to the next layer's first.
  const first = (i: number) =>
    dispatches.findIndex((d) => d.buffers.some((b) => b.label.startsWith(`model.layers.${i}.`)));
  const [start, next] = [first(0), first(1)];
  const perLayer = next - start;
  const tail = first(spec.layers - 1) + perLayer;
  const rows = [...dispatches.slice(0, next), ...dispatches.slice(tail)];
  const weightBytes = runner.weightBytesPerPass;
  const attentionBytes = runner.attentionBytes(context);
  runner.dispose();
  return {
    model,
    quant,
    context,
    kvFormat,
    weightBytes,
    attentionBytes,
    dispatchesPerLayer: perLayer,
    dispatchesPerToken: dispatches.length - perLayer * spec.layers,
    rows: rows.flatMap((d) => launchRows(d, spec.vocabSize)),
  };
}

/** The shapes and formats `npm run bench:occupancy` covers, and the context of its decode step. */
export const OCCUPANCY_MODELS: readonly ScaleShape[] = ['llama-3.2-1b', 'qwen3-0.6b'];
export const OCCUPANCY_QUANTS: readonly Quant[] = ['f16', 'int8', 'int4', 'int2'];
export const OCCUPANCY_CONTEXT = 4096;

/** Every report of `npm run bench:occupancy`, and whether each decode matmul reaches `target`. */
export interface OccupancySummary {
  readonly devices: readonly (Device & { neededInFlight: number })[];
  readonly target: number;
  readonly reports: OccupancyReport[];
  /** Decode matmuls predicted below `target` on some device: where the matrix allows it (`bound` ≥ target), and where it cannot. */
  readonly below: {
    model: string;
    quant: string;
    name: string;
    device: string;
    predicted: number;
    bound: number;
  }[];
}

/** Runs {@link occupancy} for every model and format. */
export async function occupancySummary(
  models: readonly ScaleShape[] = OCCUPANCY_MODELS,
  quants: readonly Quant[] = OCCUPANCY_QUANTS,
  context = OCCUPANCY_CONTEXT,
  target = 0.8,
): Promise<OccupancySummary> {
  const reports: OccupancyReport[] = [];
  for (const model of models)
    for (const quant of quants) reports.push(await occupancy(model, quant, context));
  const below = reports.flatMap((r) =>
    r.rows
      .filter((row) => row.kind === 'matmul')
      .flatMap((row) =>
        row.devices
          .filter((d) => d.predicted < target)
          .map((d) => ({
            model: r.model,
            quant: r.quant,
            name: row.name,
            device: d.device,
            predicted: d.predicted,
            bound: d.bound,
          })),
      ),
  );
  return {
    devices: DEVICES.map((d) => ({ ...d, neededInFlight: neededInFlight(d) })),
    target,
    reports,
    below,
  };
}

const mb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;
const pct = (f: number) => `${Math.round(f * 100)}%`;

/** The summary as markdown: a table per model × format, then the rows below target. */
export function occupancyTable(s: OccupancySummary): string {
  const lines: string[] = [
    `Bytes in flight needed (bandwidth × latency): ${s.devices.map((d) => `${d.name} ${mb(d.neededInFlight)}`).join(', ')}.`,
    '',
  ];
  for (const r of s.reports) {
    lines.push(
      `### ${r.model} ${r.quant}: decode at ${r.context} keys, ${r.dispatchesPerLayer} dispatches per layer + ${r.dispatchesPerToken} per token`,
      '',
      `| dispatch | workgroups | threads | bytes read | B/thread before a wait | trips | ${s.devices.map((d) => `${d.name} in flight / predicted (bound)`).join(' | ')} |`,
      `|---|---|---|---|---|---|${s.devices.map(() => '---').join('|')}|`,
    );
    for (const row of r.rows) {
      if (row.kind === 'other') continue;
      const cells = row.devices.map((d) => `${mb(d.inFlight)} / ${pct(d.predicted)} (${pct(d.bound)})`);
      lines.push(
        `| ${row.name} | ${row.workgroups} | ${row.threads} | ${mb(row.bytes)} | ${row.requestBytes} | ${row.trips} | ${cells.join(' | ')} |`,
      );
    }
    lines.push('');
  }
  const matmuls = s.reports.flatMap((r) => r.rows.filter((row) => row.kind === 'matmul'));
  const cells = matmuls.length * s.devices.length;
  const possible = s.below.filter((b) => b.bound >= s.target);
  lines.push(
    `Decode matmuls predicted ≥ ${pct(s.target)}: ${cells - s.below.length} of ${cells} (matmul × device); below it: ${possible.length} where the matrix allows it, ${s.below.length - possible.length} whose whole matrix is less than ${pct(s.target)} of bandwidth × latency.`,
  );
  for (const b of s.below)
    lines.push(
      `- ${b.model} ${b.quant} ${b.name} on ${b.device}: ${pct(b.predicted)} (bound ${pct(b.bound)})`,
    );
  return lines.join('\n');
}

/** One model × KV format × context: what attention reads in a decode step and its predicted share. */
export interface AttentionRow {
  readonly model: ScaleShape;
  readonly kvFormat: KvFormat;
  readonly context: number;
  /** Bytes of cached K/V attention reads for the token (every layer), and of weights. */
  readonly attentionBytes: number;
  readonly weightBytes: number;
  /** attentionBytes over all the step reads. */
  readonly share: number;
  /** Per device: the attention kernel's predicted fraction of bandwidth (its K and V phases' mean). */
  readonly predicted: { device: string; predicted: number }[];
}

/** The KV formats and contexts of the attention table (issue 58). */
export const ATTENTION_FORMATS: readonly KvFormat[] = ['f16', 'int8', 'int4'];
export const ATTENTION_CONTEXTS: readonly number[] = [4096, 32768];

/** Attention's bytes and predicted bandwidth share for every model × format × context, at int4 weights. */
export async function attentionSummary(
  models: readonly ScaleShape[] = OCCUPANCY_MODELS,
  formats: readonly KvFormat[] = ATTENTION_FORMATS,
  contexts: readonly number[] = ATTENTION_CONTEXTS,
): Promise<AttentionRow[]> {
  const rows: AttentionRow[] = [];
  for (const model of models)
    for (const context of contexts)
      for (const kvFormat of formats) {
        const r = await occupancy(model, 'int4', context, kvFormat);
        const phases = r.rows.filter((row) => row.kind === 'attention');
        rows.push({
          model,
          kvFormat,
          context,
          attentionBytes: r.attentionBytes,
          weightBytes: r.weightBytes,
          share: r.attentionBytes / (r.attentionBytes + r.weightBytes),
          predicted: DEVICES.map((d, i) => ({
            device: d.name,
            predicted: phases.reduce((s, p) => s + p.devices[i]!.predicted, 0) / Math.max(1, phases.length),
          })),
        });
      }
  return rows;
}

/** The attention rows as markdown. */
export function attentionTable(rows: readonly AttentionRow[]): string {
  return [
    `| model | context | KV cache | attention bytes / token | weight bytes (int4) | attention's share | ${DEVICES.map((d) => `${d.name} predicted`).join(' | ')} |`,
    `|---|---|---|---|---|---|${DEVICES.map(() => '---').join('|')}|`,
    ...rows.map(
      (r) =>
        `| ${r.model} | ${r.context} | ${r.kvFormat} | ${mb(r.attentionBytes)} | ${mb(r.weightBytes)} | ${pct(r.share)} | ${r.predicted.map((p) => pct(p.predicted)).join(' | ')} |`,
    ),
  ].join('\n');
}

/** Columns of K the prefill GEMM stages per step (matmul_gemm.wgsl's BK, ungated). */
const GEMM_STEP = 32;

/** The prefill GEMM's arithmetic intensity on one shape, and where it is compute-bound. */
export interface GemmIntensityRow {
  quant: WeightFormat;
  M: number;
  N: number;
  K: number;
  /**
   * FLOP per byte a workgroup's tile (GEMM_ROWS x GEMM_COLUMNS outputs) fetches per K step: its x
   * (f32) and its weights (packed, scales included), each counted once per tile, as if no other
   * workgroup's fetch were cached (the lower bound).
   */
  tile: number;
  /** FLOP per byte of the whole product, x, W and y each moved once (perfect cache reuse: the upper bound). */
  matrix: number;
  /** Per device: its balance (f32 FLOP/s ÷ bandwidth) and whether each bound reaches it. */
  devices: { device: string; balance: number; tileBound: boolean; matrixBound: boolean }[];
}

/**
 * The prefill GEMM's arithmetic intensity for `quants` on [N, K] matrices at each M: per tile and
 * for the whole product, against each device's FLOP-per-byte balance. Compute-bound where the
 * intensity reaches the balance; the tile's figure is what a device needs from L2 (whose bandwidth
 * is several times DRAM's), the product's what it needs from DRAM.
 */
export function prefillGemmIntensity(
  quants: readonly WeightFormat[] = ['f16', 'int8', 'int4', 'int2'],
  shapes: readonly [number, number][] = [
    [2048, 2048],
    [8192, 2048],
  ],
  ms: readonly number[] = [256, 512],
): GemmIntensityRow[] {
  const tileFlops = 2 * GEMM_ROWS * GEMM_COLUMNS * GEMM_STEP;
  return quants.flatMap((quant) => {
    const tileBytes = GEMM_ROWS * GEMM_STEP * 4 + packedBytes(quant, GEMM_COLUMNS, 256) * (GEMM_STEP / 256);
    const tile = tileFlops / tileBytes;
    return shapes.flatMap(([N, K]) =>
      ms.map((M) => {
        const matrix = (2 * M * N * K) / (packedBytes(quant, N, K) + 4 * M * K + 4 * M * N);
        return {
          quant,
          M,
          N,
          K,
          tile,
          matrix,
          devices: DEVICES.map((d) => {
            const balance = F32_FLOPS[d.name]! / d.bandwidth;
            return { device: d.name, balance, tileBound: tile >= balance, matrixBound: matrix >= balance };
          }),
        };
      }),
    );
  });
}

/** {@link prefillGemmIntensity} as markdown. */
export function gemmIntensityTable(rows: readonly GemmIntensityRow[]): string {
  const devices = rows[0]?.devices ?? [];
  const lines = [
    `### Prefill GEMM (tile ${GEMM_ROWS} x ${GEMM_COLUMNS}, ${GEMM_STEP} columns of K per step): FLOP per byte against each device's f32 balance (${devices.map((d) => `${d.device} ${d.balance.toFixed(1)}`).join(', ')})`,
    '',
    `| format | M | N×K | per tile | whole product | ${devices.map((d) => `${d.device}: tile / product`).join(' | ')} |`,
    `|---|---|---|---|---|${devices.map(() => '---').join('|')}|`,
  ];
  const bound = (b: boolean) => (b ? 'compute' : 'memory');
  for (const r of rows)
    lines.push(
      `| ${r.quant} | ${r.M} | ${r.N}×${r.K} | ${r.tile.toFixed(1)} | ${r.matrix.toFixed(0)} | ${r.devices.map((d) => `${bound(d.tileBound)} / ${bound(d.matrixBound)}`).join(' | ')} |`,
    );
  return lines.join('\n');
}
