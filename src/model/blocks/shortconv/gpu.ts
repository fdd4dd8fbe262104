import { createBuffer } from '../../../gpu/buffers.js';
import { GatherRows } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { ShortConv } from '../../../kernels/shortconv/shortconv.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
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
import type { ShortConvBlock } from './block.js';
import { shortConvShape, shortConvStateBytes, windowFloats } from './footprint.js';

/** The short-convolution block's weights on the GPU. */
interface ShortConvGpuWeights {
  readonly inputNorm: GPUBuffer; // [H] as it multiplies
  readonly inProj: GpuMatrix; // [3H, H] one matmul whose output row is B | C | x
  readonly conv: GPUBuffer; // [H, K] the depthwise convolution (conv.weight [H, 1, K])
  readonly out: GpuMatrix; // [H, H]
}

/** What every short-convolution block of a model shares: the kernel, a commit's gather, the scratch rows. */
interface ShortConvKernels {
  op: ShortConv; // the gated convolution
  gather: GatherRows; // a commit's path rows gathered from a layer's in_proj rows (width 3H)
  proj: GPUBuffer; // [T, 3H] an accepted path's in_proj rows, gathered for a commit
  mixed: GPUBuffer; // [T, H] C · conv, input of out_proj
}

/** The model's short-convolution kernels and scratch rows, the convolution compiled first. */
const modelKernels = new PerModel(async (c: KindContext): Promise<ShortConvKernels> => {
  const { ctx, binds, spec } = c;
  const shape = shortConvShape(spec);
  await Promise.all([ShortConv.prepare(ctx, shape), GatherRows.prepare(ctx)]);
  const H = spec.hidden;
  const maxT = MAX_FORWARD_TOKENS;
  const k = {
    op: new ShortConv(ctx, binds, shape, maxT),
    gather: new GatherRows(ctx, binds, 3 * H),
    proj: createBuffer(ctx, maxT * 3 * H * 4, 'shortconv-commit-proj'),
    mixed: createBuffer(ctx, maxT * H * 4, 'shortconv-mixed'),
  };
  c.onDestroy(() => {
    k.op.destroy();
    k.proj.destroy();
    k.mixed.destroy();
  });
  return k;
});

/** Places the block's tensors. */
export async function placeShortConv(placer: Placer, block: ShortConvBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const H = spec.hidden;
  const { kernel: K } = shortConvShape(spec);
  const n = block.names;
  const w: ShortConvGpuWeights = {
    inputNorm: await placer.norm(n.norm, H),
    // The kernel reads B, C and x of one row: in_proj stays one matrix, as the checkpoint stores it.
    inProj: await placer.matrix(n.inProj, 3 * H, H),
    conv: await placer.tensor(n.conv, [H, 1, K]),
    out: await placer.matrix(n.out, H, H),
  };
  return {
    matrices: [w.inProj, w.out],
    vectors: [w.inputNorm, w.conv],
    bind: (c) => bindShortConv(c, block, w),
  };
}

/** The block's linears (in_proj takes the input norm where norms fold in) and its window. */
async function bindShortConv(
  c: KindContext,
  block: ShortConvBlock,
  w: ShortConvGpuWeights,
): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const kb = c.builder;
  const inProj = kb.linear(w.inProj, kb.norm(w.inputNorm));
  const out = kb.linear(w.out, { epilogue: 'add' });
  const state = stateOf(c, block.layer);
  return {
    encode: (p) => encodeShortConv(p, w, k, inProj, out, state),
    commit: (pass, ci) => commitShortConv(pass, w, k, state, ci),
    kvBytes: 0,
    recurrent: { stateBytes: shortConvStateBytes(c.spec), bytesPerTreeNode: 4 * 3 * c.spec.hidden },
    ring: false,
    destroy() {
      inProj.destroy();
      out.destroy();
      for (const b of [...state.pair, state.proj]) b.destroy();
    },
  };
}

/**
 * A layer's window, twice (zeros: a pass at position 0 starts from zeros anyway), and its in_proj
 * rows of MAX_FORWARD_TOKENS rows.
 */
function stateOf(c: KindContext, layer: number): StatePair<GPUBuffer> {
  const bytes = windowFloats(c.spec) * 4;
  const one = (i: number) => createBuffer(c.ctx, bytes, `model.layers.${layer}.conv_window.${i}`);
  return {
    pair: [one(0), one(1)],
    proj: createBuffer(c.ctx, MAX_FORWARD_TOKENS * 3 * c.spec.hidden * 4, `model.layers.${layer}.conv_proj`),
  };
}

/**
 * Advances the layer's committed window along an accepted path of the last pass (a tree's, or a
 * chain's prefix): its rows gathered from the layer's in_proj rows, then the convolution run over
 * them as a chain from the window of `version` into the other copy (its output, into the scratch
 * rows, is not read). The runner steps the version.
 */
function commitShortConv(
  pass: GPUComputePassEncoder,
  w: ShortConvGpuWeights,
  k: ShortConvKernels,
  state: StatePair<GPUBuffer>,
  c: CommitInputs,
): void {
  const r = c.rerun;
  if (!r) return;
  k.gather.encode(pass, state.proj, r.rows, k.proj, r.n);
  const from = state.pair[r.version % 2]!;
  const to = state.pair[(r.version + 1) % 2]!;
  k.op.encode(pass, k.proj, r.base, r.count, w.conv, k.mixed, from, to);
}

/**
 * Encodes the block over the pass's rows after the committed window: in_proj into the layer's rows,
 * the gated convolution from the window of version `p.version` (a chain writes the window after it
 * into the other copy; a tree's rows each run through their ancestors and write none), and
 * x += out_proj(y).
 */
function encodeShortConv(
  p: GpuPass,
  w: ShortConvGpuWeights,
  k: ShortConvKernels,
  inProj: Linear,
  out: Linear,
  state: StatePair<GPUBuffer>,
): void {
  const { a, T } = p;
  if (!a.count) throw new Error('encodeShortConv: the runner stages no row count');
  p.section('qkv');
  // Into the layer's own rows: a commit after a tree reads the accepted ones from there.
  inProj.encode(p.pass, inProj.fused.norm ? a.x : normedInput(p, w.inputNorm), state.proj, T, p.prefill);
  p.section('attention');
  const from = state.pair[p.version % 2]!;
  const to = state.pair[(p.version + 1) % 2]!;
  const tree = p.tree ? { vis: a.vis, rows: T } : undefined;
  k.op.encode(p.pass, state.proj, a.positions, a.count, w.conv, k.mixed, from, to, tree);
  p.section('o');
  // out_proj reads a width-H row: rotated as the hidden width is, where its weights were packed so.
  encodeResidual(p, out, rotatedInput(p, p.k.rot?.hidden, k.mixed));
}
