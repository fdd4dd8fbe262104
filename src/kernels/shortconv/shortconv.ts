import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders-shortconv.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { checkShortConvShape, type ShortConvShape } from './reference.js';

const WG = 64;
const Params = defineUniforms('Params', { channels: 'u32', maxRows: 'u32' });

function wgsl(shape: ShortConvShape, tree: boolean): WgslVariant {
  return wgslVariant(shaders.shortconv, Params, { WG, K: shape.kernel, TREE: tree });
}

/** Rows of a draft tree the tree form takes: the visibility words span 64 slots. */
const SHORTCONV_MAX_TREE_ROWS = 64;

/**
 * An LFM2 short-convolution layer's mixer on the GPU, from in_proj's rows B | C | x to out_proj's
 * input C ⊙ conv(B ⊙ x), in one dispatch (shortconv.wgsl), with the window of the last K - 1 rows
 * of B ⊙ x carried from pass to pass. Same math as shortConvKernelRef (reference.ts), the oracle.
 * A pass is a chain of T rows following the window, or (with `tree`) a draft tree whose rows each
 * run through their ancestors; T = min(count[0], maxRows) comes from the `count` buffer the runner
 * stages, the grid does not depend on it, and the one uniform is static (written at construction),
 * so encoding writes no buffer. A pass of T rows is bit-identical to any split of it into shorter
 * passes, and a tree's row to its path run as a chain. One instance serves every layer of a shape
 * (weights and windows are passed per encode). One form: the serial and GPU forms are the same.
 */
export class ShortConv {
  private readonly chainPipeline: GPUComputePipeline;
  private readonly treePipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;

  /** Checks the shape, gets both pipelines (see {@link ShortConv.prepare}), writes the uniform. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: ShortConvShape,
    /** Most rows of one pass: every row buffer holds this many, and T is clamped to it. */
    readonly maxRows: number,
  ) {
    checkShortConvShape(shape, 'ShortConv');
    if (!Number.isInteger(maxRows) || maxRows < 1)
      throw new InvalidInputError(`ShortConv: maxRows must be ≥ 1, got ${maxRows}`);
    const groups = Math.ceil(shape.channels / WG);
    if (groups > ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(
        `ShortConv: ${shape.channels} channels need ${groups} workgroups, the device allows ${ctx.limits.maxComputeWorkgroupsPerDimension}`,
      );
    this.chainPipeline = ctx.pipelines.get('shortconv', ...wgsl(shape, false));
    this.treePipeline = ctx.pipelines.get('shortconv', ...wgsl(shape, true));
    this.uniform = new UniformSlot(ctx, Params, 'shortconv-params');
    this.uniform.write({ channels: shape.channels, maxRows });
  }

  /** Compiles both forms ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shape: ShortConvShape): Promise<void> {
    checkShortConvShape(shape, 'ShortConv.prepare');
    for (const tree of [false, true]) await ctx.pipelines.prepare('shortconv', ...wgsl(shape, tree));
  }

  /**
   * Encodes one pass of T = min(count[0], maxRows) rows of one layer. proj: [maxRows, 3H] f32
   * in_proj rows B | C | x; positions: [≥ 1] u32, positions[0] == 0 starts a new sequence (the
   * window taken as zeros); count: [1] u32, T; weight: [H, K] f32; out: [maxRows, H] f32 (rows
   * below T written); from: the window [K - 1, H] before the pass, read (unless fresh); to: where
   * the window after it is written (another buffer: a pass that is never committed leaves `from`
   * as it was). With `tree` (a draft tree of `tree.rows` rows in depth-first order, `tree.vis`
   * their visibility words [rows, 2] as attention reads them), each row runs from `from` through
   * its ancestors and `to` is not written: a commit runs the accepted path as a chain.
   */
  encode(
    pass: GPUComputePassEncoder,
    proj: GPUBuffer,
    positions: GPUBuffer,
    count: GPUBuffer,
    weight: GPUBuffer,
    out: GPUBuffer,
    from: GPUBuffer,
    to: GPUBuffer,
    tree?: { readonly vis: GPUBuffer; readonly rows: number },
  ): void {
    const most = Math.min(this.maxRows, SHORTCONV_MAX_TREE_ROWS);
    if (tree && (!Number.isInteger(tree.rows) || tree.rows < 1 || tree.rows > most))
      throw new InvalidInputError(`ShortConv: a tree of ${tree.rows} rows (1..${most})`);
    if (from === to)
      throw new InvalidInputError('ShortConv: the window is read from one buffer and written to another');
    const { channels: H, kernel: K } = this.shape;
    const R = this.maxRows;
    const need: [string, GPUBuffer, number][] = [
      ['proj', proj, R * 3 * H * 4],
      ['positions', positions, 4],
      ['count', count, 4],
      ['weight', weight, H * K * 4],
      ['out', out, R * H * 4],
      ['from', from, (K - 1) * H * 4],
      ['to', to, (K - 1) * H * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`ShortConv: ${name} holds ${b.size} bytes, need ${bytes}`);
    if (tree && tree.vis.size < tree.rows * 8)
      throw new InvalidInputError(`ShortConv: tree.vis holds ${tree.vis.size} bytes, need ${tree.rows * 8}`);
    // A tree's pass binds its visibility words where a chain's binds the window it writes.
    const pipeline = tree ? this.treePipeline : this.chainPipeline;
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      this.binds.get(pipeline, [
        this.uniform.buffer,
        proj,
        positions,
        count,
        weight,
        from,
        out,
        tree?.vis ?? to,
      ]),
    );
    this.ctx.counter.dispatch(pass, Math.ceil(H / WG));
  }

  destroy(): void {
    this.uniform.destroy();
  }
}
