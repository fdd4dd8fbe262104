// Distribution tests of speculative sampling on a tiny model (ALGORITHMS.md §5): the next two
// tokens, drawn 20,000 times through the engine, against the exact joint p(t1) p(t2 | t1) from the
// reference probabilities, by Pearson chi-square (p > 0.001). Each path has a deliberately broken
// twin that the same test must reject, so the test is known to have power.
import { describe, expect, it } from 'vitest';
import type { Drafter } from '../../src/decode/drafter.js';
import { ModelDrafter } from '../../src/decode/model-drafter.js';
import { samplingProbs } from '../../src/decode/probs.js';
import { rejectionVerify } from '../../src/decode/rejection.js';
import { verifyChain } from '../../src/decode/speculate.js';
import { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions, TextCodec } from '../../src/engine/types.js';
import { sampleRef } from '../../src/kernels/sample/gumbel.js';
import { specFromConfig } from '../../src/model/families/index.js';
import type { ForwardInput, ModelRunner, SamplerSpec } from '../../src/model/runner.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { draftTree } from '../../src/model/tree.js';
import { rng, tinyConfig } from '../fixtures/write.js';
import { brokenResidualVerify } from '../helpers/broken-rejection.js';

const V = 5;
const N = 20_000;
const PROMPT = [1, 3, 0, 4];
// Chi-square critical value for V² - 1 = 24 degrees of freedom at p = 0.001.
const CRITICAL_24_DOF = 51.179;
const SAMPLER: SamplerSpec = { temperature: 1, topP: 1, topK: 0, seed: 0 };
const SPEC: ModelSpec = specFromConfig({ ...tinyConfig('llama'), vocab_size: V });

/**
 * A tiny model that 20,000 requests can afford: a bigram table, the logits after a token depending
 * only on that token. It is a complete {@link ModelRunner} (chains and trees, commit, trim,
 * logits readback) and samples exactly as the reference runner does (sampleRef with noise keyed by
 * the position after each row), so the engine, drafters and verification run unchanged on it.
 */
class BigramRunner implements ModelRunner {
  readonly spec = SPEC;
  readonly capacity = 64;
  private committed = 0;
  private scored = new Float32Array(0);

  constructor(private readonly table: readonly Float32Array[]) {}

  get kvLength(): number {
    return this.committed;
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    const T = input.tokens.length;
    const tree = draftTree(input.parents ?? input.tokens.map((_, i) => i - 1));
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    this.scored = new Float32Array(picked.length * V);
    picked.forEach((i, r) => {
      this.scored.set(this.table[input.tokens[i]!]!, r * V);
    });
    return Int32Array.from(picked, (i, r) =>
      sampleRef(
        this.scored.subarray(r * V, (r + 1) * V),
        sampler.seed,
        this.committed + tree.depth[i]! + 1,
        sampler,
      ),
    );
  }

  async lastLogits(): Promise<Float32Array> {
    return this.scored.slice();
  }

  commit(path: readonly number[]): void {
    this.committed += path.length;
  }

  trim(length: number): void {
    this.committed = Math.min(this.committed, length);
  }

  dispose(): void {}
}

/** A random bigram table [V][V] of logits in ±1.5. */
function table(seed: number): Float32Array[] {
  const rand = rng(seed);
  return Array.from({ length: V }, () => Float32Array.from({ length: V }, () => (rand() - 0.5) * 3));
}

const TARGET = table(1);
const DRAFT = table(2);
const codec: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };

/** The exact joint distribution of the two tokens after PROMPT, [V * V]: p(t1) p(t2 | t1). */
function exactJoint(): Float64Array {
  const p1 = samplingProbs(TARGET[PROMPT.at(-1)!]!, SAMPLER);
  const joint = new Float64Array(V * V);
  for (let a = 0; a < V; a++) {
    const p2 = samplingProbs(TARGET[a]!, SAMPLER);
    for (let b = 0; b < V; b++) joint[a * V + b] = p1[a]! * p2[b]!;
  }
  return joint;
}

/** Pearson chi-square of N two-token draws (seeds 0..N-1) against the exact joint. */
async function chiSquare(draw: (seed: number) => Promise<number[]>): Promise<number> {
  const joint = exactJoint();
  // Precondition of the chi-square approximation: every cell expects at least 5 draws.
  expect(Math.min(...joint) * N).toBeGreaterThan(5);
  const counts = new Float64Array(V * V);
  for (let seed = 0; seed < N; seed++) {
    const [a, b] = await draw(seed);
    counts[a! * V + b!]!++;
  }
  let chi = 0;
  for (let c = 0; c < V * V; c++) chi += (counts[c]! - N * joint[c]!) ** 2 / (N * joint[c]!);
  return chi;
}

