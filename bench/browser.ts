// Speed benchmark of weft itself (engine code only: no DOM, no node:), shared by the Chromium page
// (bench/browser-page.ts) and the Node entry (bench/node-bench.ts). For each weight format and
// drafter: prompt-processing and decode tokens/s, time to first token and tokens per target pass,
// greedy, on fixed prompts, and what each decode step asked of the GPU (dispatches and writes per
// token, readbacks and their bytes per pass, weight bytes per pass); one warm-up request per engine
// is excluded; each figure is the median over R runs of its mean over the prompts.
import type { CreateEngineOptions } from '../src/engine/create.js';
import type { WeftEngine } from '../src/engine/engine.js';
import type { DrafterKind, GenerationStats } from '../src/engine/types.js';
import type { Quant } from '../src/quant/pack.js';

/** The figures of one row: one runtime, one format, one drafter. */
export interface SpeedFigures {
  /** Prompt tokens per second of prefill (prompt tokens / time to first token). */
  prefillTokS: number;
  /** Generated tokens per second after the first ((n - 1) / (end - first token)). */
  decodeTokS: number;
  /** From the request (prompt ids in hand) to the first generated token. */
  ttftMs: number;
  /** Generated tokens per decode pass of the target (1 without speculation). */
  tokensPerPass: number;
  promptTokens: number;
  completionTokens: number;
  /** What the decode steps asked of the GPU; absent off the GPU (and for peers). */
  gpu?: GpuWorkFigures;
}

/** GenerationStats' counts of the device's work in decode steps (see `GenerationStats`). */
export interface GpuWorkFigures {
  dispatchesPerToken: number;
  writesPerToken: number;
  readbacksPerPass: number;
  readbackBytesPerPass: number;
  weightBytesPerPass: number;
}

/** One weft row, with the tokens of the last run (for comparison with the peers). */
export interface WeftRow extends SpeedFigures {
  runtime: 'weft';
  /** The weights weft loaded: the model's safetensors, or one of the peer's GGUF files. */
  source: string;
  quant: Quant;
  /** none, none-host (plain, the loop on the CPU), ngram, draft-model (models/kjv-draft), self-int4, head or head-cpu (models/kjv-head on the GPU or the CPU), some -adaptive. */
  drafter: string;
  /** Generated ids per prompt, last run. */
  ids: number[][];
  /**
   * The ids equal plain greedy decoding's at the same format (speculation is lossless); null when
   * the plain row was not run.
   */
  lossless: boolean | null;
}

/**
 * How a drafter row is set up: the engine's draft option and the request's drafter, and for plain
 * decoding where its loop runs (see `GenerateOptions.decodeLoop`).
 */
export interface DrafterSetup {
  name: string;
  draft?: CreateEngineOptions['draft'];
  drafter: DrafterKind;
  decodeLoop?: 'device' | 'host';
  /** `GenerateOptions.speculation`: 'adaptive' rows let the engine drop speculation where it loses. */
  speculation?: 'always' | 'adaptive';
}

/** Options of {@link runWeftBench}. */
export interface WeftBenchOptions {
  /** Loads an engine (the page passes `createEngine` with its GPU context; Node, weft's). */
  load: (o: CreateEngineOptions) => Promise<WeftEngine>;
  /** The target model (URL prefix or ModelFiles). */
  target: CreateEngineOptions['model'];
  /** What `target` is, for the rows' `source` (default 'safetensors'). */
  source?: string;
  /** The draft model for the draft-model row. */
  draft: CreateEngineOptions['model'];
  /** The draft head for the head rows (absent: no head rows). */
  head?: CreateEngineOptions['model'];
  /** Prompts as token ids (already tokenized, BOS included), identical for every runtime. */
  prompts: number[][];
  /** A prompt used only for the warm-up request. */
  warmup: number[];
  maxTokens: number;
  runs: number;
  quants: readonly Quant[];
  /** Names of the drafter rows to run (see {@link drafterSetups}). */
  drafters: readonly string[];
  /** Formats at which the speculative rows run (every format in `quants` when absent). */
  specQuants?: readonly Quant[];
  /** Tree budget of speculative rows. */
  treeBudget: number;
  log?: (line: string) => void;
}

