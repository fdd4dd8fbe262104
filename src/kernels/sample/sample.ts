import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';
import type { SampleOptions } from './gumbel.js';
import { TopKChildren } from './topk.js';

const WG = 256;
const Params = defineUniforms('Params', {
  R: 'u32',
  V: 'u32',
  seed: 'u32',
  invT: 'f32',
  topK: 'u32',
  topP: 'f32',
  minP: 'f32',
});
const NoiseParams = defineUniforms('Params', { P: 'u32', V: 'u32', seed: 'u32' });

/** Static options of a {@link Sampler}: the vocabulary size and greedy or Gumbel sampling. */
export interface SamplerOptions {
  /** Vocabulary size (columns of the logits). */
  vocab: number;
  /** Argmax only (ties to the lower id): no noise, no filters. */
  greedy: boolean;
}

/** Per-call sampling settings of {@link Sampler.encode}. */
export interface SamplerCall extends SampleOptions {
  /** User seed (u32) of the Gumbel noise. */
  seed: number;
}

function samplerWgsl(greedy: boolean): WgslVariant {
  return wgslVariant(shaders.sample, Params, { WG, NOISE: false, GREEDY: greedy });
}

/**
 * Chooses one token per logits row on the GPU: greedy argmax or Gumbel-max sampling with
 * temperature / top-k / top-p / min-p (the restricted Gumbel-argmax, see sample.wgsl), with
 * noise G(seed, position, token) bit-identical to gumbel.ts. Writes ids [R] as u32.
 */
