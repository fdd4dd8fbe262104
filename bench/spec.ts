// Speculative decoding benchmark (engine code only: no DOM, no node:). On the demo pair, greedy and
// T = 1: tokens per target pass and wall-clock ratio against plain decoding in the same run, per
// drafter and budget, with what each decode step asked of the GPU (CPU round trips and bytes read
// back per step, dispatches per token) and the speed-up a bandwidth-bound GPU would give (see
// MODELLED_SPEEDUP); and the verify-cost curve (median time of one target pass over T tokens,
// after a warm-up, divided by T = 1's).
import { type CreateEngineOptions, createEngine } from '../src/engine/create.js';
import type { Engine } from '../src/engine/engine.js';
import type { Acceptance, DrafterKind } from '../src/engine/types.js';
import { urlModelFiles } from '../src/formats/io/files.js';
import type { GpuContext } from '../src/gpu/device.js';
import { createGpuRunner } from '../src/model/gpu/runner.js';
import { openModel } from '../src/model/load.js';
import type { ModelRunner, SamplerSpec } from '../src/model/runner.js';

/** How tokens are chosen in one part of the table. */
export interface SpecMode {
  /** 'greedy', 'T=1' (Gumbel coupling) or 'T=1 rejection' (the classic rule on chains). */
  name: string;
  temperature: number;
  acceptance: Acceptance;
}

/** One drafter configuration at one budget, in one mode. */
export interface SpecRow {
  mode: string;
  drafter: string;
  /**
   * Where a model drafter's step ran: 'device' (one submission per step, see DeviceSpeculator) or
   * 'host' (one draft pass and readback per depth, then the verify pass); '-' without a model.
   */
  loop: 'device' | 'host' | '-';
  budget: number;
  tokensPerPass: number;
  targetPasses: number;
  tokens: number;
  ms: number;
  /** Plain decoding's time for the same prompts, tokens and mode, divided by this row's. */
  speedup: number;
  /**
   * Per decode step (one target pass, its drafting included), over all prompts: buffers mapped for
   * reading (each a CPU round trip) and their bytes; dispatches per generated token. Absent on the
   * CPU reference.
   */
  readbacksPerStep?: number;
  readbackBytesPerStep?: number;
  dispatchesPerToken?: number;
  /** Draft-model forward passes per decode step (0 for n-gram drafting and plain decoding). */
  draftPassesPerStep: number;
  /**
   * Milliseconds per draft pass where the host times drafting (a host-loop step: draft_ms over the
   * draft passes, children ranking included); for plain rows, milliseconds per decode pass of the
   * target. Their ratio is a draft depth's cost in target passes.
   */
  msPerDraftPass?: number;
  msPerTargetPass?: number;
  /**
   * Weight bytes a decode step reads: draft passes × the draft's `weightBytesPerPass` + the
   * target's (one verify pass); and {@link MODELLED_SPEEDUP} from them. Absent on the CPU reference.
   */
  weightBytesPerStep?: number;
  modelledSpeedup?: number;
  /**
   * The generated ids equal plain decoding's (greedy, and T = 1 with Gumbel coupling, where they
   * must); null for the rejection rule, which is exact in distribution only.
   */
  lossless: boolean | null;
}

/** One point of the verify-cost curve. */
export interface VerifyCost {
  T: number;
  ms: number;
  ratio: number;
}

