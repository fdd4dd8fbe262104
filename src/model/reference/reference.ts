import { InvalidInputError } from '../../errors.js';
import type { KvFormat } from '../../kernels/kv/kv.js';
import { sampleRef } from '../../kernels/sample/gumbel.js';
import { applyMaskRef, maskWordsOf } from '../../kernels/sample/mask.js';
import { type Children, childrenRef, packChildren } from '../../kernels/sample/topk.js';
import { type Block, layerEdges } from '../blocks/blocks.js';
import { linear, rmsNorm, ropeInverseFrequencies, softcapRef } from '../blocks/ops.js';
import type { RefPass } from '../blocks/pass.js';
import { RecurrentStates } from '../blocks/recurrent-state.js';
import { modelBlocks } from '../families/index.js';
import {
  checkFeatureRange,
  type ForwardInput,
  type ModelRunner,
  type RankSpec,
  type SamplerSpec,
} from '../runner.js';
import {
  deriveSizes,
  isRecurrent,
  kvSourceLayer,
  layerAttention,
  layerSpec,
  type ModelSpec,
} from '../spec/spec.js';
import { chainParents, draftTree, pathTo } from '../tree.js';
import { type ModelWeights, type NamedTensors, readWeights } from '../weights.js';

// The plain-TS reference forward pass: the oracle the GPU forward is tested against. It runs the
// model's blocks (model/blocks/: the same list the GPU runner encodes), following Hugging Face's
// Llama / Qwen2 / Qwen3 modelling code in f32:
//   x = embed[token]
//   per block: the attention block x += o_proj(attention(rope(qk_norm(q)), rope(qk_norm(k)), v)) of
//              rmsnorm(x); the MLP block x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
//   logits = lm_head(rmsnorm(x))
// Numerics: every tensor is stored as f32 (Float32Array), so each op's result is rounded to f32 as
// in an f32 PyTorch run; inside an op, dot products, RMSNorm means, attention scores, the softmax and
// the weighted sum of values are accumulated in f64 (JS numbers). That is at least as exact as
// PyTorch's f32 reductions, so the reference agrees with Hugging Face to f32 rounding, and it is
// deterministic: a row's result never depends on which other rows share the call (batch invariance).

/**
 * The reference model's KV cache: per layer, keys (after RoPE) and values stored as
 * `[capacity, kvHeads, headDim]`. Rows `[0, length)` are the committed prefix every new token
 * attends to. A forward writes new rows at explicit slots at or after `length` without committing
 * them; {@link ReferenceKvCache.commitPath} then appends the rows of an accepted path (a plain chain
 * or a tree path) at `length, length + 1, ...`, and {@link ReferenceKvCache.trim} rolls back. Keys
 * are cached after RoPE, so a row is only valid at the slot equal to its position: commit paths
 * whose positions are `length + depth`, as tree verification lays them out.
 */
export class ReferenceKvCache {
  /** Per layer, keys after RoPE: [capacity, kvHeads, headDim]. */
  readonly keys: Float32Array[] = [];
  /** Per layer, values: [capacity, kvHeads, headDim]. */
  readonly values: Float32Array[] = [];
  private committed = 0;

  /** Per layer, kvHeads · headDim: floats per row (0 for a layer that holds no cache). */
  readonly rowWidths: readonly number[];

  constructor(
    readonly layers: number,
    /** kvHeads * headDim: floats per row, one for every layer or one per layer. */
    rowWidth: number | readonly number[],
    /** Rows per layer. */
    readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new InvalidInputError(`ReferenceKvCache: capacity must be a positive integer, got ${capacity}`);
    this.rowWidths = typeof rowWidth === 'number' ? Array(layers).fill(rowWidth) : rowWidth;
    for (let l = 0; l < layers; l++) {
      this.keys.push(new Float32Array(capacity * this.rowWidths[l]!));
      this.values.push(new Float32Array(capacity * this.rowWidths[l]!));
    }
  }

  /** Number of committed rows: the prefix new tokens attend to. */
  get length(): number {
    return this.committed;
  }

  /** Drops committed rows past `length` (rollback); the rows' data is left to be overwritten. */
  trim(length: number): void {
    if (!Number.isInteger(length) || length < 0 || length > this.committed)
      throw new InvalidInputError(`ReferenceKvCache.trim: length ${length} not in [0, ${this.committed}]`);
    this.committed = length;
  }