export class Sampler {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Checks the options and gets the pipeline (compiled on first use; see {@link Sampler.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly options: SamplerOptions,
  ) {
    if (!Number.isInteger(options.vocab) || options.vocab < 1)
      throw new InvalidInputError(`Sampler: vocab must be a positive integer, got ${options.vocab}`);
    this.pipeline = ctx.pipelines.get('sample', ...samplerWgsl(options.greedy));
    this.uniform = new UniformSlot(ctx, Params, 'sample-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, greedy: boolean): Promise<void> {
    await ctx.pipelines.prepare('sample', ...samplerWgsl(greedy));
  }

  /**
   * Encodes the choice of one token for each of `rows` logits rows. logits: [rows, vocab] f32;
   * positions: [rows] u32 absolute positions (the noise key); ids: [rows] u32, written.
   */
  encode(
    pass: GPUComputePassEncoder,
    logits: GPUBuffer,
    positions: GPUBuffer,
    ids: GPUBuffer,
    rows: number,
    call: SamplerCall,
  ): void {
    const V = this.options.vocab;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`Sampler: rows must be ≥ 1, got ${rows}`);
    if (logits.size < rows * V * 4)
      throw new InvalidInputError(
        `Sampler: logits holds ${logits.size} bytes, need rows*vocab*4 = ${rows * V * 4}`,
      );
    if (positions.size < rows * 4)
      throw new InvalidInputError(`Sampler: positions holds ${positions.size} bytes, need ${rows * 4}`);
    if (ids.size < rows * 4)
      throw new InvalidInputError(`Sampler: ids holds ${ids.size} bytes, need ${rows * 4}`);
    const t = call.temperature;
    if (!this.options.greedy && !(t > 0))
      throw new InvalidInputError(`Sampler: temperature must be > 0 for sampling, got ${t}`);
    const topK = call.topK ?? 0;
    const topP = call.topP ?? 1;
    const minP = call.minP ?? 0;
    if (!Number.isInteger(topK) || topK < 0)
      throw new InvalidInputError(`Sampler: topK must be ≥ 0, got ${topK}`);
    if (!(topP > 0 && topP <= 1)) throw new InvalidInputError(`Sampler: topP must be in (0, 1], got ${topP}`);
    if (!(minP >= 0 && minP <= 1))
      throw new InvalidInputError(`Sampler: minP must be in [0, 1], got ${minP}`);
    this.uniform.write({
      R: rows,
      V,
      seed: call.seed >>> 0,
      invT: this.options.greedy ? 0 : Math.fround(1 / t),
      topK,
      topP,
      minP,
    });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, logits, positions, ids]));
    this.ctx.counter.dispatch(pass, ...grid(rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

/** Static options of a {@link SplitSampler}. */
export interface SplitSamplerOptions {
  /** Vocabulary size (columns of the logits). */
  vocab: number;
  /** Most rows one call samples (sizes the chunks' scratch). */
  maxRows: number;
}

/**
 * The {@link Sampler}'s choice spread over many workgroups per row, for large vocabularies: the
 * best child of each row by the top-k kernels (topk.wgsl in sampler mode). When filtering, one
 * workgroup per row finds the allowed set's logit threshold with the sampler's own filter test;
 * then workgroups of 256 tokens each take their chunk's best score (the logit when greedy, else
 * ℓ·invT + G), and one per row merges them. The same scores, ties to the lower id, and the same
 * allowed set as the restricted Gumbel-argmax (both keep exactly the tokens that pass the filter
 * test): the ids equal {@link Sampler}'s. One difference: a row whose every logit is -inf gets
 * 0xffffffff (no mask leaves such a row).
 */
export class SplitSampler {
  private readonly ranker: TopKChildren;

  /** Checks the options and gets the pipelines (compiled on first use; see {@link SplitSampler.prepare}). */
  constructor(ctx: GpuContext, binds: BindGroupCache, options: SplitSamplerOptions) {
    this.ranker = new TopKChildren(ctx, binds, { ...options, ids: true });
  }

  /** Compiles the pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static prepare(ctx: GpuContext): Promise<void> {
    return TopKChildren.prepare(ctx, true);
  }

  /** As {@link Sampler.encode}; greedy when `call.temperature` ≤ 0. */
  encode(
    pass: GPUComputePassEncoder,
    logits: GPUBuffer,
    positions: GPUBuffer,
    ids: GPUBuffer,
    rows: number,
    call: SamplerCall,
  ): void {
    this.ranker.encode(pass, logits, positions, ids, rows, 1, call);
  }

  destroy(): void {
    this.ranker.destroy();
  }
}

function noiseWgsl(): WgslVariant {
  return wgslVariant(shaders.sample, NoiseParams, { WG, NOISE: true, GREEDY: false });
}

/**
 * The Gumbel noise of every (position, token < vocab) pair, computed on the GPU by the code the
 * sampler uses (the NOISE variant of sample.wgsl): Philox bits, U and G, for the bit-exactness
 * test against gumbel.ts.
 */
export class GumbelNoiseGrid {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof NoiseParams>>;

  /** Gets the pipeline (compiled on first use; see {@link GumbelNoiseGrid.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
  ) {
    this.pipeline = ctx.pipelines.get('sample', ...noiseWgsl());
    this.uniform = new UniformSlot(ctx, NoiseParams, 'noise-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('sample', ...noiseWgsl());
  }

  /**
   * Encodes the noise of `count` positions ([count] u32) × `vocab` tokens with user seed `seed`
   * (u32) into bits [count, vocab] u32, u and g [count, vocab] f32.
   */
  encode(
    pass: GPUComputePassEncoder,
    positions: GPUBuffer,
    out: { bits: GPUBuffer; u: GPUBuffer; g: GPUBuffer },
    count: number,
    vocab: number,
    seed: number,
  ): void {
    const n = count * vocab;
    if (!Number.isInteger(n) || n < 1)
      throw new InvalidInputError(`GumbelNoiseGrid: count ${count} × vocab ${vocab} must be ≥ 1`);
    if (positions.size < count * 4)
      throw new InvalidInputError(
        `GumbelNoiseGrid: positions holds ${positions.size} bytes, need ${count * 4}`,
      );
    for (const [name, b] of Object.entries(out))
      if (b.size < n * 4)
        throw new InvalidInputError(`GumbelNoiseGrid: ${name} holds ${b.size} bytes, need ${n * 4}`);
    this.uniform.write({ P: count, V: vocab, seed: seed >>> 0 });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(
      0,
      this.binds.get(this.pipeline, [this.uniform.buffer, positions, out.bits, out.u, out.g]),
    );
    this.ctx.counter.dispatch(
      pass,
      ...grid(Math.ceil(n / WG), this.ctx.limits.maxComputeWorkgroupsPerDimension),
    );
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

const ProbParams = defineUniforms('Params', { R: 'u32', V: 'u32', invT: 'f32' });

function probWgsl(): WgslVariant {
  return wgslVariant(shaders.sample_prob, ProbParams, { WG });
}

/** Reference of {@link TokenProb}: softmax(ℓ / T)[token] of one row, in f64. */
export function tokenProbRef(logits: ArrayLike<number>, token: number, temperature: number): number {
  let m = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < logits.length; v++) m = Math.max(m, logits[v]!);
  let z = 0;
  for (let v = 0; v < logits.length; v++) z += Math.exp((logits[v]! - m) / temperature);
  return Math.exp((logits[token]! - m) / temperature) / z;
}

/**
 * The probability of one given token per logits row at temperature T (softmax(ℓ / T)[token]) on
 * the GPU (sample_prob.wgsl): logits [R, vocab] f32, tokens [R] u32 → probs [R] f32.
 */
export class TokenProb {
  private readonly pipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof ProbParams>>;

  /** Gets the pipeline for rows of `vocab` logits (see {@link TokenProb.prepare}). */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly vocab: number,
  ) {
    if (!Number.isInteger(vocab) || vocab < 1)
      throw new InvalidInputError(`TokenProb: vocab must be a positive integer, got ${vocab}`);
    this.pipeline = ctx.pipelines.get('sample_prob', ...probWgsl());
    this.uniform = new UniformSlot(ctx, ProbParams, 'sample-prob-params');
  }

  /** Compiles the pipeline ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await ctx.pipelines.prepare('sample_prob', ...probWgsl());
  }

  /** Encodes probs[r] = softmax(logits[r] / temperature)[tokens[r]] for r < rows. */
  encode(
    pass: GPUComputePassEncoder,
    logits: GPUBuffer,
    tokens: GPUBuffer,
    probs: GPUBuffer,
    rows: number,
    temperature: number,
  ): void {
    const V = this.vocab;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidInputError(`TokenProb: rows must be ≥ 1, got ${rows}`);
    if (!(temperature > 0))
      throw new InvalidInputError(`TokenProb: temperature must be > 0, got ${temperature}`);
    const need: [string, GPUBuffer, number][] = [
      ['logits', logits, rows * V * 4],
      ['tokens', tokens, rows * 4],
      ['probs', probs, rows * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`TokenProb: ${name} holds ${b.size} bytes, need ${bytes}`);
    this.uniform.write({ R: rows, V, invT: Math.fround(1 / temperature) });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, this.binds.get(this.pipeline, [this.uniform.buffer, logits, tokens, probs]));
    this.ctx.counter.dispatch(pass, ...grid(rows, this.ctx.limits.maxComputeWorkgroupsPerDimension));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
