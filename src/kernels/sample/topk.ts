import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import { allowedTokens, gumbelKey, gumbelScore, type SampleOptions } from './gumbel.js';

/** Sampling settings of one ranking: the sampler's options and its user seed (u32). */
export type RankCall = SampleOptions & {
  readonly seed: number;
  /**
   * Greedy ranking only: weigh the children by log-softmax(sharpen · ℓ) (default 1, the draft's
   * own distribution; see {@link GREEDY_TREE_SHARPEN}). The children and their order do not
   * depend on it.
   */
  readonly sharpen?: number;
};

/**
 * Threads per workgroup: the threshold pass sums exactly as the sampler does (sample.wgsl's 256
 * threads, same order); the chunk and merge passes use 64, fewer idle threads per reduction.
 */
const WG = { threshold: 256, ranks: 64 } as const;
/** Most children per row {@link TopKChildren} returns. */
export const TOPK_MAX = 8;
/**
 * Tokens per chunk workgroup of {@link TopKChildren}: 2048 when ranking children (their log weights
 * sum exp over the chunks, so the chunking is part of their bits), 256 in sampler mode, whose ids
 * do not depend on it (the best score, ties to the lower id): a 150k vocabulary is then ~600
 * workgroups of 4 loads per thread, not 75 of 32 (each a round trip to memory on a GPU).
 */
function chunkOf(ids: boolean): number {
  return ids ? 256 : 2048;
}
/** Words of one chunk's record in the scratch: KMAX (score, id) pairs, then (max, sum). */
const PART_WORDS = 2 * TOPK_MAX + 2;
/** The token of an absent child (a row with fewer than k allowed tokens). */
const NONE = 0xffffffff;

const Params = defineUniforms('Params', {
  R: 'u32',
  V: 'u32',
  k: 'u32',
  chunks: 'u32',
  seed: 'u32',
  invT: 'f32',
  topK: 'u32',
  topP: 'f32',
  minP: 'f32',
  sharpen: 'f32',
});

/**
 * How much a draft head's greedy trees sharpen its distribution to weigh their children
 * ({@link RankCall.sharpen}): log weights are log-softmax(c · ℓ), c = 4 (temperature 0.25). Greedy verification accepts a child
 * only where the target's argmax is the draft's, which a peaked draft distribution predicts better
 * than its own softmax: best-first trees then go deep on confident paths instead of wide on
 * unlikely siblings. Measured on the demo pair (`npm run bench:spec -- --cpu --budgets 16
 * --modes greedy`, six held-out prompts × 64 tokens), tokens per target pass for the draft model
 * and the draft head: c = 1 3.12 and 3.76; c = 3 3.83 and 6.33; c = 4 3.58 and 6.52; c = 5 3.61
 * and 6.52; c = 10 3.15 and 5.86. It changes which nodes a tree keeps, never a child's token or
 * order, so every drafter stays lossless; sampling (T > 0) weighs at c = 1. Deeper trees cost more
 * draft passes: the draft model's device steps went from 4.35 to 9.10 draft passes per step at
 * budget 16, so its modelled speed-up on a bandwidth-bound GPU fell (1.77x to 1.48x) while the
 * head's rose; drafters other than heads weigh at c = 1.
 */
export const GREEDY_TREE_SHARPEN = 4;

/** One child a drafter offers at a node: a token and the log of its ranking weight. */
export interface RankedChild {
  readonly token: number;
  /** log of the child's weight in (0, 1]; summed along a path it orders best-first trees. */
  readonly logWeight: number;
}

/**
 * The k best children of R rows, row after row: [R, k] tokens (-1 past a row's allowed tokens,
 * which always come first) and their log weights (0 where the token is -1).
 */
export interface Children {
  readonly tokens: Int32Array;
  readonly logWeights: Float32Array;
}

/**
 * The reference of {@link TopKChildren}: the `k` best children of one logits row, best first.
 * Scores are s_v = ℓ_v when greedy (temperature ≤ 0), else ℓ_v · (1/T) + G(seed, position, v) in
 * f32 (the score sampleRef maximises) over the tokens {@link allowedTokens} keeps, -inf elsewhere;
 * the k best finite scores, ties to the lower id; weight min(0, c·(s - M) - log Σ exp(c·(s_v - M)))
 * over the finite scores (M the largest; c = `call.sharpen` when greedy, else 1), in f64.
 */