/** Options of {@link runSpecBench}. */
export interface SpecBenchOptions {
  target: string;
  draft: string;
  /** A draft head for the target (the head row); absent: no head row. */
  head?: string;
  prompts: string[];
  maxTokens: number;
  budgets: number[];
  modes: SpecMode[];
  /** Only these drafters (names as in the table: ngram, draft-model, self-int4, self-int2, head, head-cpu); all when absent. */
  drafters?: string[];
  /** Loops a model drafter's rows run in (default ['device']): add 'host' to compare. */
  loops?: ('device' | 'host')[];
  /** Forward passes timed per verify-cost point (after one warm-up pass). */
  verifyReps: number;
  /** 'cpu' runs the plain-TS reference: tokens per pass are the same, wall-clock ratios are not GPU figures. */
  device?: 'gpu' | 'cpu';
  log?: (line: string) => void;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * The speed-up a GPU bound by weight bandwidth would give, printed in the table's header: a decode
 * step costs the weight bytes it reads, a forward pass reading its model's weights once whatever
 * its number of tokens (a draft pass the draft's `weightBytesPerPass`, the verify pass the
 * target's), while plain decoding reads the target's once per token.
 */
export const MODELLED_SPEEDUP =
  'modelled x = tokens/pass x B_target / (draft passes/step x B_draft + B_target), B = weightBytesPerPass';

/** Bytes of a step by {@link MODELLED_SPEEDUP}, and the speed-up over plain decoding. */
function bandwidthModel(tokensPerPass: number, draftPasses: number, targetBytes: number, draftBytes: number) {
  const bytesPerStep = draftPasses * draftBytes + targetBytes;
  return { bytesPerStep, speedup: (tokensPerPass * targetBytes) / bytesPerStep };
}

async function timed(
  engine: Engine,
  prompts: string[],
  maxTokens: number,
  mode: SpecMode,
  drafter: DrafterKind,
  budget: number,
  decodeLoop: 'device' | 'host' = 'device',
) {
  const t0 = performance.now();
  const ids: number[][] = [];
  let passes = 0;
  let perPass = 0;
  // The GPU's work in decode steps, summed over the prompts (stays undefined off the GPU).
  let work:
    | { passes: number; tokens: number; readbacks: number; readbackBytes: number; dispatches: number }
    | undefined;
  let targetBytes: number | undefined;
  // Draft forwards over the requests: its catch-up on each prompt (in the first step) included.
  let draftPasses = 0;
  let draftBytes = 0;
  let steps = 0;
  let stepTokens = 0;
  let draftMs = 0;
  let deviceStepMs = 0;
  let decodeMs = 0;
  let decodePasses = 0;
  for (const [i, p] of prompts.entries()) {
    const out: number[] = [];
    const o = {
      maxTokens,
      drafter,
      treeBudget: budget,
      temperature: mode.temperature,
      acceptance: mode.acceptance,
      seed: i + 1,
      decodeLoop,
    };
    for await (const c of engine.generate(p, o)) out.push(...c.ids);
    ids.push(out);
    const stats = engine.lastStats!;
    passes += stats.target_passes;
    perPass += stats.tokens_per_pass;
    targetBytes = stats.weight_bytes_per_pass;
    draftPasses += stats.draft_passes ?? 0;
    draftMs += stats.draft_ms;
    deviceStepMs += stats.device_step_ms;
    if (stats.decode_tok_s > 0) {
      decodeMs += (1000 * stats.completion_tokens) / stats.decode_tok_s;
      decodePasses += stats.completion_tokens / stats.tokens_per_pass;
    }
    draftBytes = stats.draft_weight_bytes_per_pass ?? draftBytes;
    const d = stats.decode_counts;
    if (d) {
      work ??= { passes: 0, tokens: 0, readbacks: 0, readbackBytes: 0, dispatches: 0 };
      work.passes += d.passes;
      work.tokens += d.tokens;
      work.readbacks += d.readbacks;
      work.readbackBytes += d.readback_bytes;
      work.dispatches += d.dispatches;
    }
    steps += d?.passes ?? 0;
    stepTokens += d?.tokens ?? 0;
  }
  const per = (n: number, by: number) => (by > 0 ? n / by : 0);
  const draftPassesPerStep = per(draftPasses, steps);
  const gpu = work && {
    readbacksPerStep: per(work.readbacks, work.passes),
    readbackBytesPerStep: per(work.readbackBytes, work.passes),
    dispatchesPerToken: per(work.dispatches, work.tokens),
  };
  const model =
    targetBytes !== undefined && (draftPasses === 0 || draftBytes > 0) && steps > 0
      ? bandwidthModel(stepTokens / steps, draftPassesPerStep, targetBytes, draftBytes)
      : undefined;
  const modelled = model && { weightBytesPerStep: model.bytesPerStep, modelledSpeedup: model.speedup };
  return {
    ms: performance.now() - t0,
    ids,
    passes,
    tokensPerPass: perPass / prompts.length,
    gpu,
    draftPassesPerStep,
    modelled,
    /** Where the speculative steps ran: a drafter that cannot run a step on the device falls back to the host. */
    ranOn: deviceStepMs > 0 ? ('device' as const) : draftMs > 0 ? ('host' as const) : undefined,
    timing: {
      ...(draftMs > 0 && draftPasses > 0 ? { msPerDraftPass: draftMs / draftPasses } : {}),
      ...(decodePasses > 0 ? { msPerTargetPass: decodeMs / decodePasses } : {}),
    },
  };
}

/** Runs the drafter × budget table in every mode, then the verify-cost curve. */
export async function runSpecBench(
  ctx: GpuContext,
  o: SpecBenchOptions,
): Promise<{ rows: SpecRow[]; verifyCost: VerifyCost[] }> {
  const log = o.log ?? (() => {});
  const device = o.device ?? 'gpu';
  const base: CreateEngineOptions = { model: o.target, quant: 'f16', gpu: ctx, contextLength: 512, device };
  const all: { name: string; draft?: CreateEngineOptions['draft']; drafter: DrafterKind }[] = [
    { name: 'ngram', drafter: 'ngram' },
    { name: 'draft-model', draft: { model: o.draft, quant: 'f16' }, drafter: 'draft' },
    { name: 'self-int4', draft: { self: 'int4' }, drafter: 'draft' },
    { name: 'self-int2', draft: { self: 'int2' }, drafter: 'draft' },
    // The head on the GPU (device steps), and on the CPU (host-driven steps).
    ...(o.head
      ? [
          { name: 'head', draft: { head: o.head }, drafter: 'draft' as const },
          { name: 'head-cpu', draft: { head: o.head, on: 'cpu' as const }, drafter: 'draft' as const },
        ]
      : []),
  ];
  const configs = all.filter((c) => !o.drafters || o.drafters.includes(c.name));
  const loops = o.loops ?? ['device'];
  const plainEngine = await createEngine(base);
  const warm = o.prompts.slice(0, 1);
  // Plain decoding per mode (acceptance does not matter without drafts): the baseline rows.
  const plain = new Map<string, Awaited<ReturnType<typeof timed>>>();
  const rows: SpecRow[] = [];
  for (const mode of o.modes) {
    await timed(plainEngine, warm, 4, mode, 'none', 1); // warm-up: pipelines compiled, caches hot
    const r = await timed(plainEngine, o.prompts, o.maxTokens, mode, 'none', 1);
    plain.set(mode.name, r);
    rows.push({
      mode: mode.name,
      drafter: 'none',
      loop: '-',
      budget: 0,
      tokensPerPass: r.tokensPerPass,
      targetPasses: r.passes,
      tokens: r.ids.flat().length,
      ms: r.ms,
      speedup: 1,
      lossless: true,
      draftPassesPerStep: r.draftPassesPerStep,
      ...(r.timing.msPerTargetPass !== undefined ? { msPerTargetPass: r.timing.msPerTargetPass } : {}),
      ...r.gpu,
      ...r.modelled,
    });
    log(
      `${mode.name} none: ${r.ms.toFixed(0)} ms, ${(r.timing.msPerTargetPass ?? 0).toFixed(1)} ms/target pass`,
    );
  }
  for (const c of configs) {
    const engine = c.draft ? await createEngine({ ...base, draft: c.draft }) : plainEngine;
    for (const mode of o.modes) {
      const ref = plain.get(mode.name)!;
      await timed(engine, warm, 4, mode, c.drafter, 4); // warm-up
      for (const [budget, loop] of o.budgets.flatMap((b) =>
        (c.draft ? loops : ['-' as const]).map((l) => [b, l] as const),
      )) {
        const r = await timed(
          engine,
          o.prompts,
          o.maxTokens,
          mode,
          c.drafter,
          budget,
          loop === '-' ? 'device' : loop,
        );
        const exact = mode.temperature === 0 || mode.acceptance === 'gumbel';
        const row: SpecRow = {
          mode: mode.name,
          drafter: c.name,
          loop: loop === '-' ? loop : (r.ranOn ?? loop),
          budget,
          tokensPerPass: r.tokensPerPass,
          targetPasses: r.passes,
          tokens: r.ids.flat().length,
          ms: r.ms,
          speedup: ref.ms / r.ms,
          lossless: exact ? JSON.stringify(r.ids) === JSON.stringify(ref.ids) : null,
          draftPassesPerStep: r.draftPassesPerStep,
          ...(r.timing.msPerDraftPass !== undefined ? { msPerDraftPass: r.timing.msPerDraftPass } : {}),
          ...r.gpu,
          ...r.modelled,
        };
        log(
          `${mode.name} ${c.name}${loop === '-' ? '' : ` (${r.ranOn ?? loop})`} budget ${budget}: ${row.tokensPerPass.toFixed(2)} tokens/pass, ${row.speedup.toFixed(2)}x` +
            (r.gpu
              ? `, ${r.gpu.readbacksPerStep.toFixed(2)} round trips/step (${r.gpu.readbackBytesPerStep.toFixed(0)} B), ${r.gpu.dispatchesPerToken.toFixed(1)} dispatches/token`
              : '') +
            (r.modelled
              ? `, ${r.draftPassesPerStep.toFixed(2)} draft passes/step, modelled ${r.modelled.modelledSpeedup.toFixed(2)}x`
              : '') +
            (r.timing.msPerDraftPass !== undefined
              ? `, ${r.timing.msPerDraftPass.toFixed(1)} ms/draft pass`
              : ''),
        );
        rows.push(row);
      }
    }
    if (engine !== plainEngine) await engine.unload();
  }
  await plainEngine.unload();

  if (device === 'cpu') return { rows, verifyCost: [] };
  const runner = await createGpuRunner(await openModel(urlModelFiles(o.target)), {
    quant: 'f16',
    capacity: 256,
    gpu: ctx,
  });
  const verifyCost = await verifyCostCurve(runner, { reps: o.verifyReps, log });
  runner.dispose();
  return { rows, verifyCost };
}

/** The verify-cost curve's numbers of new tokens: powers of two, and 17 and 33 past two tile edges. */
export const VERIFY_TOKENS = [1, 2, 4, 8, 16, 17, 32, 33, 64];

/**
 * Median time of one pass of `runner` over a chain of T new tokens after a 16-token prefix, for
 * each T of `tokens` (default {@link VERIFY_TOKENS}; the first should be 1), sampling at T = 1 on
 * every row (as tree verification does), each point after one warm-up pass; the ratio is against
 * the first point. Leaves the runner's cache empty.
 */
export async function verifyCostCurve(
  runner: ModelRunner,
  o: { reps: number; tokens?: readonly number[]; log?: (line: string) => void },
): Promise<VerifyCost[]> {
  const sampler: SamplerSpec = { temperature: 1, topP: 1, topK: 0, seed: 1 };
  const prefix = Array.from({ length: 16 }, (_, i) => 10 + i);
  runner.trim(0);
  await runner.forward({ tokens: prefix }, sampler, 'last');
  runner.commit(prefix.map((_, i) => i));
  const out: VerifyCost[] = [];
  for (const T of o.tokens ?? VERIFY_TOKENS) {
    const times: number[] = [];
    const tokens = Array.from({ length: T }, (_, i) => 20 + i);
    for (let rep = 0; rep <= o.reps; rep++) {
      const t0 = performance.now();
      await runner.forward({ tokens }, sampler, 'all');
      times.push(performance.now() - t0);
      runner.trim(prefix.length);
    }
    const ms = median(times.slice(1));
    out.push({ T, ms, ratio: ms / (out[0]?.ms ?? ms) });
    o.log?.(`verify T=${T}: ${ms.toFixed(2)} ms`);
  }
  runner.trim(0);
  return out;
}
