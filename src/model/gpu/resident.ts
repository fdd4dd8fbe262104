// A GPU runner's passes whose inputs a kernel writes on the device (a draft tree grown there, see
// decode/device-step.ts): the runner's buffers such a kernel reads and fills, and the passes and
// commits encoded into the caller's submission, which read nothing back.
import { InvalidInputError } from '../../errors.js';
import type { GpuContext } from '../../gpu/device.js';
import type { GpuTimer } from '../../gpu/timing.js';
import { visWords } from '../../kernels/attention/attention-split.js';
import { MAX_FORWARD_TOKENS } from '../blocks/gpu.js';
import type { SamplerSpec } from '../runner.js';
import { isRecurrent, type ModelSpec } from '../spec/spec.js';
import type { RunnerIo } from './buffers.js';
import {
  assertNoSession,
  encodeCommits,
  encodePass,
  type RunnerCursor,
  type RunnerParts,
  stageInputs,
} from './pass.js';

/** A GPU runner's device-resident passes ({@link GpuRunner.resident}). */
export class ResidentPasses {
  constructor(
    readonly spec: ModelSpec,
    readonly capacity: number,
    private readonly parts: RunnerParts,
    private readonly cur: RunnerCursor,
    /** The runner's profiler, when one is set (see GpuRunner.profiler). */
    private readonly profiler: () => GpuTimer | undefined,
  ) {}

  /** The device the runner runs on. */
  get gpu(): GpuContext {
    return this.parts.ctx;
  }

  /** Rows committed to the runner's cache. */
  get kvLength(): number {
    return this.cur.committed;
  }

  /**
   * The buffers a kernel outside the runner reads and fills to drive a pass on the device: the
   * pass inputs, the logits, the sampled ids and the commit slots.
   */
  get io(): RunnerIo {
    const { a } = this.parts;
    return {
      ids: a.ids,
      positions: a.positions,
      slots: a.slots,
      vis: a.vis,
      samplePositions: a.samplePositions,
      logits: a.logits,
      out: a.out,
      commitSlots: a.commitSlots,
    };
  }

  /**
   * Encodes a chain of `tokens` after the committed rows (one staged write) and commits them, so
   * the runner counts them as soon as this returns and later passes encoded in the same submission
   * stand after them. Scores only the last row (its logits are row 0 of `io.logits`) and samples
   * nothing. For a device step, which reads no id back; the CPU knows the tokens.
   */
  encodeChain(enc: GPUCommandEncoder, tokens: readonly number[], sampler: SamplerSpec): void {
    const { ctx, a } = this.parts;
    ctx.assertAlive();
    assertNoSession(this.cur, 'encodeChain');
    const T = tokens.length;
    const base = this.cur.committed;
    if (T < 1 || T > MAX_FORWARD_TOKENS || base + T > this.capacity)
      throw new InvalidInputError(
        `encodeChain: ${T} tokens after ${base} cached must be 1..${Math.min(MAX_FORWARD_TOKENS, this.capacity - base)}`,
      );
    for (const t of tokens)
      if (!Number.isInteger(t) || t < 0 || t >= this.spec.vocabSize)
        throw new InvalidInputError(
          `encodeChain: token id ${t} is outside the vocabulary of ${this.spec.vocabSize}`,
        );
    stageInputs(ctx, a, enc, {
      ids: tokens,
      positions: tokens.map((_, i) => base + i),
      slots: tokens.map((_, i) => base + i),
      vis: visWords(tokens.map(() => T - 1)),
      rows: [T - 1],
      samplePositions: [base + T],
    });
    encodePass(this.parts, this.profiler(), enc, T, 1, base, sampler, {
      sample: false,
      version: this.cur.version,
    });
    this.cur.committed += T;
    this.cur.version++;
    this.cur.lastTokens = 0;
    this.cur.lastRows = 0;
  }

  /**
   * Encodes a pass of T rows (all scored) whose inputs a kernel wrote into {@link io} earlier in
   * the same submission, after the committed rows: rows at slots up to `lastSlot` (default
   * committed + T - 1), sampling every row unless `sample` is false. Commits nothing.
   */
  encodeResident(
    enc: GPUCommandEncoder,
    T: number,
    sampler: SamplerSpec,
    o: { lastSlot?: number; sample?: boolean } = {},
  ): void {
    const { cur } = this;
    this.parts.ctx.assertAlive();
    assertNoSession(cur, 'encodeResident');
    this.refuseRecurrent('encodeResident');
    if (T < 1 || T > MAX_FORWARD_TOKENS || cur.committed + T > this.capacity)
      throw new InvalidInputError(
        `encodeResident: ${T} rows after ${cur.committed} cached exceed ${MAX_FORWARD_TOKENS} rows or the cache of ${this.capacity}`,
      );
    encodePass(this.parts, this.profiler(), enc, T, T, cur.committed, sampler, o);
    cur.lastTokens = 0;
    cur.lastRows = T;
    cur.lastBase = cur.committed;
  }

  /**
   * Encodes the commit of a path a kernel wrote into `io.commitSlots` (source slots, increasing,
   * 0xffffffff past the path's end) for at most `count` entries; the CPU learns the path's length
   * from the submission's readback and tells the runner with {@link adopt}.
   */
  encodeCommit(enc: GPUCommandEncoder, count: number): void {
    this.refuseRecurrent('encodeCommit');
    const pass = enc.beginComputePass({ label: 'commit' });
    const slots = this.parts.a.commitSlots;
    encodeCommits(this.parts, pass, { slots, count, committed: this.cur.committed, moved: true });
    pass.end();
  }

  /**
   * A pass whose rows a kernel lays out (a tree) and a path committed on the device: not for a model
   * with recurrent (linear-attention, short-convolution) layers, whose state follows chains only on
   * the GPU.
   */
  private refuseRecurrent(what: string): void {
    if (isRecurrent(this.spec))
      throw new InvalidInputError(
        `${what}: a model with recurrent layers runs chains on the GPU (device-side trees of its recurrent state are not on the GPU yet)`,
      );
  }

  /** Records that `n` rows after the committed ones were committed on the device (a path). */
  adopt(n: number): void {
    this.refuseRecurrent('adopt');
    const { cur } = this;
    if (!Number.isInteger(n) || n < 0 || cur.committed + n > this.capacity)
      throw new InvalidInputError(
        `adopt: ${n} rows after ${cur.committed} exceed the cache of ${this.capacity}`,
      );
    cur.committed += n;
    cur.lastTokens = 0;
  }
}