export function childrenRef(
  logits: ArrayLike<number>,
  position: number,
  call: RankCall,
  k: number,
): RankedChild[] {
  const V = logits.length;
  const score = new Float64Array(V).fill(Number.NEGATIVE_INFINITY);
  if (call.temperature <= 0) {
    for (let v = 0; v < V; v++) score[v] = logits[v]!;
  } else {
    const invT = Math.fround(1 / call.temperature);
    const ok = allowedTokens(logits, call);
    const key = gumbelKey(call.seed, position);
    for (let v = 0; v < V; v++) if (ok[v]) score[v] = gumbelScore(logits[v]!, invT, key, v);
  }
  const c = call.temperature <= 0 ? sharpenOf(call) : 1;
  let m = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < V; v++) m = Math.max(m, score[v]!);
  let z = 0;
  for (let v = 0; v < V; v++) if (score[v]! > Number.NEGATIVE_INFINITY) z += Math.exp(c * (score[v]! - m));
  // Partial selection of the k best, ties to the lower id (as argmax and sampleRef break them).
  const best: number[] = [];
  for (let v = 0; v < V; v++) {
    if (score[v] === Number.NEGATIVE_INFINITY) continue;
    let at = best.length;
    while (at > 0 && score[best[at - 1]!]! < score[v]!) at--;
    if (at < k) {
      best.splice(at, 0, v);
      if (best.length > k) best.pop();
    }
  }
  return best.map((token) => ({ token, logWeight: Math.min(0, c * (score[token]! - m) - Math.log(z)) }));
}

/** A call's greedy sharpening, checked: a finite number > 0 (default 1). */
function sharpenOf(call: RankCall): number {
  const c = call.sharpen ?? 1;
  if (!(c > 0 && Number.isFinite(c)))
    throw new InvalidInputError(`tree ranking: sharpen must be a finite number > 0, got ${c}`);
  return c;
}

/** Per-row child lists as {@link Children} of `k` per row (token -1, weight 0 where a list is short). */
export function packChildren(lists: readonly (readonly RankedChild[])[], k: number): Children {
  const tokens = new Int32Array(lists.length * k).fill(-1);
  const logWeights = new Float32Array(lists.length * k);
  lists.forEach((list, r) => {
    for (const [j, c] of list.slice(0, k).entries()) {
      tokens[r * k + j] = c.token;
      logWeights[r * k + j] = c.logWeight;
    }
  });
  return { tokens, logWeights };
}

/** The children of one row of {@link Children} (k per row) as a list, best first. */
export function childrenOfRow(c: Children, row: number, k: number): RankedChild[] {
  const out: RankedChild[] = [];
  for (let j = 0; j < k && c.tokens[row * k + j]! >= 0; j++)
    out.push({ token: c.tokens[row * k + j]!, logWeight: c.logWeights[row * k + j]! });
  return out;
}

/** {@link Children} from the kernel's output words [R, k, 2] (token, log-weight bits). */
export function unpackChildren(words: Uint32Array, rows: number, k: number): Children {
  const n = rows * k;
  if (words.length < 2 * n)
    throw new InvalidInputError(`unpackChildren: ${words.length} words, need ${2 * n}`);
  const tokens = new Int32Array(n);
  const logWeights = new Float32Array(n);
  const bits = new Float32Array(words.buffer, words.byteOffset, 2 * n);
  for (let i = 0; i < n; i++) {
    const t = words[2 * i]!;
    tokens[i] = t === NONE ? -1 : t;
    logWeights[i] = bits[2 * i + 1]!;
  }
  return { tokens, logWeights };
}

type Stage = 'threshold' | 'chunk' | 'chunk-greedy' | 'merge';

function topkWgsl(stage: Stage, ids: boolean): WgslVariant {
  return wgslVariant(shaders.topk, Params, {
    WG: stage === 'threshold' ? WG.threshold : WG.ranks,
    KMAX: TOPK_MAX,
    CHUNK: chunkOf(ids),
    THRESHOLD: stage === 'threshold',
    CHUNK_PASS: stage === 'chunk' || stage === 'chunk-greedy',
    ROWS: stage !== 'merge',
    GREEDY: stage === 'chunk-greedy',
    SAMPLE: ids,
  });
}

const STAGES: readonly Stage[] = ['threshold', 'chunk', 'chunk-greedy', 'merge'];

/** Static options of a {@link TopKChildren}. */
export interface TopKOptions {
  /** Vocabulary size (columns of the logits). */
  vocab: number;
  /** Most rows one call ranks (sizes the scratch). */
  maxRows: number;
  /**
   * Sampler mode (see SplitSampler in sample.ts): row r ranks logits row r, `picks` is positions
   * [R] u32 and `out` receives the best child's id [R] u32 (k = 1); no log weights.
   */
  ids?: boolean;
}

/**
 * The k (≤ {@link TOPK_MAX}) best children of chosen logits rows on the GPU, exactly as
 * {@link childrenRef} ranks them (topk.wgsl): a threshold pass per row finds the filters' allowed
 * set when sampling with top-k / top-p / min-p, chunk workgroups of 2048 tokens (256 in sampler
 * mode) each emit their top-k and (max, Σ exp) of the scores, and one merge workgroup per row
 * combines them into k (token u32, log weight f32) pairs: 8 bytes per child, so the CPU never
 * reads a logits row.
 */
export class TopKChildren {
  private readonly pipelines: Record<Stage, GPUComputePipeline>;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly chunks: number;
  private readonly thr: GPUBuffer; // [maxRows] f32 each row's filter threshold
  private readonly parts: GPUBuffer; // [maxRows, chunks, 2k + 2] u32 the chunks' top-k and (max, sum)

