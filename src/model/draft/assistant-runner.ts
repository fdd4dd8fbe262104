// Gemma 4's assistant drafter as a ModelRunner (see assistant.ts for the architecture): the
// entries ModelDrafter feeds it, their input hiddens (the target's features or their parents'
// outputs), their anchors, and the rows a forward must compute. It reads its target through an
// AssistantTarget: the reference runner's (here) or the GPU runner's (assistant-gpu.ts).
import { InvalidInputError } from '../../errors.js';
import { sampleRef } from '../../kernels/sample/gumbel.js';
import type { Children } from '../../kernels/sample/topk.js';
import { rmsNorm } from '../blocks/ops.js';
import { ReferenceRunner, rankScoredRows, scoredRows } from '../reference/reference.js';
import type { ForwardInput, ModelRunner, RankSpec, SamplerSpec } from '../runner.js';
import { layerAttention, type ModelSpec } from '../spec/spec.js';
import { chainParents, draftTree } from '../tree.js';
import { type Assistant, type AssistantTarget, assistantSlots, assistantStep } from './assistant.js';

/** The reference runner as an {@link AssistantTarget}: its cache and embedding where they lie. */
export function referenceTarget(target: ReferenceRunner): AssistantTarget {
  const Hb = target.spec.hidden;
  const scale = Math.fround(Math.sqrt(Hb));
  return {
    spec: target.spec,
    get kvLength() {
      return target.kvLength;
    },
    features: (from, to) => target.features(from, to),
    async embedRows(ids) {
      const out = new Float32Array(ids.length * Hb);
      const embed = target.weights.embed;
      ids.forEach((id, r) => {
        for (let i = 0; i < Hb; i++) out[r * Hb + i] = Math.fround(embed[id * Hb + i]! * scale);
      });
      return out;
    },
    kvRows: async () => target.cache,
    dispose() {},
  };
}

/**
 * The assistant as a runner beside `runner` with `capacity` entries: over the reference runner's
 * cache, or (lazily loaded) the GPU runner's, which must keep its features. Throws
 * InvalidInputError for another runner.
 */
export async function openAssistantRunner(
  assistant: Assistant,
  runner: ModelRunner,
  capacity: number,
): Promise<AssistantRunner> {
  const target =
    runner instanceof ReferenceRunner
      ? referenceTarget(runner)
      : await (await import('./assistant-gpu.js')).gpuTarget(runner, assistant.name);
  return new AssistantRunner(assistant, target, capacity);
}

export class AssistantRunner implements ModelRunner {
  readonly spec: ModelSpec;
  readonly capacity: number;
  private length = 0;
  /** [capacity, Hb] each slot's next hidden (post_projection), and its anchor (-1: not computed). */
  private readonly outputs: Float32Array;
  private readonly anchors: Int32Array;
  private lastTokens = 0;
  /** Logits [R, V] of the rows the last forward scored. */
  private scored: Float32Array = new Float32Array(0);
  /** Rows scored with no input hidden (the target had not scored their context): uniform logits. */
  blindRows = 0;

  /** Over `target` (see {@link openAssistantRunner}), with `capacity` entries (the target's context). */
  constructor(
    readonly assistant: Assistant,
    private readonly target: AssistantTarget,
    capacity: number,
  ) {
    this.spec = { ...assistant.spec, vocabSize: target.spec.vocabSize };
    this.capacity = capacity;
    this.outputs = new Float32Array(capacity * assistant.backbone);
    this.anchors = new Int32Array(capacity).fill(-1);
  }

  get kvLength(): number {
    return this.length;
  }