  /**
   * Appends the rows at `slots` (all at or after `length`, distinct) to the committed prefix, in the
   * order given: slot `slots[d]` moves to row `length + d` in every layer, and `length` grows by
   * `slots.length`. For a chain written at `length, length + 1, ...` this only advances `length`.
   */
  commitPath(slots: readonly number[]): void {
    this.checkSlots(slots, 'commitPath');
    const tables = [...this.keys, ...this.values];
    tables.forEach((table, i) => {
      const w = this.rowWidths[i % this.layers]!;
      // Gather first, then write: a destination row may be another path row's source.
      const rows = slots.map((s) => table.slice(s * w, (s + 1) * w));
      rows.forEach((row, d) => {
        table.set(row, (this.committed + d) * w);
      });
    });
    this.committed += slots.length;
  }

  /** Throws unless `slots` are distinct integers in `[length, capacity)`. */
  checkSlots(slots: readonly number[], what: string): void {
    const seen = new Set<number>();
    for (const s of slots) {
      if (!Number.isInteger(s) || s < this.committed || s >= this.capacity || seen.has(s))
        throw new InvalidInputError(
          `ReferenceKvCache.${what}: slot ${s} is repeated or outside [${this.committed}, ${this.capacity})`,
        );
      seen.add(s);
    }
  }
}

/** Options of {@link ReferenceRunner}. */
export interface ReferenceOptions {
  /** KV cache rows; defaults to `spec.maxPositions`. */
  readonly capacity?: number;
  /**
   * `'f16'`: keys and values are rounded to IEEE halves (nearest even) as they enter the cache, as
   * the GPU's f16 cache stores them. Default `'f32'`.
   */
  readonly kvFormat?: KvFormat;
  /** With an integer `kvFormat`: rotate keys per head before rounding, as the GPU does (default true). */
  readonly kvRotate?: boolean;
}

/**
 * Reads or edits the residual stream x [T, H] in place at block boundaries: activation steering
 * (`steerHook` in kernels/steer) and direction measurement (src/steer) plug in here.
 */
export interface ResidualHook {
  /** Block `layer`'s input, before its attention norm. */
  input?(layer: number, x: Float32Array): void;
  /** Block `layer`'s output, after its MLP residual add. */
  output?(layer: number, x: Float32Array): void;
}

/**
 * Replaces the input x [T, width] of every `*_proj` linear before its product (the LM head's input
 * is left alone) and returns the values to multiply by, leaving x unchanged: the W8A8 path's
 * per-token activation rounding (`w8a8Inputs` in model/quantized) plugs in here. `linears` names
 * the weights that multiply this input (q, k and v share one, as each block kind's reference passes
 * them): calibration (`collectHessians` in convert/calibrate.ts) reads inputs through it.
 */
export type LinearInputHook = (x: Float32Array, width: number, linears: readonly string[]) => Float32Array;

/**
 * The plain-TypeScript forward pass of a Llama / Qwen2 / Qwen3 model, exact to f32 rounding of
 * Hugging Face's implementation, with its own {@link ReferenceKvCache}, as a {@link ModelRunner}
 * (CPU, slow, exact). {@link ReferenceRunner.logits} is the forward itself, serving prefill, decode
 * and tree verification, and returns every row's logits; `forward` samples from them as the GPU
 * runner does, and `commit` / `trim` move the cache. It is the oracle the GPU forward is tested
 * against, `--device cpu` in the CLI, and runs a few-million-parameter model at a few tokens per
 * second in Node.
 */
