// The model sections of bench/gpu-run.sh (engine code only: no DOM, no node:): plain greedy decode
// with the GPU-resident loop per weight format on a random-weight checkpoint of Llama-3.2-1B's shape,
// with what each token asks of the device, and the verify-cost curve of the f16 target.
import { urlModelFiles } from '../src/formats/io/files.js';
import { countsSince } from '../src/gpu/counters.js';
import type { GpuContext } from '../src/gpu/device.js';
import { GpuTimer } from '../src/gpu/timing.js';
import { MAX_FORWARD_TOKENS } from '../src/model/blocks/gpu.js';
import { profilePasses, profileSections, type SectionTime } from '../src/model/gpu/profile.js';
import { createGpuRunner, type GpuRunner } from '../src/model/gpu/runner.js';
import { openModel } from '../src/model/load.js';
import { GREEDY } from '../src/model/runner.js';
import type { Quant } from '../src/quant/pack.js';
import { type VerifyCost, verifyCostCurve } from './spec.js';

/** Plain greedy decode of one weight format. */
export interface DecodeRow {
  quant: Quant;
  /** Time to place the weights (read, convert, upload) and build the kernels. */
  loadMs: number;
  /** Tokens timed (after the prompt and a warm-up session). */
  tokens: number;
  ms: number;
  tokS: number;
  /** Device work per generated token, from the device's counters over the timed session. */
  dispatchesPerToken: number;
  writesPerToken: number;
  readbacksPerToken: number;
  submitsPerToken: number;
  /** Weight bytes one forward reads ({@link GpuRunner.weightBytesPerPass}). */
  weightBytesPerPass: number;
  /** weightBytesPerPass · tok/s: the weight bandwidth decode reaches. */
  gbps: number;
  /**
   * GPU time of one decode step per section (ns per token, summed over layers), from timestamp
   * queries around each section of {@link PROFILE_STEPS} profiled steps; empty without timestamps.
   */
  profile: SectionTime[];
}

/** Decode steps a format's profile averages. */
const PROFILE_STEPS = 8;

/** Options of {@link runDecodeBench}. */
export interface DecodeBenchOptions {
  /** URL of the checkpoint folder (with a trailing slash). */
  model: string;
  quants: Quant[];
  /** Prompt ids, prefilled once per format. */
  prompt: number[];
  /** Tokens of the timed decode session. */
  tokens: number;
  /** Passes per verify-cost point (after one warm-up); the curve runs on the f16 runner. */
  verifyReps: number;
  log?: (line: string) => void;
}

/**
 * For each format: places the model, prefills the prompt, runs a 4-step warm-up session (pipelines
 * and caches hot), then times a session of `tokens` greedy steps (the GPU-resident loop: each step
 * runs the id the step before sampled, and the runner queues a step ahead) with the device's
 * counters around it. At f16 it then measures the verify-cost curve on the same runner.
 */
export async function runDecodeBench(
  ctx: GpuContext,
  o: DecodeBenchOptions,
): Promise<{ decode: DecodeRow[]; verifyCost: VerifyCost[] }> {
  const log = o.log ?? (() => {});
  const decode: DecodeRow[] = [];
  let verifyCost: VerifyCost[] = [];
  const capacity = Math.max(o.prompt.length + o.tokens + 8, 16 + 64); // the curve: a 16-token prefix + 64
  // Opened once (config, tokenizer, tensor index); each format reads and packs the weights anew.
  const opened = await openModel(urlModelFiles(o.model));
  for (const quant of o.quants) {
    const t0 = performance.now();
    const runner = await createGpuRunner(opened, { quant, capacity, gpu: ctx });
    const loadMs = performance.now() - t0;
    try {
      const row = await timeDecode(runner, o.prompt, o.tokens);
      const profile = await profileDecode(ctx, runner, o.prompt, PROFILE_STEPS);
      decode.push({ quant, loadMs, ...row, profile });
      log(
        `decode ${quant}: ${row.tokS.toFixed(2)} tok/s over ${row.tokens} tokens, ${row.dispatchesPerToken.toFixed(1)} dispatches, ${row.writesPerToken.toFixed(2)} writes, ${row.readbacksPerToken.toFixed(2)} readbacks per token; weights ${(row.weightBytesPerPass / 1e6).toFixed(1)} MB/pass, ${row.gbps.toFixed(1)} GB/s (load ${(loadMs / 1000).toFixed(1)} s)`,
      );
      if (profile.length > 0) log(`decode ${quant} GPU time per token: ${formatProfile(profile)}`);
      if (quant === 'f16') verifyCost = await verifyCostCurve(runner, { reps: o.verifyReps, log });
    } finally {
      runner.dispose();
    }
  }
  return { decode, verifyCost };
}

