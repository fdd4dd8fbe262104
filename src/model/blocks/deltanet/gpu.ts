// The Gated DeltaNet block on the GPU: its weights as placed, its kernels (the model's delta-rule
// kernel, its commit's row gather and its scratch rows, made once), its state (the convolution
// window and the recurrent state, twice: see StatePair), its encode and its commit. Per pass, four
// dispatches: the fused projection q | k | v | z | b | a (the input norm folded in), the
// convolution, the delta rule with the gated norm (kernels/deltanet), and out_proj added into the
// residual stream.
import { InvalidInputError } from '../../../errors.js';
import { createBuffer } from '../../../gpu/buffers.js';
import { DeltaNet } from '../../../kernels/deltanet/deltanet.js';
import type { DeltaNetState } from '../../../kernels/deltanet/reference.js';
import { GatherRows } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { deltaNetWidths } from '../../spec/spec.js';
import { encodeResidual, normedInput } from '../encode.js';
import {
  type BoundBlock,
  type CommitInputs,
  type GpuBlock,
  type GpuPass,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  PerModel,
  type Placer,
  type StatePair,
} from '../gpu.js';
import type { DeltaNetBlock } from './block.js';
import { deltaNetShape, deltaNetStateBytes, projWidth, stateFloats } from './footprint.js';

/** The DeltaNet block's weights on the GPU. */
interface DeltaNetGpuWeights {
  readonly inputNorm: GPUBuffer; // [H], as it multiplies
  // in_proj_qkv, _z, _b and _a stacked by rows: one matmul whose output row is q | k | v | z | b | a.
  readonly proj: GpuMatrix; // [C + valueWidth + 2·Hv, H]
  readonly conv: GPUBuffer; // [C, K] the depthwise convolution (conv1d.weight [C, 1, K])
  readonly aLog: GPUBuffer; // [Hv]
  readonly dtBias: GPUBuffer; // [Hv]
  readonly norm: GPUBuffer; // [valueDim] the gated norm's weight
  readonly out: GpuMatrix; // [H, valueWidth]
}

/** What every DeltaNet block of a model shares: the delta rule, a commit's gather, the scratch rows. */
interface DeltaNetKernels {
  net: DeltaNet; // the convolution and the delta rule
  gather: GatherRows; // a commit's path rows gathered from a layer's projection rows (width P)
  proj: GPUBuffer; // [T, P] an accepted path's projection rows, gathered for a commit
  mixed: GPUBuffer; // [T, valueWidth] the delta rule's gated norm, input of out_proj
}

/** The model's DeltaNet kernels and scratch rows, the delta rule compiled first. */
const modelKernels = new PerModel(async (c: KindContext): Promise<DeltaNetKernels> => {
  const { ctx, binds, spec } = c;
  const shape = deltaNetShape(spec);
  await Promise.all([DeltaNet.prepare(ctx, shape), GatherRows.prepare(ctx)]);
  const P = projWidth(spec);
  const maxT = MAX_FORWARD_TOKENS;
  const k = {
    net: new DeltaNet(ctx, binds, shape, maxT),
    gather: new GatherRows(ctx, binds, P),
    proj: createBuffer(ctx, maxT * P * 4, 'deltanet-commit-proj'),
    mixed: createBuffer(ctx, maxT * deltaNetWidths(spec).valueWidth * 4, 'deltanet-mixed'),
  };
  c.onDestroy(() => {
    k.net.destroy();
    k.proj.destroy();
    k.mixed.destroy();
  });
  return k;
});

/** Places the block's tensors. */
export async function placeDeltaNet(placer: Placer, block: DeltaNetBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const H = spec.hidden;
  const dn = deltaNetShape(spec);
  const { valueWidth, convChannels: C } = deltaNetWidths(spec);
  const n = block.names;
  const label = n.qkv.replace(/in_proj_qkv\.weight$/, 'in_proj.weight');
  const proj = await placer.stacked(label, [
    [n.qkv, C, H],
    [n.z, valueWidth, H],
    [n.b, dn.valueHeads, H],
    [n.a, dn.valueHeads, H],
  ]);
  // The delta rule reads one row of all four: they must be one matrix.
  if (!('parts' in proj)) {
    for (const m of proj) m.destroy();
    throw new InvalidInputError(
      `${label.replace(/\.in_proj\.weight$/, '')}: in_proj_qkv, _z, _b and _a cannot be stacked into one matrix in this format (their rows do not end on its blocks)`,
    );
  }
  const w: DeltaNetGpuWeights = {
    inputNorm: await placer.norm(n.norm, H),
    proj,
    conv: await placer.tensor(n.conv, [C, 1, dn.convKernel]),
    aLog: await placer.vector(n.aLog, dn.valueHeads),
    dtBias: await placer.vector(n.dtBias, dn.valueHeads),
    norm: await placer.vector(n.gatedNorm, dn.valueDim),
    out: await placer.matrix(n.out, H, valueWidth),
  };
  return {
    matrices: [w.proj, w.out],
    vectors: [w.inputNorm, w.conv, w.aLog, w.dtBias, w.norm],
    bind: (c) => bindDeltaNet(c, block, w),
  };
}

