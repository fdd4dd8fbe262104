// The per-layer-inputs block's reference forward (descriptor in block.ts, GPU side in gpu.ts).

import type { ModelSpec } from '../../spec/spec.js';
import { linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type PleBlock, perLayerOf, pleTensors } from './block.js';

/** The block's weights for the reference. */
export interface PleWeights {
  /** [vocab, layers · width] */
  readonly table: Float32Array;
  /** [layers · width, H] */
  readonly projection: Float32Array;
  /** [width] */
  readonly norm: Float32Array;
}

/** Reads the block's weights. */
export function readPle(take: TakeTensor, spec: ModelSpec, block: PleBlock): PleWeights {
  const [table, projection, norm] = pleTensors(spec, block).map(([name, shape]) => take(name, shape));
  return { table: table!, projection: projection!, norm: normWeight(spec, norm!) };
}

/**
 * Sets `pass.perLayerInputs` [T, layers, width] from the pass's rows, whose stream x holds the
 * scaled embeddings (this block runs first): (rmsnorm(f32(P · x · 1/√H)) + f32(table[token] · √w))
 * · 1/√2, each product rounded to f32 as PyTorch takes it, the scales rounded to f32 first. P is a
 * weight-only linear, as the LM head is (its input is not a `*_proj` linear's).
 */
export function pleRef(pass: RefPass, w: PleWeights): void {
  const { spec, T, x } = pass;
  const { width } = perLayerOf(spec);
  const n = spec.layers * width;
  const out = new Float32Array(T * n); // [T, layers, width]
  linear(x, spec.hidden, w.projection, n, undefined, out);
  const projScale = Math.fround(1 / Math.sqrt(spec.hidden));
  for (let i = 0; i < out.length; i++) out[i] = Math.fround(out[i]! * projScale);
  rmsNorm(out, width, w.norm, spec.rmsEps, out);
  const tableScale = Math.fround(Math.sqrt(width));
  const mix = Math.fround(Math.SQRT1_2);
  for (let t = 0; t < T; t++) {
    const row = pass.tokens[t]! * n;
    for (let j = 0; j < n; j++) {
      const tok = Math.fround(w.table[row + j]! * tableScale);
      out[t * n + j] = Math.fround(Math.fround(out[t * n + j]! + tok) * mix);
    }
  }
  pass.perLayerInputs = out;
}