/** One format's timed session (see {@link runDecodeBench}). */
async function timeDecode(runner: GpuRunner, prompt: number[], tokens: number) {
  const first = (await runner.forward({ tokens: prompt }, GREEDY, 'last'))[0]!; // sampled after the prompt
  runner.commit(prompt.map((_, i) => i));
  const session = async (steps: number) => {
    const s = runner.decode(first, GREEDY, steps);
    try {
      for (let i = 0; i < steps; i++) await s.next();
    } finally {
      s.close();
    }
    runner.trim(prompt.length);
  };
  await session(4);
  const before = runner.deviceCounts();
  const t0 = performance.now();
  await session(tokens);
  const ms = performance.now() - t0;
  const c = countsSince(runner.deviceCounts(), before);
  const tokS = tokens / (ms / 1000);
  return {
    tokens,
    ms,
    tokS,
    dispatchesPerToken: c.dispatches / tokens,
    writesPerToken: c.writes / tokens,
    readbacksPerToken: c.readbacks / tokens,
    submitsPerToken: c.submits / tokens,
    weightBytesPerPass: runner.weightBytesPerPass,
    gbps: (runner.weightBytesPerPass * tokS) / 1e9,
  };
}

/**
 * Where a decode step's GPU time goes: `steps` single-token forwards after the prompt, each split
 * into timed sections ({@link GpuRunner.profiler}); ns per token per section. The prompt's own
 * forward is not counted. Leaves the runner with the prompt committed.
 */
export async function profileDecode(
  ctx: GpuContext,
  runner: GpuRunner,
  prompt: number[],
  steps: number,
): Promise<SectionTime[]> {
  if (!ctx.features.timestamps) return [];
  const timer = new GpuTimer(ctx, profilePasses(runner.spec.layers));
  const passes: { label: string; ns: number }[] = [];
  runner.trim(0);
  runner.profiler = timer;
  try {
    let next = (await runner.forward({ tokens: prompt }, GREEDY, 'last'))[0]!;
    runner.commit(prompt.map((_, i) => i));
    await timer.read(); // the prompt's sections: not a decode step
    for (let i = 0; i < steps; i++) {
      next = (await runner.forward({ tokens: [next] }, GREEDY, 'last'))[0]!;
      runner.commit([0]);
      passes.push(...(await timer.read()));
    }
  } finally {
    runner.profiler = undefined;
    timer.destroy();
    runner.trim(prompt.length);
  }
  return profileSections(passes).map((t) => ({ ...t, ns: t.ns / steps }));
}

/** "qkv 1.23 ms (12%), attention ..." */
export function formatProfile(profile: readonly SectionTime[]): string {
  return profile
    .map((t) => `${t.section} ${(t.ns / 1e6).toFixed(3)} ms (${(100 * t.share).toFixed(0)}%)`)
    .join(', ');
}

/** One model and format of {@link runFamilyBench}. */
export interface FamilyRow {
  /** The shape's name (e.g. qwen3-0.6b). */
  model: string;
  quant: Quant;
  /**
   * Layers by kind: attention, linear (Gated DeltaNet) and short convolutions (LFM2); 0 for a
   * transformer's.
   */
  attentionLayers: number;
  linearLayers: number;
  shortConvLayers: number;
  /** A mixture's layers with experts (0 for a dense model). */
  mixtureLayers: number;
  /**
   * Prompt tokens prefilled (in forwards of up to MAX_FORWARD_TOKENS, as the engine prefills), and
   * the time to the first sampled id.
   */
  prefillTokens: number;
  prefillMs: number;
  prefillTokS: number;
  /** The timed decode session (GPU-resident loop), as {@link DecodeRow}. */
  tokens: number;
  tokS: number;
  dispatchesPerToken: number;
  writesPerToken: number;
  readbacksPerToken: number;
  weightBytesPerPass: number;
  /**
   * A paged mixture (see FamilyBenchOptions.models): its expert budget, the cache's hit rate over
   * the timed decode steps and the expert bytes loaded from CPU memory per token.
   */
  expertBudget?: number;
  expertCacheHitRate?: number;
  expertBytesLoadedPerToken?: number;
  /**
   * A mixture's experts read per mixture layer per timed decode pass (the routing table's tally,
   * `GpuRunner.expertTally`: `experts_per_pass` of the engine's stats); absent for a dense model.
   */
  expertsPerPass?: number;
}

/** Options of {@link runFamilyBench}. */
export interface FamilyBenchOptions {
  /**
   * Checkpoint folder URLs (trailing slash) by shape name, measured in this order; `expertBudget`
   * pages a mixture's experts under that many bytes of GPU memory (decoded from the host).
   */
  models: { name: string; url: string; expertBudget?: number }[];
  quants: Quant[];
  /** Prompt length: ids spread over the vocabulary, the same for every model. */
  promptTokens: number;
  /** Tokens of the timed decode session. */
  tokens: number;
  log?: (line: string) => void;
}

/**
 * Prefill and decode of each model at each format, in one run, so that families compare on one
 * device (Qwen3.5's hybrid against Qwen3's transformer, the rows issue 38 asks for). Every timed
 * pass starts from an empty cache (a recurrent model's state rolls back only to 0): a warm-up
 * prefill and 4-step session, then a timed prefill of the prompt (in chunks of MAX_FORWARD_TOKENS,
 * each committed, to its sampled id) and a session of 1 + `tokens` greedy steps, the last `tokens`
 * timed with the device's counters around them.
 */
