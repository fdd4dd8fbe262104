/** A decoding step's kind, as {@link SpeculationGovernor} chooses it. */
export type StepKind = 'speculate' | 'plain';

/** Options of {@link SpeculationGovernor}. */
export interface GovernorOptions {
  /** Plain steps run to measure plain decoding, when it has no estimate yet (default 4). */
  probeSteps?: number;
  /**
   * Tokens emitted by the chosen kind between two measurements of the other (default 64): the
   * estimates follow a device whose speed changes (a drafter that stops matching the text, a
   * throttled GPU).
   */
  exploreEvery?: number;
  /** Weight of the newest step in the running mean of ms per token (default 0.25). */
  weight?: number;
}

/**
 * Chooses, step by step, between speculative and plain decoding by what each has cost so far on
 * this device, so that speculation never makes decoding slower than plain decoding by more than
 * what measuring costs. Both give the same tokens (speculation is lossless), so the choice is only
 * about speed, and only time tells it: a verify pass over 17 tokens costs about one plain step on
 * a GPU bound by weight bandwidth, and five on a CPU emulator, and a drafter's acceptance depends
 * on the text.
 *
 * It keeps a running mean of milliseconds per emitted token for each kind. It speculates first;
 * then it measures plain decoding over `probeSteps` steps; from then on it takes the cheaper kind,
 * and after every `exploreEvery` tokens of it runs one step (speculation) or `probeSteps` steps
 * (plain) of the other to refresh that estimate.
 */
export class SpeculationGovernor {
  private readonly msPerToken: Record<StepKind, number | undefined> = {
    speculate: undefined,
    plain: undefined,
  };
  /** Plain steps still to run in the current measurement of plain decoding. */
  private probing = 0;
  /** Tokens the preferred kind emitted since the other was last measured. */
  private sinceExplore = 0;
  private readonly probeSteps: number;
  private readonly exploreEvery: number;
  private readonly weight: number;

  constructor(o: GovernorOptions = {}) {
    this.probeSteps = o.probeSteps ?? 4;
    this.exploreEvery = o.exploreEvery ?? 64;
    this.weight = o.weight ?? 0.25;
  }

  /** The kind of the next step. */
  next(): StepKind {
    const { speculate, plain } = this.msPerToken;
    if (speculate === undefined) return 'speculate';
    if (this.probing > 0) return 'plain';
    if (plain === undefined) {
      this.probing = this.probeSteps;
      return 'plain';
    }
    const best: StepKind = speculate <= plain ? 'speculate' : 'plain';
    if (this.sinceExplore < this.exploreEvery) return best;
    this.sinceExplore = 0;
    if (best === 'speculate') {
      this.probing = this.probeSteps;
      return 'plain';
    }
    return 'speculate';
  }

  /** Records a finished step: its kind, its wall time and the tokens it emitted. */
  record(kind: StepKind, ms: number, tokens: number): void {
    if (!(tokens > 0) || !(ms >= 0)) return;
    const x = ms / tokens;
    const old = this.msPerToken[kind];
    this.msPerToken[kind] = old === undefined ? x : old + this.weight * (x - old);
    if (kind === 'plain' && this.probing > 0) this.probing--;
    const { speculate, plain } = this.msPerToken;
    const preferred =
      speculate !== undefined && plain !== undefined && speculate > plain ? 'plain' : 'speculate';
    if (kind === preferred && this.probing === 0) this.sinceExplore += tokens;
  }

  /** The running means of ms per emitted token (undefined before a kind was measured). */
  get estimates(): Readonly<Record<StepKind, number | undefined>> {
    return { ...this.msPerToken };
  }
}