export class ReferenceRunner implements ModelRunner {
  readonly weights: ModelWeights;
  readonly cache: ReferenceKvCache;
  /** Largest number of cached tokens. */
  readonly capacity: number;
  /** Per layer, its RoPE inverse frequencies [rotaryDim / 2] (undefined: the layer has no RoPE). */
  readonly invFreqs: readonly (Float32Array | undefined)[];
  /** Called at every block boundary of {@link ReferenceRunner.logits} when set. */
  residualHook: ResidualHook | undefined;
  /** Applied to the input of every `*_proj` linear when set (see {@link LinearInputHook}). */
  linearInput: LinearInputHook | undefined;
  /** How cached keys and values are stored (see {@link ReferenceOptions.kvFormat}). */
  readonly kvFormat: KvFormat;
  /** Whether an integer cache's keys are rotated (see {@link ReferenceOptions.kvRotate}). */
  readonly kvRotate: boolean;
  /** The model's blocks, in forward order (`modelBlocks`). */
  readonly blocks: readonly Block[];
  /** The recurrent (linear-attention, short-convolution) layers' states (none without such layers). */
  private readonly recurrentStates: RecurrentStates;
  /** Tokens of the last forward, whose rows `commit` may keep. */
  private lastTokens = 0;
  /** Logits [R, vocab] of the rows the last forward scored. */
  private scored: Float32Array = new Float32Array(0);
  /**
   * [capacity, H] the residual stream after the last block (before the final norm) of the token at
   * each cache slot, kept and committed as its K/V rows are: the features a draft head reads
   * (see {@link ModelRunner.features}).
   */
  private readonly featureRows: Float32Array;

  constructor(
    readonly spec: ModelSpec,
    source: NamedTensors,
    options: ReferenceOptions = {},
  ) {
    checkSpec(spec);
    this.blocks = modelBlocks(spec);
    this.weights = readWeights(spec, source);
    this.invFreqs = Array.from({ length: spec.layers }, (_, layer) => {
      const rope = layerAttention(spec, layer).rope;
      return rope && ropeInverseFrequencies(rope, layerSpec(spec, layer).headDim);
    });
    this.kvFormat = options.kvFormat ?? 'f32';
    this.kvRotate = options.kvRotate ?? true;
    this.capacity = options.capacity ?? spec.maxPositions;
    // Per layer its own K/V width (Gemma 4's full layers are wider); none for a KV-shared layer.
    const widths = Array.from({ length: spec.layers }, (_, l) =>
      kvSourceLayer(spec, l) === l ? deriveSizes(layerSpec(spec, l)).kvWidth : 0,
    );
    this.cache = new ReferenceKvCache(spec.layers, widths, this.capacity);
    this.featureRows = new Float32Array(this.capacity * spec.hidden);
    this.recurrentStates = new RecurrentStates();
  }

  get kvLength(): number {
    return this.cache.length;
  }

  /** Whether the model has linear-attention or short-convolution layers (see {@link ModelRunner.recurrent}). */
  get recurrent(): boolean {
    return isRecurrent(this.spec);
  }