  /** Parameters one draft step reads per row (f32): its layers, projections and head. */
  get weightBytesPerPass(): number {
    const a = this.assistant;
    const layers = a.layers.reduce(
      (n, w) => n + w.q.length + w.o.length + w.gate.length + w.up.length + w.down.length,
      0,
    );
    const head = a.masked
      ? a.masked.centroids.length + (a.lm.length / a.masked.centroids.length) * a.masked.topK * a.spec.hidden
      : a.lm.length;
    return (layers + a.pre.length + a.post.length + head) * 4;
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    if (input.masks) throw new InvalidInputError('draft assistant: constrained rows are not supported');
    const { tokens } = input;
    const parents = input.parents ?? chainParents(tokens.length);
    const T = tokens.length;
    const V = this.spec.vocabSize;
    if (T < 1 || parents.length !== T)
      throw new InvalidInputError(
        `forward: tokens ${T}, parents ${parents.length}: need equal, non-zero lengths`,
      );
    tokens.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new InvalidInputError(`forward: tokens[${i}] = ${t} not in [0, ${V})`);
    });
    const start = this.length;
    if (start + T > this.capacity)
      throw new InvalidInputError(`forward: ${start} + ${T} tokens exceed the capacity ${this.capacity}`);
    const tree = draftTree(parents);
    const positions = tree.depth.map((d) => start + d);
    const known = this.target.kvLength;
    const fromTarget = positions.map((p) => p >= 1 && p - 1 < known);
    // The rows to compute: the scored ones, the last, and every row one of those chains from.
    const picked = rows === 'last' ? [T - 1] : tokens.map((_, i) => i);
    const needed = new Set<number>();
    for (const i of new Set([...picked, T - 1]))
      for (let a = i; a >= 0 && !needed.has(a); a = fromTarget[a] ? -1 : parents[a]!) needed.add(a);
    const Hb = this.assistant.backbone;
    const hidden = new Float32Array(T * Hb);
    const anchor = new Int32Array(T).fill(-1);
    // Rows in order: a parent precedes its children (depth-first order).
    const ready = tokens.map(() => false);
    const pending = [...needed].sort((x, y) => x - y);
    const targetRows = pending.filter((i) => fromTarget[i]);
    if (targetRows.length > 0) {
      const lo = Math.min(...targetRows.map((i) => positions[i]! - 1));
      const hi = Math.max(...targetRows.map((i) => positions[i]! - 1));
      const f = await this.target.features(lo, hi + 1);
      const normed = new Float32Array(f.length);
      rmsNorm(f, Hb, this.assistant.targetNorm, this.target.spec.rmsEps, normed);
      for (const i of targetRows) {
        hidden.set(normed.subarray((positions[i]! - 1 - lo) * Hb, (positions[i]! - lo) * Hb), i * Hb);
        anchor[i] = positions[i]!;
        ready[i] = true;
      }
    }
    // Roots below the committed entries chain from the entry at p - 1.
    for (const i of pending)
      if (!ready[i] && parents[i]! < 0 && positions[i]! >= 1 && this.anchors[positions[i]! - 1]! >= 0) {
        const p = positions[i]! - 1;
        hidden.set(this.outputs.subarray(p * Hb, (p + 1) * Hb), i * Hb);
        anchor[i] = this.anchors[p]!;
        ready[i] = true;
      }
    // What the rows read of the target, once: their embeddings, and the K/V each source layer's
    // rows attend (a row's anchor is its own, its root's or the committed entry's it chains from).
    const rowAnchors = pending.map((i) => (ready[i] ? anchor[i]! : this.rootAnchor(i, parents, anchor)));
    const embedded = await this.target.embedRows(pending.map((i) => tokens[i]!));
    const kv = await this.target.kvRows(this.kvRanges(rowAnchors.filter((p) => p >= 1)));
    const embeddedRow = new Map(pending.map((i, r) => [i, r]));
    // Waves: the rows whose inputs are ready, then their children.
    const computed = tokens.map(() => false);
    const logits = new Float32Array(T * V);
    const next = new Float32Array(T * Hb);
    for (let wave = pending.filter((i) => ready[i]); wave.length > 0; ) {
      const step = assistantStep(
        this.assistant,
        kv,
        gatherRows(
          embedded,
          Hb,
          wave.map((i) => embeddedRow.get(i)!),
        ),
        gatherRows(hidden, Hb, wave),
        wave.map((i) => anchor[i]!),
      );
      wave.forEach((i, r) => {
        logits.set(step.logits.subarray(r * V, (r + 1) * V), i * V);
        next.set(step.next.subarray(r * Hb, (r + 1) * Hb), i * Hb);
        computed[i] = true;
      });
      const done = new Set(wave);
      wave = pending.filter((i) => !ready[i] && done.has(parents[i]!));
      for (const i of wave) {
        hidden.set(next.subarray(parents[i]! * Hb, (parents[i]! + 1) * Hb), i * Hb);
        anchor[i] = anchor[parents[i]!]!;
        ready[i] = true;
      }
    }
    tokens.forEach((_, i) => {
      const slot = start + i;
      this.anchors[slot] = computed[i] ? anchor[i]! : -1;
      if (computed[i]) this.outputs.set(next.subarray(i * Hb, (i + 1) * Hb), slot * Hb);
    });
    this.blindRows += picked.filter((i) => !computed[i]).length;
    this.lastTokens = T;
    this.scored = gatherRows(logits, V, picked);
    return Int32Array.from(picked, (i, r) =>
      sampleRef(this.scored.subarray(r * V, (r + 1) * V), sampler.seed, positions[i]! + 1, sampler),
    );
  }

  /** The anchor a row not yet ready takes from its nearest ready ancestor (-1: none). */
  private rootAnchor(i: number, parents: readonly number[], anchor: Int32Array): number {
    let a = i;
    while (a >= 0 && anchor[a]! < 0) a = parents[a]!;
    return a < 0 ? -1 : anchor[a]!;
  }

  /** Per target layer the assistant reads, the committed slots rows anchored at `anchors` attend. */
  private kvRanges(anchors: readonly number[]): Map<number, readonly [number, number]> {
    const ranges = new Map<number, readonly [number, number]>();
    if (anchors.length === 0) return ranges;
    const lo = Math.min(...anchors);
    const hi = Math.max(...anchors);
    this.assistant.sources.forEach((src, l) => {
      const { window } = layerAttention(this.assistant.spec, l);
      const [from] = assistantSlots(window, lo);
      const was = ranges.get(src);
      ranges.set(src, [Math.min(from, was?.[0] ?? from), hi]);
    });
    return ranges;
  }

  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    return scoredRows(this.scored, this.spec.vocabSize, rows);
  }

  async lastChildren(
    rows: readonly number[],
    positions: readonly number[],
    sampler: RankSpec,
    k: number,
  ): Promise<Children> {
    return rankScoredRows(this.scored, this.spec.vocabSize, rows, positions, sampler, k);
  }

  commit(path: readonly number[]): void {
    for (const i of path)
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    const Hb = this.assistant.backbone;
    const start = this.length;
    const rows = path.map((i) => this.outputs.slice((start + i) * Hb, (start + i + 1) * Hb));
    const anchors = path.map((i) => this.anchors[start + i]!);
    rows.forEach((row, d) => {
      this.outputs.set(row, (start + d) * Hb);
      this.anchors[start + d] = anchors[d]!;
    });
    this.length += path.length;
    this.lastTokens = 0;
  }

  trim(length: number): void {
    this.length = Math.min(length, this.length);
    this.lastTokens = 0;
  }

  /** Frees the target reader's buffers; the target is not the assistant's to dispose. */
  dispose(): void {
    this.target.dispose();
  }
}

/** Rows `rows` of a [*, width] array, in that order. */
function gatherRows(x: Float32Array, width: number, rows: readonly number[]): Float32Array {
  const out = new Float32Array(rows.length * width);
  rows.forEach((i, r) => {
    out.set(x.subarray(i * width, (i + 1) * width), r * width);
  });
  return out;
}