export async function runFamilyBench(ctx: GpuContext, o: FamilyBenchOptions): Promise<FamilyRow[]> {
  const log = o.log ?? (() => {});
  const rows: FamilyRow[] = [];
  for (const { name, url, expertBudget } of o.models) {
    const opened = await openModel(urlModelFiles(url));
    const spec = opened.spec;
    const prompt = Array.from({ length: o.promptTokens }, (_, i) => (7919 * i + 13) % spec.vocabSize);
    const linearLayers = spec.layerKinds?.filter((k) => k === 'deltanet').length ?? 0;
    const shortConvLayers = spec.layerKinds?.filter((k) => k === 'shortconv').length ?? 0;
    const mixtureLayers = spec.moe?.layers.filter((l) => l).length ?? 0;
    for (const quant of o.quants) {
      const runner = await createGpuRunner(opened, {
        quant,
        capacity: o.promptTokens + o.tokens + 8,
        gpu: ctx,
        ...(expertBudget === undefined ? {} : { expertBudget }),
      });
      try {
        const pass = async (steps: number) => {
          runner.trim(0);
          const t0 = performance.now();
          // In chunks of the runner's widest forward, as the engine prefills (CachedPrefix).
          let first = 0;
          for (let at = 0; at < prompt.length; at += MAX_FORWARD_TOKENS) {
            const part = prompt.slice(at, at + MAX_FORWARD_TOKENS);
            first = (await runner.forward({ tokens: part }, GREEDY, 'last'))[0]!;
            runner.commit(part.map((_, i) => i));
          }
          const prefillMs = performance.now() - t0;
          // Timed from the session's first token on: the step after a prefill rewrites what the
          // prompt's pass changed (once per request, not per token). A paged mixture decodes from
          // the host, a forward and a commit per token.
          const s = runner.hostDriven ? hostSteps(runner, first) : runner.decode(first, GREEDY, steps + 1);
          try {
            await s.next();
            const tally = await runner.expertTally();
            const cache = runner.expertCache();
            const before = runner.deviceCounts();
            const t1 = performance.now();
            for (let i = 0; i < steps; i++) await s.next();
            const ms = performance.now() - t1;
            const counts = countsSince(runner.deviceCounts(), before);
            // Read after the timing: one more readback, outside the counts.
            const after = tally && (await runner.expertTally());
            const experts =
              tally && after && after.routings > tally.routings
                ? (after.experts - tally.experts) / (after.routings - tally.routings)
                : undefined;
            const cached = cache && runner.expertCache();
            const paging =
              cache && cached
                ? {
                    hitRate:
                      (cached.hits - cache.hits) / (cached.hits + cached.misses - cache.hits - cache.misses),
                    bytesLoaded: cached.bytesLoaded - cache.bytesLoaded,
                  }
                : undefined;
            return { prefillMs, ms, counts, experts, paging };
          } finally {
            s.close();
          }
        };
        await pass(4);
        const { prefillMs, ms, counts, experts, paging } = await pass(o.tokens);
        const row: FamilyRow = {
          model: name,
          quant,
          attentionLayers: spec.layers - linearLayers - shortConvLayers,
          linearLayers,
          shortConvLayers,
          mixtureLayers,
          prefillTokens: prompt.length,
          prefillMs,
          prefillTokS: prompt.length / (prefillMs / 1000),
          tokens: o.tokens,
          tokS: o.tokens / (ms / 1000),
          dispatchesPerToken: counts.dispatches / o.tokens,
          writesPerToken: counts.writes / o.tokens,
          readbacksPerToken: counts.readbacks / o.tokens,
          weightBytesPerPass: runner.weightBytesPerPass,
          ...(experts === undefined ? {} : { expertsPerPass: experts }),
          ...(paging && expertBudget !== undefined
            ? {
                expertBudget,
                expertCacheHitRate: paging.hitRate,
                expertBytesLoadedPerToken: paging.bytesLoaded / o.tokens,
              }
            : {}),
        };
        rows.push(row);
        log(
          `${name} ${quant}: prefill ${row.prefillTokS.toFixed(1)} tok/s (${prompt.length} tokens), decode ${row.tokS.toFixed(2)} tok/s, ${row.dispatchesPerToken.toFixed(1)} dispatches, ${row.writesPerToken.toFixed(2)} writes, ${row.readbacksPerToken.toFixed(2)} readbacks per token`,
        );
      } finally {
        runner.dispose();
      }
    }
  }
  return rows;
}

/** Decode steps of a runner driven from the host (a forward and a commit each), as a session's. */
function hostSteps(runner: GpuRunner, first: number): { next(): Promise<number>; close(): void } {
  let last = first;
  return {
    async next() {
      const id = last;
      last = (await runner.forward({ tokens: [id] }, GREEDY, 'last'))[0]!;
      runner.commit([0]);
      return id;
    },
    close() {},
  };
}