  /**
   * The forward pass: runs T new tokens after the cache's committed prefix and returns their logits
   * `[T, V]`. `parents` is the tree in depth-first order (a chain when omitted; see
   * {@link ForwardInput}): node i stands at position `kvLength + depth(i)` and its K/V rows are
   * written at cache slot `kvLength + i` but not committed (follow with {@link ReferenceRunner.commit}).
   * Token i attends to the whole prefix, to its ancestors and to itself.
   */
  logits({ tokens, parents = chainParents(tokens.length) }: ForwardInput): Float32Array {
    const { spec, weights, cache } = this;
    const T = tokens.length;
    if (T < 1 || parents.length !== T)
      throw new InvalidInputError(
        `forward: tokens ${T}, parents ${parents.length}: need equal, non-zero lengths`,
      );
    tokens.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= spec.vocabSize)
        throw new InvalidInputError(`forward: tokens[${i}] = ${t} not in [0, ${spec.vocabSize})`);
    });
    const tree = draftTree(parents);
    const start = cache.length;
    const positions = tree.depth.map((d) => start + d); // RoPE position of each token
    const cacheSlots = tokens.map((_, i) => start + i);
    cache.checkSlots(cacheSlots, 'forward');
    // Cache slots each new token attends to, in slot order for a chain: the whole committed
    // prefix, then its ancestors among the new tokens, then itself.
    const prefix = Array.from({ length: start }, (_, s) => s);
    const attended = tokens.map((_, i) => prefix.concat(pathTo(tree, i).map((j) => cacheSlots[j]!)));

    const H = spec.hidden;
    const x = new Float32Array(T * H); // [T, H] residual stream
    for (let t = 0; t < T; t++) x.set(weights.embed.subarray(tokens[t]! * H, (tokens[t]! + 1) * H), t * H);
    if (spec.embedScale) {
      // Gemma: the row times √H, the scale rounded to f32 first (a buffer of the weights' dtype).
      const scale = Math.fround(Math.sqrt(H));
      for (let i = 0; i < x.length; i++) x[i] = Math.fround(x[i]! * scale);
    }
    const pass: RefPass = {
      spec,
      T,
      x,
      tokens,
      perLayerInputs: undefined,
      positions,
      cacheSlots,
      parents,
      attended,
      invFreq: (layer) => this.invFreqs[layer],
      kvFormat: this.kvFormat,
      kvRotate: this.kvRotate,
      cache,
      recurrent: this.recurrentStates,
      input: (a, width, linears) => this.linearInput?.(a, width, linears) ?? a,
    };
    this.blocks.forEach((block, i) => {
      const edges = layerEdges(this.blocks, i);
      if (edges.first) this.residualHook?.input?.(block.layer, x); // steering / measurement: the layer's input
      weights.blocks[i]!(pass);
      if (edges.last) this.residualHook?.output?.(block.layer, x); // and its output
    });

    const h = new Float32Array(T * H); // [T, H] the final norm's output
    for (let t = 0; t < T; t++) this.featureRows.set(x.subarray(t * H, (t + 1) * H), cacheSlots[t]! * H);
    rmsNorm(x, H, weights.norm, spec.rmsEps, h);
    const logits = new Float32Array(T * spec.vocabSize); // [T, V]
    linear(h, H, weights.lmHead, spec.vocabSize, undefined, logits);
    if (spec.logitSoftcap !== undefined) softcapRef(logits, spec.logitSoftcap);
    this.lastTokens = T;
    this.scored = logits;
    return logits;
  }

  /**
   * Runs {@link ReferenceRunner.logits} and returns, for `rows` ('last' or 'all'), the token the
   * sampler picks after each (see {@link ModelRunner.forward}).
   */
  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    const base = this.kvLength;
    const logits = this.logits(input);
    const T = input.tokens.length;
    const V = this.spec.vocabSize;
    const depth = draftTree(input.parents ?? chainParents(T)).depth;
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    if (rows === 'last') this.scored = logits.slice((T - 1) * V, T * V);
    const W = maskWordsOf(V);
    if (input.masks) {
      if (input.masks.length !== picked.length * W)
        throw new InvalidInputError(
          `forward: masks hold ${input.masks.length} words, need ${picked.length} rows × ${W} (ceil(vocab / 32))`,
        );
      // The scored rows' logits under their masks, as the GPU's mask kernel leaves them.
      if (rows === 'last') applyMaskRef(this.scored, input.masks, V);
      else applyMaskRef(logits, input.masks, V);
    }
    const scoredRow = (i: number) => (rows === 'last' ? this.scored : logits.subarray(i * V, (i + 1) * V));
    // The token after node i stands at position base + depth(i) + 1.
    return Int32Array.from(picked, (i) =>
      sampleRef(scoredRow(i), sampler.seed, base + depth[i]! + 1, sampler),
    );
  }

  /** Logits [R, vocab] of the rows the last forward scored, or of `rows` (see {@link ModelRunner.lastLogits}). */
  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    return scoredRows(this.scored, this.spec.vocabSize, rows);
  }

  /** The k best children of scored rows by the reference ranking (see {@link ModelRunner.lastChildren}). */
  async lastChildren(
    rows: readonly number[],
    positions: readonly number[],
    sampler: RankSpec,
    k: number,
  ): Promise<Children> {
    return rankScoredRows(this.scored, this.spec.vocabSize, rows, positions, sampler, k);
  }

  /**
   * Commits the accepted root-to-node path of the last forward (node indices in path order) to
   * consecutive cache rows and drops the rest of its rows.
   */
  commit(path: readonly number[]): void {
    for (const i of path) {
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    }
    const start = this.cache.length;
    this.cache.commitPath(path.map((i) => start + i));
    if (path.length > 0) this.recurrentStates.commit(path[path.length - 1]!);
    const H = this.spec.hidden;
    const rows = path.map((i) => this.featureRows.slice((start + i) * H, (start + i + 1) * H));
    rows.forEach((row, d) => {
      this.featureRows.set(row, (start + d) * H);
    });
    this.lastTokens = 0;
  }

  /** Committed features [to - from, H] (see {@link ModelRunner.features}). */
  async features(from: number, to: number): Promise<Float32Array> {
    checkFeatureRange(from, to, this.kvLength);
    const H = this.spec.hidden;
    return this.featureRows.slice(from * H, to * H);
  }

  /**
   * Drops committed rows from `length` on. A model with linear-attention or short-convolution layers
   * keeps only the state after its last committed token, so it can drop all rows (length 0) but not
   * some.
   */
  trim(length: number): void {
    if (isRecurrent(this.spec) && length !== 0 && length !== this.cache.length)
      throw new InvalidInputError(
        `trim: a ${this.spec.family} model's recurrent state cannot roll back to ${length} of ${this.cache.length} tokens (only to 0)`,
      );
    this.cache.trim(length);
    if (length === 0) this.recurrentStates.reset();
  }

  dispose(): void {}

  /**
   * Runs `ids` as a chain after the committed prefix, commits them, and returns their logits
   * `[T, V]`. Calling it repeatedly is chunked prefill; on an empty cache it is a prompt's prefill.
   */
  prefill(ids: readonly number[]): Float32Array {
    const logits = this.logits({ tokens: ids });
    this.commit(ids.map((_, i) => i));
    return logits;
  }

  /** Logits `[T, V]` of `ids` run from scratch; the cache is emptied and left holding `ids`. */
  logitsFor(ids: readonly number[]): Float32Array {
    this.trim(0);
    return this.prefill(ids);
  }
}

