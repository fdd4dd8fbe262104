import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders-deltanet.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import {
  checkDeltaNetShape,
  type DeltaNetShape,
  type DeltaNetState,
  type DeltaNetWeights,
  deltaNetSizes,
} from './reference.js';

const CONV_WG = 64;
/** One declaration for both kernels (the conv kernel uses channels, row and maxRows). */
const Params = defineUniforms('Params', {
  channels: 'u32',
  row: 'u32',
  keyWidth: 'u32',
  valueWidth: 'u32',
  valueHeads: 'u32',
  groups: 'u32',
  maxRows: 'u32',
  scale: 'f32',
  eps: 'f32',
});

function convWgsl(shape: DeltaNetShape, tree: boolean): WgslVariant {
  return wgslVariant(shaders.deltanet_conv, Params, { WG: CONV_WG, K: shape.convKernel, TREE: tree });
}

/** The rule kernel's workgroup: the power of two ≥ valueDim (wg_sum's tree needs a power of two). */
function ruleWorkgroup(shape: DeltaNetShape): number {
  return 2 ** Math.ceil(Math.log2(shape.valueDim));
}

function ruleWgsl(shape: DeltaNetShape, tree: boolean): WgslVariant {
  return wgslVariant(shaders.deltanet_rule, Params, {
    WG: ruleWorkgroup(shape),
    DK: shape.keyDim,
    DV: shape.valueDim,
    TREE: tree,
  });
}

/** Rows of a draft tree the tree forms take: the visibility words span 64 slots. */
const DELTANET_MAX_TREE_ROWS = 64;

/**
 * A Gated DeltaNet layer's mixer on the GPU (Qwen3.5's linear attention), from the fused input
 * projection's rows to the gated norm's output, in two dispatches: deltanet_conv.wgsl (causal
 * depthwise conv + silu, conv state update) and deltanet_rule.wgsl (gated delta rule, recurrent
 * state update, gated RMSNorm). Same math as deltaNetRef (reference.ts), the oracle. A pass is a
 * chain of T rows following the layer's state; T = min(count[0], maxRows) comes from the `count`
 * buffer the runner stages and the grid does not depend on it, and the one uniform is static
 * (written at construction), so encoding writes no buffer. A pass of T rows is bit-identical to
 * any split of it into shorter passes. One instance serves every layer of a shape (weights and
 * state are passed per encode); it owns the conv output buffer [maxRows, C], which the layers
 * reuse in turn.
 */
export class DeltaNet {
  private readonly convPipeline: GPUComputePipeline;
  private readonly rulePipeline: GPUComputePipeline;
  private readonly treeConvPipeline: GPUComputePipeline;
  private readonly treeRulePipeline: GPUComputePipeline;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  /** [maxRows, C] f32: the conv output u of the last encoded pass (rows below its T). */
  readonly conv: GPUBuffer;

