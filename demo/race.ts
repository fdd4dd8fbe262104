// The race: one prompt decoded twice on the same loaded engine, plainly and then with a drafter,
// with the same seed and sampling, so the two outputs must be the same text; what differs is the
// speed. Speculation runs at every step here ('always'), so the figures show what the drafter buys
// on this device, good or bad.
import type { DrafterKind, GenerateOptions, GenerationStats, WorkerEngine } from '../src/index.js';

/** The seed of both runs (any seed does, as long as both use it). */
const SEED = 0;

/** One run of the race: its drafter, output and the engine's figures. */
export interface RaceRun {
  readonly drafter: DrafterKind;
  readonly ids: readonly number[];
  readonly text: string;
  readonly stats: GenerationStats;
}

/** Both runs, whether their outputs are identical, and the decoding speed-up of the second. */
export interface RaceResult {
  readonly plain: RaceRun;
  readonly speculative: RaceRun;
  readonly identical: boolean;
  /** Decode tokens/s with the drafter over decode tokens/s without. */
  readonly speedup: number;
}

async function run(
  engine: WorkerEngine,
  prompt: string | readonly number[],
  options: GenerateOptions,
  onText: (text: string) => void,
): Promise<RaceRun> {
  const ids: number[] = [];
  let text = '';
  for await (const chunk of engine.generate(prompt, options)) {
    ids.push(...chunk.ids);
    text += chunk.text;
    onText(text);
  }
  const stats = engine.lastStats;
  if (!stats) throw new Error('the engine reported no stats for the race');
  return { drafter: options.drafter ?? 'none', ids, text, stats };
}

/**
 * Runs `prompt` plainly, then with `options.drafter` (not 'none'), one after the other; `onText`
 * gets each run's text as it streams. Aborting `options.signal` stops whichever run is going.
 */
export async function race(
  engine: WorkerEngine,
  prompt: string | readonly number[],
  options: GenerateOptions,
  onText: (which: 'plain' | 'speculative', text: string) => void,
): Promise<RaceResult> {
  const { drafter, treeBudget, speculation: _, ...rest } = options;
  if (!drafter || drafter === 'none') throw new Error('the race needs a drafter');
  const common = { ...rest, seed: SEED };
  const plain = await run(engine, prompt, { ...common, drafter: 'none' }, (t) => onText('plain', t));
  const speculative = await run(
    engine,
    prompt,
    { ...common, drafter, speculation: 'always', ...(treeBudget === undefined ? {} : { treeBudget }) },
    (t) => onText('speculative', t),
  );
  const identical = plain.text === speculative.text && plain.ids.join() === speculative.ids.join();
  return {
    plain,
    speculative,
    identical,
    speedup: speculative.stats.decode_tok_s / plain.stats.decode_tok_s,
  };
}