/** The drafter rows weft can run, by name. */
export function drafterSetups(
  draftModel: CreateEngineOptions['model'],
  head?: CreateEngineOptions['model'],
): DrafterSetup[] {
  return [
    { name: 'none', drafter: 'none' },
    // Plain decoding with one forward and one readback per token, driven by the CPU: the loop the
    // GPU-resident one (the none row) replaced, for the ratio between them.
    { name: 'none-host', drafter: 'none', decodeLoop: 'host' },
    { name: 'ngram', drafter: 'ngram' },
    { name: 'draft-model', draft: { model: draftModel, quant: 'f16' }, drafter: 'draft' },
    { name: 'self-int4', draft: { self: 'int4' }, drafter: 'draft' },
    // The same drafters under adaptive speculation: the engine measures a speculative step and a
    // plain one per token and takes the cheaper (SpeculationGovernor).
    { name: 'ngram-adaptive', drafter: 'ngram', speculation: 'adaptive' },
    {
      name: 'draft-model-adaptive',
      draft: { model: draftModel, quant: 'f16' },
      drafter: 'draft',
      speculation: 'adaptive',
    },
    { name: 'self-int4-adaptive', draft: { self: 'int4' }, drafter: 'draft', speculation: 'adaptive' },
    // The target's trained draft head (models/kjv-head): on the GPU (device steps), on the CPU
    // (host-driven steps), and on the GPU under adaptive speculation.
    ...(head
      ? [
          { name: 'head', draft: { head }, drafter: 'draft' as const },
          { name: 'head-cpu', draft: { head, on: 'cpu' as const }, drafter: 'draft' as const },
          {
            name: 'head-adaptive',
            draft: { head },
            drafter: 'draft' as const,
            speculation: 'adaptive' as const,
          },
        ]
      : []),
  ];
}

/**
 * The fixed prompts: the first 10 words of `n` evenly spaced held-out verses (never seen in
 * training), and a different one for the warm-up request. Consecutive prompts differ right after
 * BOS, so weft's prefix cache reuses only BOS between requests.
 */
export function benchPrompts(heldout: string, n: number): { texts: string[]; warmup: string } {
  const verses = heldout.split('\n').filter((l) => l.length > 40);
  const verse = (i: number) => verses[i]!.split(' ').slice(0, 10).join(' ');
  return {
    texts: Array.from({ length: n }, (_, i) => verse(Math.floor(((i + 0.5) * verses.length) / n))),
    warmup: verse(1),
  };
}

/** Median of a non-empty list. */
export const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

/** Mean over prompts of one run's figures, then the median over runs, figure by figure. */
export function summarize(runs: readonly (readonly SpeedFigures[])[]): SpeedFigures {
  const mean = (xs: readonly SpeedFigures[], f: (s: SpeedFigures) => number) =>
    xs.reduce((a, s) => a + f(s), 0) / xs.length;
  const fig = (f: (s: SpeedFigures) => number) => median(runs.map((r) => mean(r, f)));
  const gpu = (f: (g: GpuWorkFigures) => number) => fig((s) => (s.gpu ? f(s.gpu) : Number.NaN));
  const onGpu = runs.every((r) => r.every((s) => s.gpu));
  return {
    prefillTokS: fig((s) => s.prefillTokS),
    decodeTokS: fig((s) => s.decodeTokS),
    ttftMs: fig((s) => s.ttftMs),
    tokensPerPass: fig((s) => s.tokensPerPass),
    promptTokens: fig((s) => s.promptTokens),
    completionTokens: fig((s) => s.completionTokens),
    ...(onGpu
      ? {
          gpu: {
            dispatchesPerToken: gpu((g) => g.dispatchesPerToken),
            writesPerToken: gpu((g) => g.writesPerToken),
            readbacksPerPass: gpu((g) => g.readbacksPerPass),
            readbackBytesPerPass: gpu((g) => g.readbackBytesPerPass),
            weightBytesPerPass: gpu((g) => g.weightBytesPerPass),
          },
        }
      : {}),
  };
}

function figures(s: GenerationStats): SpeedFigures {
  const onGpu =
    s.dispatches_per_token !== undefined &&
    s.writes_per_token !== undefined &&
    s.readbacks_per_pass !== undefined &&
    s.readback_bytes_per_pass !== undefined &&
    s.weight_bytes_per_pass !== undefined;
  return {
    // The engine reuses KV rows of a shared prefix; prompts are ordered so that only BOS is shared,
    // and prefill speed counts the tokens that actually ran.
    prefillTokS: s.prefill_tok_s,
    decodeTokS: s.decode_tok_s,
    ttftMs: s.time_to_first_token_ms,
    tokensPerPass: s.tokens_per_pass,
    promptTokens: s.prompt_tokens,
    completionTokens: s.completion_tokens,
    ...(onGpu
      ? {
          gpu: {
            dispatchesPerToken: s.dispatches_per_token!,
            writesPerToken: s.writes_per_token!,
            readbacksPerPass: s.readbacks_per_pass!,
            readbackBytesPerPass: s.readback_bytes_per_pass!,
            weightBytesPerPass: s.weight_bytes_per_pass!,
          },
        }
      : {}),
  };
}

