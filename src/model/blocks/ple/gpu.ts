// The per-layer-inputs block on the GPU (Gemma 4's PLE): the table and the projection placed at
// the model's format, and one pass's per-layer inputs in three dispatches: the table's rows looked
// up (times √width), the projection of the embedded rows, and the combine (scale, norm per layer
// slice, add, 1/√2). The rows it leaves are what every layer's `layerend` block reads.
import { createBuffer } from '../../../gpu/buffers.js';
import { Embedding } from '../../../kernels/embed/embed.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { PleCombine } from '../../../kernels/ple/ple.js';
import {
  type BoundBlock,
  type GpuBlock,
  type GpuPass,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  PerModel,
  type Placer,
} from '../gpu.js';
import { type PleBlock, perLayerOf } from './block.js';

/** The block's weights on the GPU. */
interface PleGpuWeights {
  readonly table: GpuMatrix; // [vocab, layers · width]
  readonly projection: GpuMatrix; // [layers · width, H]
  readonly norm: GPUBuffer; // [width]
}

/**
 * A model's per-layer input rows [MAX_FORWARD_TOKENS, layers · width] f32: written by its `ple`
 * block at the start of each pass, read by every layer's `layerend` block.
 */
export const perLayerRows = new PerModel(async (c: KindContext): Promise<GPUBuffer> => {
  const { width } = perLayerOf(c.spec);
  const rows = createBuffer(c.ctx, MAX_FORWARD_TOKENS * c.spec.layers * width * 4, 'per-layer-inputs');
  c.onDestroy(() => rows.destroy());
  return rows;
});

/** Places the block's tensors. */
export async function placePle(placer: Placer, block: PleBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const { width, vocab } = perLayerOf(spec);
  const n = block.names;
  const w: PleGpuWeights = {
    table: await placer.matrix(n.table, vocab, spec.layers * width),
    projection: await placer.matrix(n.projection, spec.layers * width, spec.hidden),
    norm: await placer.norm(n.norm, width),
  };
  return {
    matrices: [w.projection],
    tables: [w.table], // a pass reads its tokens' rows
    vectors: [w.norm],
    bind: (c) => bindPle(c, w),
  };
}

/** The table's lookup, the projection (weight-only, as the LM head), the combine and its rows. */
async function bindPle(c: KindContext, w: PleGpuWeights): Promise<BoundBlock> {
  const { ctx, binds, spec } = c;
  const { width } = perLayerOf(spec);
  const scale = Math.sqrt(width);
  await Promise.all([Embedding.prepare(ctx, w.table.format, scale), PleCombine.prepare(ctx)]);
  const lookup = new Embedding(ctx, binds, w.table, { scale });
  const projection = c.builder.weightOnly(w.projection);
  const combine = new PleCombine(ctx, binds, {
    layers: spec.layers,
    width,
    hidden: spec.hidden,
    eps: spec.rmsEps,
  });
  const inputs = await perLayerRows.of(c);
  const n = MAX_FORWARD_TOKENS * spec.layers * width * 4;
  const tok = createBuffer(ctx, n, 'per-layer-table-rows'); // [T, layers · width]
  const proj = createBuffer(ctx, n, 'per-layer-projection'); // [T, layers · width]
  return {
    encode: (p) => encodePle(p, lookup, projection, combine, w, { tok, proj, inputs }),
    commit: () => {},
    kvBytes: 0,
    recurrent: undefined,
    ring: false,
    destroy() {
      lookup.destroy();
      projection.destroy();
      combine.destroy();
      tok.destroy();
      proj.destroy();
    },
  };
}

/** Encodes the pass's per-layer inputs from its ids and its embedded rows (x, before any layer). */
function encodePle(
  p: GpuPass,
  lookup: Embedding,
  projection: Linear,
  combine: PleCombine,
  w: PleGpuWeights,
  rows: { tok: GPUBuffer; proj: GPUBuffer; inputs: GPUBuffer },
): void {
  const { a, T } = p;
  lookup.encode(p.pass, a.ids, rows.tok, T);
  projection.encode(p.pass, a.x, rows.proj, T, p.prefill);
  combine.encode(p.pass, rows.proj, rows.tok, w.norm, rows.inputs, T);
}
