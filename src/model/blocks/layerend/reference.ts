// The layer-end block's reference forward (descriptor in block.ts, GPU side in gpu.ts).
import { geluTanh } from '../../../kernels/elementwise/elementwise.js';
import type { ModelSpec } from '../../spec/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type LayerEndBlock, layerEndTensors } from './block.js';

/** The block's weights for the reference. */
export interface LayerEndWeights {
  /** [width, H], [H, width], [H] with per-layer inputs. */
  readonly gate: Float32Array | undefined;
  readonly projection: Float32Array | undefined;
  readonly norm: Float32Array | undefined;
  /** The layer's scalar, with `spec.layerScalar`. */
  readonly scalar: number | undefined;
}

/** Reads the block's weights. */
export function readLayerEnd(take: TakeTensor, spec: ModelSpec, block: LayerEndBlock): LayerEndWeights {
  const got = new Map(layerEndTensors(spec, block).map(([name, shape]) => [name, take(name, shape)]));
  const n = block.names;
  const norm = got.get(n.norm);
  return {
    gate: got.get(n.gate),
    projection: got.get(n.projection),
    norm: norm && normWeight(spec, norm),
    scalar: got.get(n.scalar)?.[0],
  };
}

/**
 * The block's forward: with per-layer inputs, x += rmsnorm(projection(f32(gelu_tanh(gate · x)) ·
 * p_l)), p_l the layer's slice of `pass.perLayerInputs` (gate and projection weight-only, as the
 * `ple` block's projection); then x ·= the layer's scalar.
 */
export function layerEndRef(pass: RefPass, block: LayerEndBlock, w: LayerEndWeights): void {
  const { spec, T, x } = pass;
  const H = spec.hidden;
  if (w.gate && w.projection && w.norm) {
    const width = w.gate.length / H;
    const inputs = pass.perLayerInputs;
    if (!inputs) throw new Error(`layerend: layer ${block.layer} runs before the per-layer inputs`);
    const g = new Float32Array(T * width); // [T, width]
    linear(x, H, w.gate, width, undefined, g);
    const stride = spec.layers * width;
    for (let t = 0; t < T; t++)
      for (let j = 0; j < width; j++) {
        const i = t * width + j;
        g[i] = Math.fround(Math.fround(geluTanh(g[i]!)) * inputs[t * stride + block.layer * width + j]!);
      }
    const proj = new Float32Array(T * H); // [T, H]
    linear(g, width, w.projection, H, undefined, proj);
    rmsNorm(proj, H, w.norm, spec.rmsEps, proj);
    addInto(x, proj);
  }
  if (w.scalar !== undefined) {
    const s = Math.fround(w.scalar);
    for (let i = 0; i < x.length; i++) x[i] = Math.fround(x[i]! * s);
  }
}