async function generateIds(
  engine: WeftEngine,
  prompt: number[],
  maxTokens: number,
  s: DrafterSetup,
  treeBudget: number,
): Promise<{ ids: number[]; stats: GenerationStats }> {
  const ids: number[] = [];
  const o = {
    maxTokens,
    drafter: s.drafter,
    treeBudget,
    temperature: 0,
    decodeLoop: s.decodeLoop ?? 'device',
    speculation: s.speculation ?? 'always',
  };
  for await (const c of engine.generate(prompt, o)) ids.push(...c.ids);
  const stats = engine.lastStats;
  if (!stats) throw new Error('engine reported no stats');
  return { ids, stats };
}

/** The GPU figures of a log line (empty off the GPU). */
function gpuLine(g: GpuWorkFigures | undefined): string {
  if (!g) return '';
  return `, ${g.dispatchesPerToken.toFixed(1)} dispatches/tok, ${g.writesPerToken.toFixed(1)} writes/tok, ${g.readbacksPerPass.toFixed(2)} readbacks/pass (${g.readbackBytesPerPass.toFixed(0)} B), weights ${(g.weightBytesPerPass / 1e6).toFixed(2)} MB/pass`;
}

/** Runs every format × drafter row. Engines are loaded one at a time and unloaded after use. */
export async function runWeftBench(o: WeftBenchOptions): Promise<WeftRow[]> {
  const log = o.log ?? (() => {});
  const chosen = drafterSetups(o.draft, o.head).filter((d) => o.drafters.includes(d.name));
  const rows: WeftRow[] = [];
  for (const quant of o.quants) {
    const spec = o.specQuants?.includes(quant) ?? true;
    const setups = chosen.filter((d) => d.drafter === 'none' || spec);
    let plainIds: number[][] | undefined;
    // Rows that need no draft model share one engine; so do a drafter's always and adaptive rows.
    const groups = new Map<string, DrafterSetup[]>();
    for (const s of setups) {
      const key = s.draft ? s.name.replace(/-adaptive$/, '') : 'plain';
      groups.set(key, [...(groups.get(key) ?? []), s]);
    }
    for (const group of groups.values()) {
      const draft = group[0]!.draft;
      const engine = await o.load({
        model: o.target,
        quant,
        contextLength: 256,
        ...(draft ? { draft } : {}),
      });
      try {
        for (const s of group) {
          // Warm-up (compiles the pipelines of prefill, decode and verification): not measured.
          await generateIds(engine, o.warmup, Math.min(4, o.maxTokens), s, o.treeBudget);
          const runs: SpeedFigures[][] = [];
          let ids: number[][] = [];
          for (let r = 0; r < o.runs; r++) {
            const run: SpeedFigures[] = [];
            ids = [];
            for (const p of o.prompts) {
              const g = await generateIds(engine, p, o.maxTokens, s, o.treeBudget);
              run.push(figures(g.stats));
              ids.push(g.ids);
            }
            runs.push(run);
          }
          if (s.name === 'none') plainIds = ids;
          const row: WeftRow = {
            runtime: 'weft',
            source: o.source ?? 'safetensors',
            quant,
            drafter: s.name,
            ...summarize(runs),
            ids,
            lossless: plainIds === undefined ? null : JSON.stringify(ids) === JSON.stringify(plainIds),
          };
          log(
            `weft${o.source ? ` ${o.source}` : ''} ${quant} ${s.name}: prefill ${row.prefillTokS.toFixed(1)} tok/s, decode ${row.decodeTokS.toFixed(2)} tok/s, ttft ${row.ttftMs.toFixed(0)} ms, ${row.tokensPerPass.toFixed(2)} tok/pass${gpuLine(row.gpu)}`,
          );
          rows.push(row);
          const plain = rows.find(
            (r) => r.quant === quant && r.source === row.source && r.drafter === 'none',
          );
          if (s.name === 'none-host' && plain)
            log(
              `weft ${quant} decode loop: on the device ${plain.decodeTokS.toFixed(2)} tok/s, on the host ${row.decodeTokS.toFixed(2)} tok/s: ×${(plain.decodeTokS / row.decodeTokS).toFixed(2)}`,
            );
        }
      } finally {
        await engine.unload();
      }
    }
  }
  return rows;
}