/** The block's linears (the fused projection takes the input norm where norms fold in) and its state. */
async function bindDeltaNet(
  c: KindContext,
  block: DeltaNetBlock,
  w: DeltaNetGpuWeights,
): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const kb = c.builder;
  const proj = kb.linear(w.proj, kb.norm(w.inputNorm));
  const out = kb.linear(w.out, { epilogue: 'add' });
  const state = stateOf(c, block.layer);
  const { spec } = c;
  return {
    encode: (p) => encodeDeltaNet(p, w, k, proj, out, state),
    commit: (pass, ci) => commitDeltaNet(pass, w, k, state, ci),
    kvBytes: 0,
    recurrent: { stateBytes: deltaNetStateBytes(spec), bytesPerTreeNode: 4 * projWidth(spec) },
    ring: false,
    destroy() {
      proj.destroy();
      out.destroy();
      for (const s of state.pair) for (const b of [s.conv, s.recurrent]) b.destroy();
      state.proj.destroy();
    },
  };
}

/**
 * A layer's state, twice (zeros: a pass at position 0 starts from zeros anyway), and its
 * projection rows of MAX_FORWARD_TOKENS rows.
 */
function stateOf(c: KindContext, layer: number): StatePair<DeltaNetState<GPUBuffer>> {
  const { conv, recurrent } = stateFloats(c.spec);
  const one = (i: number) => ({
    conv: createBuffer(c.ctx, conv * 4, `model.layers.${layer}.conv_state.${i}`),
    recurrent: createBuffer(c.ctx, recurrent * 4, `model.layers.${layer}.recurrent_state.${i}`),
  });
  return {
    pair: [one(0), one(1)],
    proj: createBuffer(
      c.ctx,
      MAX_FORWARD_TOKENS * projWidth(c.spec) * 4,
      `model.layers.${layer}.deltanet_proj`,
    ),
  };
}

/** The delta rule's weights of a placed layer. */
function ruleWeights(w: DeltaNetGpuWeights) {
  return { convWeight: w.conv, aLog: w.aLog, dtBias: w.dtBias, normWeight: w.norm };
}

/**
 * Advances the layer's committed state along an accepted path of the last pass (a tree's, or a
 * chain's prefix): its rows gathered from the layer's projection rows, then the convolution and the
 * delta rule run over them as a chain from the state of `version` into the other copy. The runner
 * steps the version.
 */
function commitDeltaNet(
  pass: GPUComputePassEncoder,
  w: DeltaNetGpuWeights,
  k: DeltaNetKernels,
  state: StatePair<DeltaNetState<GPUBuffer>>,
  c: CommitInputs,
): void {
  const r = c.rerun;
  if (!r) return;
  k.gather.encode(pass, state.proj, r.rows, k.proj, r.n);
  const from = state.pair[r.version % 2]!;
  const to = state.pair[(r.version + 1) % 2]!;
  k.net.encode(pass, k.proj, r.base, r.count, k.mixed, ruleWeights(w), from, to);
}

/**
 * Encodes the block over the pass's rows after the committed state: the fused projection into the
 * layer's rows, the convolution and delta rule from the state of version `p.version` (a chain
 * writes the state after it into the other copy; a tree's rows each run through their ancestors
 * and write no state), and x += out_proj(y).
 */
function encodeDeltaNet(
  p: GpuPass,
  w: DeltaNetGpuWeights,
  k: DeltaNetKernels,
  proj: Linear,
  out: Linear,
  state: StatePair<DeltaNetState<GPUBuffer>>,
): void {
  const { a, T } = p;
  if (!a.count) throw new Error('encodeDeltaNet: the runner stages no row count');
  p.section('qkv');
  // Into the layer's own rows: a commit after a tree reads the accepted ones from there.
  proj.encode(p.pass, proj.fused.norm ? a.x : normedInput(p, w.inputNorm), state.proj, T, p.prefill);
  p.section('attention');
  const from = state.pair[p.version % 2]!;
  const to = state.pair[(p.version + 1) % 2]!;
  const tree = p.tree ? { vis: a.vis, rows: T } : undefined;
  k.net.encode(p.pass, state.proj, a.positions, a.count, k.mixed, ruleWeights(w), from, to, tree);
  p.section('o');
  encodeResidual(p, out, k.mixed);
}
