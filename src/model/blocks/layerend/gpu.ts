// The layer-end block on the GPU (Gemma 4): with per-layer inputs, the gate (weight-only), the
// gate · input kernel, the projection (weight-only) and the norm-add into the stream; then the
// layer's scalar times the stream. Five dispatches a layer with both, one with the scalar alone.
import { createBuffer } from '../../../gpu/buffers.js';
import { ScaleInPlace } from '../../../kernels/elementwise/scale.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { PleGate } from '../../../kernels/ple/ple.js';
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
import { perLayerRows } from '../ple/gpu.js';
import type { LayerEndBlock } from './block.js';

/** The block's weights on the GPU. */
interface LayerEndGpuWeights {
  /** With per-layer inputs: [width, H], [H, width], [H]. */
  readonly ple:
    | { readonly gate: GpuMatrix; readonly projection: GpuMatrix; readonly norm: GPUBuffer }
    | undefined;
  readonly scalar: GPUBuffer | undefined; // [1]
}

/** What every layer-end block of a model shares: its kernels and scratch rows. */
interface LayerEndKernels {
  gate: PleGate | undefined; // gelu_tanh(g) · the layer's input slice
  scale: ScaleInPlace; // x · s
  g: GPUBuffer | undefined; // [T, width] the gate's output
  gated: GPUBuffer | undefined; // [T, width]
}

const modelKernels = new PerModel(async (c: KindContext): Promise<LayerEndKernels> => {
  const { ctx, binds, spec } = c;
  const width = spec.perLayerInput?.width;
  await Promise.all([ScaleInPlace.prepare(ctx), ...(width ? [PleGate.prepare(ctx)] : [])]);
  const rows = (label: string) => createBuffer(ctx, MAX_FORWARD_TOKENS * (width ?? 0) * 4, label);
  const k: LayerEndKernels = {
    gate: width ? new PleGate(ctx, binds, { layers: spec.layers, width }) : undefined,
    scale: new ScaleInPlace(ctx, binds),
    g: width ? rows('per-layer-gate') : undefined,
    gated: width ? rows('per-layer-gated') : undefined,
  };
  c.onDestroy(() => {
    k.gate?.destroy();
    k.scale.destroy();
    k.g?.destroy();
    k.gated?.destroy();
  });
  return k;
});

/** Places the block's tensors. */
export async function placeLayerEnd(placer: Placer, block: LayerEndBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const H = spec.hidden;
  const width = spec.perLayerInput?.width;
  const n = block.names;
  const w: LayerEndGpuWeights = {
    ple: width
      ? {
          gate: await placer.matrix(n.gate, width, H),
          projection: await placer.matrix(n.projection, H, width),
          norm: await placer.norm(n.norm, H),
        }
      : undefined,
    scalar: spec.layerScalar ? await placer.tensor(n.scalar, [1]) : undefined,
  };
  return {
    matrices: w.ple ? [w.ple.gate, w.ple.projection] : [],
    vectors: [w.ple?.norm, w.scalar].filter((b) => b !== undefined),
    bind: (c) => bindLayerEnd(c, block, w),
  };
}

/** The block's weight-only linears (not `*_proj` linears: W8A8 leaves them alone) and its encode. */
async function bindLayerEnd(
  c: KindContext,
  block: LayerEndBlock,
  w: LayerEndGpuWeights,
): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const inputs = w.ple ? await perLayerRows.of(c) : undefined;
  const linears = w.ple && {
    gate: c.builder.weightOnly(w.ple.gate),
    projection: c.builder.weightOnly(w.ple.projection),
  };
  return {
    encode: (p) => encodeLayerEnd(p, block, w, k, linears, inputs),
    commit: () => {},
    kvBytes: 0,
    recurrent: undefined,
    ring: false,
    destroy() {
      linears?.gate.destroy();
      linears?.projection.destroy();
    },
  };
}

/** Encodes x += rmsnorm(projection(gelu_tanh(gate · x) · p_l)) · w, then x ·= s. */
function encodeLayerEnd(
  p: GpuPass,
  block: LayerEndBlock,
  w: LayerEndGpuWeights,
  k: LayerEndKernels,
  linears: { gate: Linear; projection: Linear } | undefined,
  inputs: GPUBuffer | undefined,
): void {
  const { a, T } = p;
  if (w.ple && linears && inputs && k.gate && k.g && k.gated) {
    if (!p.k.normAdd) throw new Error('layerend: a model with per-layer inputs has the norm-add kernel');
    linears.gate.encode(p.pass, a.x, k.g, T, p.prefill);
    k.gate.encode(p.pass, k.g, inputs, k.gated, T, block.layer);
    linears.projection.encode(p.pass, k.gated, a.tmp, T, p.prefill);
    p.k.normAdd.encode(p.pass, a.tmp, w.ple.norm, a.x, T);
  }
  if (w.scalar) k.scale.encode(p.pass, w.scalar, a.x, T * p.spec.hidden);
}