/**
 * The logits [R, V] a CPU runner scored in its last forward (`scored`), or only `rows` of them, in
 * that order, copied: what {@link ModelRunner.lastLogits} returns.
 */
export function scoredRows(scored: Float32Array, V: number, rows?: readonly number[]): Float32Array {
  if (!rows) return scored.slice();
  const count = scored.length / V;
  const out = new Float32Array(rows.length * V);
  rows.forEach((r, i) => {
    if (!Number.isInteger(r) || r < 0 || r >= count)
      throw new InvalidInputError(`lastLogits: row ${r} is not one of the ${count} scored rows`);
    out.set(scored.subarray(r * V, (r + 1) * V), i * V);
  });
  return out;
}

/** The k best children of scored `rows` by {@link childrenRef}: what {@link ModelRunner.lastChildren} returns. */
export function rankScoredRows(
  scored: Float32Array,
  V: number,
  rows: readonly number[],
  positions: readonly number[],
  sampler: RankSpec,
  k: number,
): Children {
  if (positions.length !== rows.length)
    throw new InvalidInputError(`lastChildren: ${rows.length} rows but ${positions.length} positions`);
  if (!Number.isInteger(k) || k < 1) throw new InvalidInputError(`lastChildren: k must be ≥ 1, got ${k}`);
  const logits = scoredRows(scored, V, rows);
  const lists = rows.map((_, i) =>
    childrenRef(logits.subarray(i * V, (i + 1) * V), positions[i]!, sampler, k),
  );
  return packChildren(lists, k);
}

/** Rejects specs the forward cannot run, naming the field and its value. */
function checkSpec(spec: ModelSpec): void {
  const positive: [string, number][] = [
    ['vocabSize', spec.vocabSize],
    ['hidden', spec.hidden],
    ['intermediate', spec.intermediate],
    ['layers', spec.layers],
    ['heads', spec.heads],
    ['kvHeads', spec.kvHeads],
    ['headDim', spec.headDim],
  ];
  for (const [name, value] of positive)
    if (!Number.isInteger(value) || value < 1)
      throw new InvalidInputError(`ReferenceRunner: spec.${name} must be a positive integer, got ${value}`);
  if (spec.heads % spec.kvHeads !== 0)
    throw new InvalidInputError(
      `ReferenceRunner: heads ${spec.heads} is not a multiple of kvHeads ${spec.kvHeads}`,
    );
  if (spec.headDim % 2 !== 0)
    throw new InvalidInputError(`ReferenceRunner: headDim ${spec.headDim} must be even for RoPE`);
  const kernel = spec.shortConv?.kernel;
  if (
    spec.layerKinds?.includes('shortconv') &&
    !(kernel !== undefined && Number.isInteger(kernel) && kernel >= 2)
  )
    throw new InvalidInputError(
      `ReferenceRunner: short-convolution layers need an integer spec.shortConv.kernel >= 2, got ${kernel}`,
    );
}
