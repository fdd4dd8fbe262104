// Speculative decoding benchmark (engine code only: no DOM, no node:). On the demo pair, greedy:
// tokens per target pass and wall-clock speed-up against plain decoding, per drafter and budget;
// and the verify-cost curve (time of one target pass over T tokens divided by T = 1).
import { type CreateEngineOptions, createEngine } from '../src/engine/create.js';
import type { Engine } from '../src/engine/engine.js';
import type { DrafterKind } from '../src/engine/types.js';
import type { GpuContext } from '../src/gpu/device.js';
import { urlModelFiles } from '../src/model/files.js';
import { createGpuRunner } from '../src/model/gpu-runner.js';
import { openModel } from '../src/model/load.js';
import { GREEDY } from '../src/model/runner.js';

/** One drafter configuration at one budget. */
export interface SpecRow {
  drafter: string;
  budget: number;
  tokensPerPass: number;
  targetPasses: number;
  tokens: number;
  ms: number;
  /** Plain decoding's time for the same prompts and tokens, divided by this row's. */
  speedup: number;
  /** The generated ids equal plain greedy decoding's. */
  lossless: boolean;
}

/** Options of {@link runSpecBench}. */
export interface SpecBenchOptions {
  target: string;
  draft: string;
  prompts: string[];
  maxTokens: number;
  budgets: number[];
  /** 'cpu' runs the plain-TS reference: tokens per pass are the same, wall-clock ratios are not GPU figures. */
  device?: 'gpu' | 'cpu';
  log?: (line: string) => void;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed(
  engine: Engine,
  prompts: string[],
  maxTokens: number,
  drafter: DrafterKind,
  budget: number,
) {
  const t0 = performance.now();
  const ids: number[][] = [];
  let passes = 0;
  let perPass = 0;
  for (const p of prompts) {
    const out: number[] = [];
    for await (const c of engine.generate(p, { maxTokens, drafter, treeBudget: budget })) out.push(...c.ids);
    ids.push(out);
    passes += engine.lastStats!.target_passes;
    perPass += engine.lastStats!.tokens_per_pass;
  }
  return { ms: performance.now() - t0, ids, passes, tokensPerPass: perPass / prompts.length };
}

/** Runs the drafter × budget table and the verify-cost curve. */
export async function runSpecBench(
  ctx: GpuContext,
  o: SpecBenchOptions,
): Promise<{ rows: SpecRow[]; verifyCost: { T: number; ms: number; ratio: number }[] }> {
  const log = o.log ?? (() => {});
  const device = o.device ?? 'gpu';
  const base: CreateEngineOptions = { model: o.target, quant: 'f16', gpu: ctx, contextLength: 512, device };
  const configs: { name: string; draft?: CreateEngineOptions['draft']; drafter: DrafterKind }[] = [
    { name: 'ngram', drafter: 'ngram' },
    { name: 'draft-model', draft: { model: o.draft, quant: 'f16' }, drafter: 'draft' },
    { name: 'self-int4', draft: { self: 'int4' }, drafter: 'draft' },
    { name: 'self-int2', draft: { self: 'int2' }, drafter: 'draft' },
  ];
  const plainEngine = await createEngine(base);
  await timed(plainEngine, o.prompts.slice(0, 1), 4, 'none', 1); // warm-up
  const plain = await timed(plainEngine, o.prompts, o.maxTokens, 'none', 1);
  log(`plain: ${plain.ms.toFixed(0)} ms`);
  const rows: SpecRow[] = [];
  for (const c of configs) {
    const engine = c.draft ? await createEngine({ ...base, draft: c.draft }) : plainEngine;
    await timed(engine, o.prompts.slice(0, 1), 4, c.drafter, 4); // warm-up
    for (const budget of o.budgets) {
      const r = await timed(engine, o.prompts, o.maxTokens, c.drafter, budget);
      const row: SpecRow = {
        drafter: c.name,
        budget,
        tokensPerPass: r.tokensPerPass,
        targetPasses: r.passes,
        tokens: r.ids.flat().length,
        ms: r.ms,
        speedup: plain.ms / r.ms,
        lossless: JSON.stringify(r.ids) === JSON.stringify(plain.ids),
      };
      log(
        `${c.name} budget ${budget}: ${row.tokensPerPass.toFixed(2)} tokens/pass, ${row.speedup.toFixed(2)}x`,
      );
      rows.push(row);
    }
    if (engine !== plainEngine) await engine.unload();
  }
  await plainEngine.unload();

  if (device === 'cpu') return { rows, verifyCost: [] };
  // Verify cost: one target pass over a chain of T tokens after a short prefix.
  const runner = await createGpuRunner(await openModel(urlModelFiles(o.target)), {
    quant: 'f16',
    capacity: 256,
    gpu: ctx,
  });
  const prefix = Array.from({ length: 16 }, (_, i) => 10 + i);
  await runner.forward({ tokens: prefix }, GREEDY, 'last');
  runner.commit(prefix.map((_, i) => i));
  const verifyCost: { T: number; ms: number; ratio: number }[] = [];
  for (const T of [1, 2, 4, 8, 16, 32, 64]) {
    const times: number[] = [];
    for (let rep = 0; rep < 4; rep++) {
      const t0 = performance.now();
      await runner.forward({ tokens: Array.from({ length: T }, (_, i) => 20 + i) }, GREEDY, 'all');
      times.push(performance.now() - t0);
      runner.trim(prefix.length);
    }
    const ms = median(times.slice(1));
    verifyCost.push({ T, ms, ratio: ms / (verifyCost[0]?.ms ?? ms) });
    log(`verify T=${T}: ${ms.toFixed(1)} ms`);
  }
  runner.dispose();
  return { rows, verifyCost };
}
