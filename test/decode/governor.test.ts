import { describe, expect, it } from 'vitest';
import { SpeculationGovernor, type StepKind } from '../../src/decode/governor.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { InvalidInputError } from '../../src/errors.js';
import { ToyRunner, toyCodec } from '../helpers/toy-model.js';

/**
 * Drives a governor for `steps` steps against fixed costs: a speculative step costs `specMs` and
 * emits `specTokens`; a plain step costs `plainMs` for one token. Returns the kinds chosen and the
 * time per token it reached.
 */
function drive(
  g: SpeculationGovernor,
  steps: number,
  cost: { specMs: number; specTokens: number; plainMs: number },
): { kinds: StepKind[]; msPerToken: (from?: number) => number } {
  const kinds: StepKind[] = [];
  const ms: number[] = [];
  const tokens: number[] = [];
  for (let i = 0; i < steps; i++) {
    const kind = g.next();
    kinds.push(kind);
    const [t, n] = kind === 'speculate' ? [cost.specMs, cost.specTokens] : [cost.plainMs, 1];
    g.record(kind, t, n);
    ms.push(t);
    tokens.push(n);
  }
  const sum = (xs: number[], from: number) => xs.slice(from).reduce((a, b) => a + b, 0);
  // Time per token over the steps from `from` on.
  return { kinds, msPerToken: (from = 0) => sum(ms, from) / sum(tokens, from) };
}

describe('SpeculationGovernor', () => {
  it('speculates first, then measures plain decoding over its probe steps', () => {
    const g = new SpeculationGovernor({ probeSteps: 4 });
    const { kinds } = drive(g, 5, { specMs: 10, specTokens: 3, plainMs: 4 });
    expect(kinds).toEqual(['speculate', 'plain', 'plain', 'plain', 'plain']);
    expect(g.estimates.speculate).toBeCloseTo(10 / 3, 9);
    expect(g.estimates.plain).toBe(4);
  });

  it('where speculation loses, decodes plain but for one speculative probe per exploreEvery tokens', () => {
    // A verify pass that costs five plain steps for 2 tokens: 2.5x slower per token.
    const cost = { specMs: 20, specTokens: 2, plainMs: 4 };
    const { kinds, msPerToken } = drive(new SpeculationGovernor({ exploreEvery: 32 }), 400, cost);
    const probes = kinds.slice(5).filter((k) => k === 'speculate').length;
    expect(probes).toBeGreaterThan(0);
    expect(probes).toBeLessThanOrEqual(Math.ceil(395 / 32));
    // Within 10% of plain decoding's 4 ms per token (always speculating: 10 ms).
    expect(msPerToken()).toBeLessThan(4 * 1.1);
  });

  it('where speculation wins, speculates but for plain probes per exploreEvery tokens', () => {
    const cost = { specMs: 6, specTokens: 3, plainMs: 4 };
    const { kinds, msPerToken } = drive(new SpeculationGovernor({ probeSteps: 4 }), 400, cost);
    expect(kinds.filter((k) => k === 'speculate').length / kinds.length).toBeGreaterThan(0.8);
    // Close to speculation's 2 ms per token, far from plain's 4.
    expect(msPerToken()).toBeLessThan(2 * 1.1);
  });

  it('follows a change: speculation that stops paying is dropped, and taken up again', () => {
    const g = new SpeculationGovernor({ exploreEvery: 16, probeSteps: 2 });
    drive(g, 100, { specMs: 6, specTokens: 3, plainMs: 4 });
    // Speculation now emits one token per 12 ms: plain decoding's 4 ms wins.
    expect(drive(g, 200, { specMs: 12, specTokens: 1, plainMs: 4 }).msPerToken(100)).toBeLessThan(4 * 1.15);
    // And now 4 tokens per 4 ms: speculation's 1 ms wins again.
    expect(drive(g, 300, { specMs: 4, specTokens: 4, plainMs: 4 }).msPerToken(100)).toBeLessThan(1.5);
  });
});

describe('adaptive speculation in the engine', () => {
  const prompt = 'abcabcabcabc';
  /** Tokens per target pass of the last run. */
  let perPass = 0;
  const run = async (o: GenerateOptions) => {
    const engine = new Engine({ id: 'toy', runner: new ToyRunner(), codec: toyCodec });
    let text = '';
    for await (const c of engine.generate(prompt, { maxTokens: 40, ...o })) text += c.text;
    perPass = engine.lastStats!.tokens_per_pass;
    return text;
  };

  it('gives the same text as plain decoding and as speculating at every step', async () => {
    const plain = await run({ drafter: 'none' });
    expect(await run({ drafter: 'ngram', speculation: 'adaptive' })).toBe(plain);
    expect(await run({ drafter: 'ngram', speculation: 'always' })).toBe(plain);
    // Speculating at every step, the n-grams' drafts are accepted: 5.6 tokens per pass measured
    // (drafts all rejected would give exactly 1). Adaptive runs are not held to it: on the toy
    // model's free steps the governor takes plain decoding.
    expect(perPass).toBeGreaterThan(3);
    expect(await run({ drafter: 'ngram', speculation: 'adaptive', temperature: 1, seed: 4 })).toBe(
      await run({ drafter: 'none', temperature: 1, seed: 4 }),
    );
  });

  it('refuses an unknown mode with a typed error', async () => {
    await expect(run({ drafter: 'ngram', speculation: 'sometimes' as 'always' })).rejects.toThrow(
      InvalidInputError,
    );
  });
});
