import { InvalidInputError } from '../errors.js';
import { linearsByInput } from '../formats/layout.js';
import { deriveSizes, type ModelSpec, type RopeSpec } from '../formats/spec.js';
import { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';
import type { KvFormat } from '../kernels/kv/kv.js';
import { sampleRef } from '../kernels/sample/gumbel.js';
import { applyMaskRef, maskWordsOf } from '../kernels/sample/mask.js';
import { type Children, childrenRef, packChildren } from '../kernels/sample/topk.js';
import {
  checkFeatureRange,
  type ForwardInput,
  type ModelRunner,
  type RankSpec,
  type SamplerSpec,
} from './runner.js';
import { draftTree, pathTo } from './tree.js';
import { type ModelWeights, readWeights, type WeightSource } from './weights.js';

// The plain-TS reference forward pass: the oracle the GPU forward is tested against. It follows
// Hugging Face's Llama / Qwen2 / Qwen3 modelling code in f32:
//   x = embed[token]
//   per layer: x += o_proj(attention(rope(qk_norm(q)), rope(qk_norm(k)), v)) of rmsnorm(x)
//              x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
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

  constructor(
    readonly layers: number,
    /** kvHeads * headDim: floats per row. */
    readonly rowWidth: number,
    /** Rows per layer. */
    readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new InvalidInputError(`ReferenceKvCache: capacity must be a positive integer, got ${capacity}`);
    for (let l = 0; l < layers; l++) {
      this.keys.push(new Float32Array(capacity * rowWidth));
      this.values.push(new Float32Array(capacity * rowWidth));
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
    const w = this.rowWidth;
    for (const table of [...this.keys, ...this.values]) {
      // Gather first, then write: a destination row may be another path row's source.
      const rows = slots.map((s) => table.slice(s * w, (s + 1) * w));
      rows.forEach((row, d) => {
        table.set(row, (this.committed + d) * w);
      });
    }
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
 * the weights that multiply this input (q, k and v share one; see `linearsByInput`): calibration
 * (`collectHessians` in model/calibrate) reads inputs through it.
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
  /** RoPE inverse frequencies: [headDim / 2]. */
  readonly invFreq: Float32Array;
  /** Called at every block boundary of {@link ReferenceRunner.logits} when set. */
  residualHook: ResidualHook | undefined;
  /** Applied to the input of every `*_proj` linear when set (see {@link LinearInputHook}). */
  linearInput: LinearInputHook | undefined;
  /** How cached keys and values are stored (see {@link ReferenceOptions.kvFormat}). */
  readonly kvFormat: KvFormat;
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
    source: WeightSource,
    options: ReferenceOptions = {},
  ) {
    checkSpec(spec);
    this.weights = readWeights(spec, source);
    this.invFreq = ropeInverseFrequencies(spec.rope, spec.headDim);
    this.kvFormat = options.kvFormat ?? 'f32';
    this.capacity = options.capacity ?? spec.maxPositions;
    this.cache = new ReferenceKvCache(spec.layers, deriveSizes(spec).kvWidth, this.capacity);
    this.featureRows = new Float32Array(this.capacity * spec.hidden);
  }

  get kvLength(): number {
    return this.cache.length;
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
    const I = spec.intermediate;
    const { qWidth, kvWidth } = deriveSizes(spec);
    const x = new Float32Array(T * H); // [T, H] residual stream
    for (let t = 0; t < T; t++) x.set(weights.embed.subarray(tokens[t]! * H, (tokens[t]! + 1) * H), t * H);

    const h = new Float32Array(T * H); // [T, H] normed input of a block
    const q = new Float32Array(T * qWidth); // [T, heads, headDim]
    const k = new Float32Array(T * kvWidth); // [T, kvHeads, headDim]
    const v = new Float32Array(T * kvWidth); // [T, kvHeads, headDim]
    const attn = new Float32Array(T * qWidth); // [T, heads, headDim]
    const proj = new Float32Array(T * H); // [T, H] block output before the residual add
    const gate = new Float32Array(T * I); // [T, I]
    const up = new Float32Array(T * I); // [T, I]

    const input = (a: Float32Array, width: number, linears: readonly string[]) =>
      this.linearInput?.(a, width, linears) ?? a;
    weights.layers.forEach((lw, l) => {
      const names = linearsByInput(l);
      this.residualHook?.input?.(l, x); // steering / measurement: the block's input
      rmsNorm(x, H, lw.inputNorm, spec.rmsEps, h);
      const hq = input(h, H, names.qkv); // q, k and v share one input, as on the GPU
      linear(hq, H, lw.q, qWidth, lw.qBias, q);
      linear(hq, H, lw.k, kvWidth, lw.kBias, k);
      linear(hq, H, lw.v, kvWidth, lw.vBias, v);
      // Qwen3: RMSNorm over each head's headDim values, before RoPE.
      if (lw.qNorm) rmsNorm(q, spec.headDim, lw.qNorm, spec.rmsEps, q);
      if (lw.kNorm) rmsNorm(k, spec.headDim, lw.kNorm, spec.rmsEps, k);
      rope(q, spec.heads, spec.headDim, positions, this.invFreq, spec.rope.layout);
      rope(k, spec.kvHeads, spec.headDim, positions, this.invFreq, spec.rope.layout);
      const keys = cache.keys[l]!;
      const values = cache.values[l]!;
      if (this.kvFormat === 'f16') {
        roundToHalves(k);
        roundToHalves(v);
      }
      for (let t = 0; t < T; t++) {
        keys.set(k.subarray(t * kvWidth, (t + 1) * kvWidth), cacheSlots[t]! * kvWidth);
        values.set(v.subarray(t * kvWidth, (t + 1) * kvWidth), cacheSlots[t]! * kvWidth);
      }
      for (let t = 0; t < T; t++)
        attend(spec, q.subarray(t * qWidth, (t + 1) * qWidth), keys, values, attended[t]!, attn, t * qWidth);
      linear(input(attn, qWidth, names.o), qWidth, lw.o, H, undefined, proj);
      addInto(x, proj);

      rmsNorm(x, H, lw.postNorm, spec.rmsEps, h);
      const hm = input(h, H, names.gateUp);
      linear(hm, H, lw.gate, I, undefined, gate);
      linear(hm, H, lw.up, I, undefined, up);
      for (let i = 0; i < gate.length; i++) {
        const g = gate[i]!;
        // SiLU in f32 as PyTorch rounds it, then the product rounded again.
        gate[i] = Math.fround(g / (1 + Math.exp(-g))) * up[i]!;
      }
      linear(input(gate, I, names.down), I, lw.down, H, undefined, proj);
      addInto(x, proj);
      this.residualHook?.output?.(l, x); // steering / measurement: the block's output
    });

    for (let t = 0; t < T; t++) this.featureRows.set(x.subarray(t * H, (t + 1) * H), cacheSlots[t]! * H);
    rmsNorm(x, H, weights.norm, spec.rmsEps, h);
    const logits = new Float32Array(T * spec.vocabSize); // [T, V]
    linear(h, H, weights.lmHead, spec.vocabSize, undefined, logits);
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

  trim(length: number): void {
    this.cache.trim(length);
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

/** Rounds every value to the nearest IEEE half (ties to even), in place. */
function roundToHalves(x: Float32Array): void {
  for (let i = 0; i < x.length; i++) x[i] = f16BitsToF32(f32ToF16Bits(x[i]!));
}

/** The parent array of a causal chain of `n` tokens: `[-1, 0, 1, ..., n - 2]`. */
export function chainParents(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i - 1);
}

/**
 * RoPE inverse frequencies `[headDim / 2]` as Hugging Face computes them, rounded to f32:
 * `1 / theta^(2i / headDim)`, then Llama 3 scaling (`_compute_llama3_parameters`) when set:
 * wavelengths below `originalMaxPositions / highFreqFactor` are kept, those above
 * `originalMaxPositions / lowFreqFactor` are divided by `factor`, and the band between is
 * interpolated smoothly.
 */
export function ropeInverseFrequencies(rope: RopeSpec, headDim: number): Float32Array {
  const inv = new Float32Array(headDim / 2);
  for (let i = 0; i < inv.length; i++) {
    const f = 1 / rope.theta ** ((2 * i) / headDim);
    const s = rope.scaling;
    if (s === undefined) {
      inv[i] = f;
      continue;
    }
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < s.originalMaxPositions / s.highFreqFactor) inv[i] = f;
    else if (wavelen > s.originalMaxPositions / s.lowFreqFactor) inv[i] = f / s.factor;
    else {
      const smooth =
        (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      inv[i] = ((1 - smooth) * f) / s.factor + smooth * f;
    }
  }
  return inv;
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
}

/**
 * RMSNorm over rows of `width`: `y = x / sqrt(mean(x^2) + eps) * w`, the mean in f64, the normed
 * value rounded to f32 before the weight multiply as Hugging Face does. `out` may alias `x`.
 */
export function rmsNorm(
  x: Float32Array,
  width: number,
  w: Float32Array,
  eps: number,
  out: Float32Array,
): void {
  for (let r = 0; r < x.length / width; r++) {
    const base = r * width;
    let sum = 0;
    for (let i = 0; i < width; i++) sum += x[base + i]! * x[base + i]!;
    const inv = 1 / Math.sqrt(Math.fround(sum / width) + eps);
    for (let i = 0; i < width; i++) out[base + i] = w[i]! * Math.fround(x[base + i]! * inv);
  }
}

/**
 * `out[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o])`: x [T, inDim], W [outDim, inDim], out [T, outDim].
 * Each output is one f64 sum taken in the order i = 0, 1, ..., inDim - 1. The loops walk tiles of 4
 * tokens x 2 outputs so that each value loaded feeds 2 or 4 of the 8 sums, which run side by side;
 * every sum keeps its order, so the result is the same as one dot product at a time, about 3x faster.
 */
export function linear(
  x: Float32Array,
  inDim: number,
  W: Float32Array,
  outDim: number,
  bias: Float32Array | undefined,
  out: Float32Array,
): void {
  const T = x.length / inDim;
  // The bias is added to the f32 product, as PyTorch's addmm rounds before it.
  const put = (t: number, o: number, acc: number) => {
    out[t * outDim + o] = bias ? Math.fround(acc) + bias[o]! : acc;
  };
  for (let o0 = 0; o0 < outDim; o0 += 2) {
    // Past the last output row or token a tile repeats it: the same sum, computed and stored twice.
    const o1 = Math.min(o0 + 1, outDim - 1);
    const w0 = o0 * inDim;
    const w1 = o1 * inDim;
    for (let t0 = 0; t0 < T; t0 += 4) {
      const t1 = Math.min(t0 + 1, T - 1);
      const t2 = Math.min(t0 + 2, T - 1);
      const t3 = Math.min(t0 + 3, T - 1);
      const x0 = t0 * inDim;
      const x1 = t1 * inDim;
      const x2 = t2 * inDim;
      const x3 = t3 * inDim;
      let s00 = 0; // token t0, output o0
      let s01 = 0;
      let s10 = 0;
      let s11 = 0;
      let s20 = 0;
      let s21 = 0;
      let s30 = 0;
      let s31 = 0;
      for (let i = 0; i < inDim; i++) {
        const u = W[w0 + i]!;
        const v = W[w1 + i]!;
        const a = x[x0 + i]!;
        const b = x[x1 + i]!;
        const c = x[x2 + i]!;
        const d = x[x3 + i]!;
        s00 += a * u;
        s01 += a * v;
        s10 += b * u;
        s11 += b * v;
        s20 += c * u;
        s21 += c * v;
        s30 += d * u;
        s31 += d * v;
      }
      put(t0, o0, s00);
      put(t0, o1, s01);
      put(t1, o0, s10);
      put(t1, o1, s11);
      put(t2, o0, s20);
      put(t2, o1, s21);
      put(t3, o0, s30);
      put(t3, o1, s31);
    }
  }
}

/** `x += y`, elementwise in f32. */
export function addInto(x: Float32Array, y: Float32Array): void {
  for (let i = 0; i < x.length; i++) x[i] = x[i]! + y[i]!;
}

/**
 * Rotates x [T, heads, headDim] in place at each token's position. `'half'` pairs dimension i with
 * i + headDim/2 (Hugging Face's rotate_half); `'interleaved'` pairs 2i with 2i + 1. Pair i turns by
 * angle `position * invFreq[i]`, with the angle, cos and sin rounded to f32 as in PyTorch.
 */
export function rope(
  x: Float32Array,
  heads: number,
  headDim: number,
  positions: readonly number[],
  invFreq: Float32Array,
  layout: RopeSpec['layout'],
): void {
  const half = headDim / 2;
  positions.forEach((pos, t) => {
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(pos * invFreq[i]!);
      const c = Math.fround(Math.cos(angle));
      const s = Math.fround(Math.sin(angle));
      for (let hd = 0; hd < heads; hd++) {
        const base = (t * heads + hd) * headDim;
        const a = layout === 'half' ? base + i : base + 2 * i;
        const b = layout === 'half' ? base + i + half : base + 2 * i + 1;
        const xa = x[a]!;
        const xb = x[b]!;
        x[a] = xa * c - xb * s;
        x[b] = xb * c + xa * s;
      }
    }
  });
}

/**
 * Scaled dot-product attention of one token's queries q [heads, headDim] over the cache rows at
 * `slots` (keys/values [capacity, kvHeads, headDim]); query head h reads KV head
 * `floor(h / groupSize)` (GQA). Scores, softmax and the weighted sum are in f64; the result
 * [heads, headDim] is written to `out` at `outBase`.
 */
export function attend(
  spec: ModelSpec,
  q: Float32Array,
  keys: Float32Array,
  values: Float32Array,
  slots: readonly number[],
  out: Float32Array,
  outBase: number,
): void {
  const { kvWidth, groupSize } = deriveSizes(spec);
  const D = spec.headDim;
  const scale = 1 / Math.sqrt(D);
  const scores = new Float64Array(slots.length);
  const acc = new Float64Array(D);
  for (let h = 0; h < spec.heads; h++) {
    const kvOff = Math.floor(h / groupSize) * D;
    let max = Number.NEGATIVE_INFINITY;
    slots.forEach((slot, j) => {
      const kBase = slot * kvWidth + kvOff;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[h * D + d]! * keys[kBase + d]!;
      scores[j] = dot * scale;
      if (scores[j]! > max) max = scores[j]!;
    });
    let denom = 0;
    for (let j = 0; j < slots.length; j++) {
      scores[j] = Math.exp(scores[j]! - max);
      denom += scores[j]!;
    }
    acc.fill(0);
    slots.forEach((slot, j) => {
      const vBase = slot * kvWidth + kvOff;
      const p = scores[j]! / denom;
      for (let d = 0; d < D; d++) acc[d] = acc[d]! + p * values[vBase + d]!;
    });
    for (let d = 0; d < D; d++) out[outBase + h * D + d] = acc[d]!;
  }
}