  /** Checks the options, gets the pipelines (compiled on first use, see {@link TopKChildren.prepare}) and makes the scratch. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: TopKOptions,
  ) {
    const { vocab, maxRows } = options;
    if (!Number.isInteger(vocab) || vocab < 1)
      throw new InvalidInputError(`TopKChildren: vocab must be a positive integer, got ${vocab}`);
    if (!Number.isInteger(maxRows) || maxRows < 1)
      throw new InvalidInputError(`TopKChildren: maxRows must be a positive integer, got ${maxRows}`);
    const ids = options.ids ?? false;
    this.pipelines = {
      threshold: ctx.pipelines.get('topk', ...topkWgsl('threshold', ids)),
      chunk: ctx.pipelines.get('topk', ...topkWgsl('chunk', ids)),
      'chunk-greedy': ctx.pipelines.get('topk', ...topkWgsl('chunk-greedy', ids)),
      merge: ctx.pipelines.get('topk', ...topkWgsl('merge', ids)),
    };
    this.uniform = new UniformSlot(ctx, Params, 'topk-params');
    this.chunks = Math.ceil(vocab / chunkOf(options.ids ?? false));
    this.thr = createBuffer(ctx, maxRows * 4, 'topk-thresholds');
    this.parts = createBuffer(ctx, maxRows * this.chunks * PART_WORDS * 4, 'topk-parts');
  }

  /** Compiles the pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, ids = false): Promise<void> {
    await Promise.all(STAGES.map((s) => ctx.pipelines.prepare('topk', ...topkWgsl(s, ids))));
  }

  /**
   * Encodes the k best children of `rows` rows. logits: [*, vocab] f32; picks: [rows, 2] u32, per
   * row the logits row to rank and the absolute position of its children (the noise key); out:
   * [rows, k, 2] u32 (token or 0xffffffff, log-weight bits), see {@link unpackChildren}. Greedy
   * when `call.temperature` ≤ 0.
   */
  encode(
    pass: GPUComputePassEncoder,
    logits: GPUBuffer,
    picks: GPUBuffer,
    out: GPUBuffer,
    rows: number,
    k: number,
    call: RankCall,
  ): void {
    const V = this.options.vocab;
    if (!Number.isInteger(rows) || rows < 1 || rows > this.options.maxRows)
      throw new InvalidInputError(`TopKChildren: rows must be 1..${this.options.maxRows}, got ${rows}`);
    const ids = this.options.ids ?? false;
    if (!Number.isInteger(k) || k < 1 || k > (ids ? 1 : TOPK_MAX))
      throw new InvalidInputError(`TopKChildren: k must be 1..${ids ? 1 : TOPK_MAX}, got ${k}`);
    const need: [string, GPUBuffer, number][] = [
      ['logits', logits, (ids ? rows : 1) * V * 4],
      ['picks', picks, rows * (ids ? 4 : 8)],
      ['out', out, rows * (ids ? 4 : k * 8)],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`TopKChildren: ${name} holds ${b.size} bytes, need ${bytes}`);
    const greedy = !(call.temperature > 0);
    const topK = call.topK ?? 0;
    const topP = call.topP ?? 1;
    const minP = call.minP ?? 0;
    if (!Number.isInteger(topK) || topK < 0)
      throw new InvalidInputError(`TopKChildren: topK must be ≥ 0, got ${topK}`);
    if (!(topP > 0 && topP <= 1))
      throw new InvalidInputError(`TopKChildren: topP must be in (0, 1], got ${topP}`);
    if (!(minP >= 0 && minP <= 1))
      throw new InvalidInputError(`TopKChildren: minP must be in [0, 1], got ${minP}`);
    this.uniform.write({
      R: rows,
      V,
      k,
      chunks: this.chunks,
      seed: call.seed >>> 0,
      invT: greedy ? 0 : Math.fround(1 / call.temperature),
      topK,
      topP,
      minP,
      sharpen: greedy ? sharpenOf(call) : 1,
    });
    const u = this.uniform.buffer;
    const maxDim = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    const { pipelines: p, binds, thr, parts } = this;
    // The threshold pass only where a filter is on: the chunk pass reads no threshold otherwise.
    if (!greedy && (topK > 0 || topP < 1 || minP > 0)) {
      pass.setPipeline(p.threshold);
      pass.setBindGroup(0, binds.get(p.threshold, [u, logits, picks, thr]));
      this.ctx.counter.dispatch(pass, ...grid(rows, maxDim));
    }
    const chunk = greedy ? p['chunk-greedy'] : p.chunk;
    pass.setPipeline(chunk);
    pass.setBindGroup(
      0,
      binds.get(chunk, greedy ? [u, logits, picks, parts] : [u, logits, picks, thr, parts]),
    );
    this.ctx.counter.dispatch(pass, ...grid(rows * this.chunks, maxDim));
    pass.setPipeline(p.merge);
    pass.setBindGroup(0, binds.get(p.merge, [u, parts, out]));
    this.ctx.counter.dispatch(pass, ...grid(rows, maxDim));
  }

  destroy(): void {
    this.uniform.destroy();
    this.thr.destroy();
    this.parts.destroy();
  }
}