  /** Checks the shape, gets both pipelines (see {@link DeltaNet.prepare}), writes the uniform. */
  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly shape: DeltaNetShape,
    /** Most rows of one pass: every row buffer holds this many, and T is clamped to it. */
    readonly maxRows: number,
  ) {
    checkDeltaNetShape(shape, 'DeltaNet');
    if (!Number.isInteger(maxRows) || maxRows < 1)
      throw new InvalidInputError(`DeltaNet: maxRows must be ≥ 1, got ${maxRows}`);
    const wg = ruleWorkgroup(shape);
    if (wg > ctx.limits.maxComputeInvocationsPerWorkgroup)
      throw new InvalidInputError(
        `DeltaNet: valueDim ${shape.valueDim} needs workgroups of ${wg}, the device allows ${ctx.limits.maxComputeInvocationsPerWorkgroup}`,
      );
    if (shape.valueHeads > ctx.limits.maxComputeWorkgroupsPerDimension)
      throw new InvalidInputError(
        `DeltaNet: valueHeads ${shape.valueHeads} exceeds ${ctx.limits.maxComputeWorkgroupsPerDimension} workgroups`,
      );
    const { keyWidth, valueWidth, channels, row } = deltaNetSizes(shape);
    this.convPipeline = ctx.pipelines.get('deltanet_conv', ...convWgsl(shape, false));
    this.rulePipeline = ctx.pipelines.get('deltanet_rule', ...ruleWgsl(shape, false));
    this.treeConvPipeline = ctx.pipelines.get('deltanet_conv', ...convWgsl(shape, true));
    this.treeRulePipeline = ctx.pipelines.get('deltanet_rule', ...ruleWgsl(shape, true));
    this.uniform = new UniformSlot(ctx, Params, 'deltanet-params');
    this.uniform.write({
      channels,
      row,
      keyWidth,
      valueWidth,
      valueHeads: shape.valueHeads,
      groups: shape.valueHeads / shape.keyHeads,
      maxRows,
      scale: 1 / Math.sqrt(shape.keyDim),
      eps: shape.eps,
    });
    this.conv = createBuffer(ctx, maxRows * channels * 4, 'deltanet-conv');
  }

  /** Compiles both pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext, shape: DeltaNetShape): Promise<void> {
    checkDeltaNetShape(shape, 'DeltaNet.prepare');
    for (const tree of [false, true]) {
      await ctx.pipelines.prepare('deltanet_conv', ...convWgsl(shape, tree));
      await ctx.pipelines.prepare('deltanet_rule', ...ruleWgsl(shape, tree));
    }
  }

  /**
   * Encodes one pass of T = min(count[0], maxRows) rows of one layer. proj: [maxRows, P] f32
   * fused projection rows [q | k | v | z | b | a]; positions: [≥ 1] u32, positions[0] == 0 starts
   * a new sequence (both states taken as zeros); count: [1] u32, T; out: [maxRows, Hv · dv] f32
   * (rows below T written); weights: the layer's; from: the layer's conv [K - 1, C] and recurrent
   * [Hv, dk, dv] state before the pass, read (unless fresh); to: where the state after it is
   * written (other buffers: a pass that is never committed leaves `from` as it was).
   * With `tree` (a draft tree of `tree.rows` rows in depth-first order, `tree.vis` their
   * visibility words [rows, 2] as attention reads them), each row runs from `from` through its
   * ancestors (bit-identical to its path run as a chain) and `to` is not written: a commit runs the
   * accepted path as a chain.
   */
  encode(
    pass: GPUComputePassEncoder,
    proj: GPUBuffer,
    positions: GPUBuffer,
    count: GPUBuffer,
    out: GPUBuffer,
    weights: DeltaNetWeights<GPUBuffer>,
    from: DeltaNetState<GPUBuffer>,
    to: DeltaNetState<GPUBuffer>,
    tree?: { readonly vis: GPUBuffer; readonly rows: number },
  ): void {
    if (
      tree &&
      (!Number.isInteger(tree.rows) ||
        tree.rows < 1 ||
        tree.rows > Math.min(this.maxRows, DELTANET_MAX_TREE_ROWS))
    )
      throw new InvalidInputError(
        `DeltaNet: a tree of ${tree.rows} rows (1..${Math.min(this.maxRows, DELTANET_MAX_TREE_ROWS)})`,
      );
    if (from.conv === to.conv || from.recurrent === to.recurrent)
      throw new InvalidInputError('DeltaNet: the state is read from one buffer and written to another');
    const { valueHeads: Hv, keyDim: dk, valueDim: dv, convKernel: K } = this.shape;
    const { valueWidth, channels: C, row: P } = deltaNetSizes(this.shape);
    const R = this.maxRows;
    const need: [string, GPUBuffer, number][] = [
      ['proj', proj, R * P * 4],
      ['positions', positions, 4],
      ['count', count, 4],
      ['out', out, R * valueWidth * 4],
      ['weights.convWeight', weights.convWeight, C * K * 4],
      ['weights.aLog', weights.aLog, Hv * 4],
      ['weights.dtBias', weights.dtBias, Hv * 4],
      ['weights.normWeight', weights.normWeight, dv * 4],
      ['from.conv', from.conv, (K - 1) * C * 4],
      ['from.recurrent', from.recurrent, Hv * dk * dv * 4],
      ['to.conv', to.conv, (K - 1) * C * 4],
      ['to.recurrent', to.recurrent, Hv * dk * dv * 4],
    ];
    for (const [name, b, bytes] of need)
      if (b.size < bytes)
        throw new InvalidInputError(`DeltaNet: ${name} holds ${b.size} bytes, need ${bytes}`);
    if (tree && tree.vis.size < tree.rows * 8)
      throw new InvalidInputError(`DeltaNet: tree.vis holds ${tree.vis.size} bytes, need ${tree.rows * 8}`);
    const u = this.uniform.buffer;
    // A tree's passes bind its visibility words where a chain's bind the state they write.
    const conv = tree ? this.treeConvPipeline : this.convPipeline;
    pass.setPipeline(conv);
    pass.setBindGroup(
      0,
      this.binds.get(conv, [
        u,
        proj,
        positions,
        count,
        weights.convWeight,
        from.conv,
        this.conv,
        tree?.vis ?? to.conv,
      ]),
    );
    this.ctx.counter.dispatch(pass, Math.ceil(C / CONV_WG));
    const rule = tree ? this.treeRulePipeline : this.rulePipeline;
    pass.setPipeline(rule);
    pass.setBindGroup(
      0,
      this.binds.get(rule, [
        u,
        proj,
        this.conv,
        positions,
        count,
        weights.aLog,
        weights.dtBias,
        weights.normWeight,
        from.recurrent,
        out,
        tree?.vis ?? to.recurrent,
      ]),
    );
    // A tree: a workgroup per (value head, row).
    this.ctx.counter.dispatch(pass, Hv, tree?.rows ?? 1);
  }

  destroy(): void {
    this.uniform.destroy();
    this.conv.destroy();
  }
}