/** Two tokens from the engine, a fresh seed per request; `passes` sums tokens per decode pass. */
function viaEngine(engine: Engine, o: GenerateOptions, passes = { sum: 0 }) {
  return async (seed: number) => {
    const out: number[] = [];
    for await (const c of engine.generate(PROMPT, { ...o, maxTokens: 2, temperature: 1, seed }))
      out.push(...c.ids);
    passes.sum += engine.lastStats!.tokens_per_pass;
    return out;
  };
}

/**
 * A runner whose sampler draws with Gumbel noise that does not depend on the position (the same
 * noise for both tokens): each token alone is still a correct sample, the pair is not.
 */
class PositionlessNoise implements ModelRunner {
  constructor(private readonly inner: BigramRunner) {}
  get spec() {
    return this.inner.spec;
  }
  get capacity() {
    return this.inner.capacity;
  }
  get kvLength() {
    return this.inner.kvLength;
  }
  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    await this.inner.forward(input, sampler, rows);
    const logits = await this.inner.lastLogits();
    const R = logits.length / V;
    return Int32Array.from({ length: R }, (_, r) =>
      sampleRef(logits.subarray(r * V, (r + 1) * V), sampler.seed, 0, sampler),
    );
  }
  lastLogits(): Promise<Float32Array> {
    return this.inner.lastLogits();
  }
  commit(path: readonly number[]): void {
    this.inner.commit(path);
  }
  trim(length: number): void {
    this.inner.trim(length);
  }
  dispose(): void {}
}

describe('speculative sampling: the next two tokens follow the target distribution (20,000 draws)', () => {
  it('Gumbel coupling with a best-first draft tree (varying seeds) passes; position-free noise fails', {
    timeout: 120_000,
  }, async () => {
    const make = (wrap: (r: BigramRunner) => ModelRunner) =>
      new Engine({
        id: 'tiny',
        runner: wrap(new BigramRunner(TARGET)),
        codec,
        drafter: new ModelDrafter('draft', wrap(new BigramRunner(DRAFT))),
      });
    const o: GenerateOptions = { drafter: 'draft', treeBudget: 4 };
    const passes = { sum: 0 };
    const good = await chiSquare(
      viaEngine(
        make((r) => r),
        o,
        passes,
      ),
    );
    expect(good).toBeLessThan(CRITICAL_24_DOF);
    // The coupling was exercised: drafts were accepted (2.15 tokens per pass measured; all rejected
    // would be exactly 1).
    console.log(
      `[distribution] Gumbel, best-first tree of 4: ${(passes.sum / N).toFixed(3)} tokens per pass`,
    );
    expect(passes.sum / N).toBeGreaterThan(1.5);
    const broken = await chiSquare(
      viaEngine(
        make((r) => new PositionlessNoise(r)),
        o,
      ),
    );
    expect(broken).toBeGreaterThan(CRITICAL_24_DOF);
  });

  it('the rejection rule on draft-model chains passes; a residual drawn from p instead of max(0, p - q) fails', {
    timeout: 120_000,
  }, async () => {
    const engine = new Engine({
      id: 'tiny',
      runner: new BigramRunner(TARGET),
      codec,
      drafter: new ModelDrafter('draft', new BigramRunner(DRAFT)),
      acceptance: 'rejection',
    });
    const passes = { sum: 0 };
    const good = await chiSquare(viaEngine(engine, { drafter: 'draft', treeBudget: 2 }, passes));
    expect(good).toBeLessThan(CRITICAL_24_DOF);
    // Both branches ran: some drafts were accepted (more than one token per pass on average) and
    // some rejected (fewer than the three of a fully accepted chain of two).
    expect(passes.sum / N).toBeGreaterThan(1.05);
    expect(passes.sum / N).toBeLessThan(2.95);

    // The same loop as the engine's (draft a chain, verify it, keep the accepted path), with the
    // broken rule in place of rejectionVerify.
    const broken = brokenResidualVerify;
    const target = new BigramRunner(TARGET);
    const drafter: Drafter = new ModelDrafter('draft', new BigramRunner(DRAFT));
    const loop = (rule: typeof rejectionVerify) => async (seed: number) => {
      const sampler = { ...SAMPLER, seed };
      target.trim(0);
      await target.forward({ tokens: PROMPT.slice(0, -1) }, sampler, 'last');
      target.commit(PROMPT.slice(0, -1).map((_, i) => i));
      const context = PROMPT.slice(0, -1);
      let last = PROMPT.at(-1)!;
      const out: number[] = [];
      while (out.length < 2) {
        const draft = await drafter.propose([...context, last], 2, sampler, 'chain');
        const step = await verifyChain(target, last, draft, sampler, rule);
        out.push(...step.emitted);
        context.push(last, ...step.accepted.map((i) => draft.tokens[i]!));
        last = step.emitted.at(-1)!;
      }
      return out.slice(0, 2);
    };
    expect(await chiSquare(loop(broken))).toBeGreaterThan(CRITICAL_24_DOF);
    // The loop itself is sound: with the real rule it passes too.
    expect(await chiSquare(loop(rejectionVerify))).toBeLessThan(CRITICAL_24_DOF);
  });
});
