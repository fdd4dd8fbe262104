// What a model's attention blocks take on the GPU (BlockKind.footprint): their matrices as packed,
// norms and per-row biases, each layer's KV cache (a sliding layer's ring), and the q | k | v
// scratch rows. The sizes follow what gpu.ts allocates.
import { kvRows, kvWordsPerSlot } from '../../../kernels/kv/kv.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import { deriveSizes, type ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import type { AttentionBlock } from './block.js';
import { layerKvShape } from './gpu.js';

/** The bytes of a model's attention blocks (see BlockKind.footprint). */
export function attentionFootprint(
  spec: ModelSpec,
  blocks: readonly AttentionBlock[],
  format: WeightFormat,
  o: FootprintOptions,
): KindFootprint {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const maxT = MAX_FORWARD_TOKENS;
  // q_proj with an output gate holds each head's query and gate rows.
  const matrices =
    packedBytes(format, (spec.outputGate ? 2 : 1) * qWidth, H) +
    2 * packedBytes(format, kvWidth, H) +
    packedBytes(format, H, qWidth);
  // The input norm, and biases repeated for every forward row.
  const vectors =
    4 * (H + (spec.qkvBias ? maxT * (qWidth + 2 * kvWidth) : 0) + (spec.qkNorm ? 2 * spec.headDim : 0));
  const kv = { capacity: o.context, kvHeads: spec.kvHeads, headDim: spec.headDim, format: o.kvFormat };
  // A sliding layer's ring holds its window and a little more, not the context (layerKvShape).
  const kvCache = blocks.reduce(
    (sum, b) => sum + 2 * kvRows(layerKvShape(spec, kv, b.layer)) * kvWordsPerSlot(kv) * 4,
    0,
  );
  // q | k | v (with an output gate, the gate too), q, k, v, their QK-normed copies, the output.
  const gate = spec.outputGate ? qWidth : 0;
  const kvShape = `[${o.context}, ${spec.kvHeads}, ${spec.headDim}] ${o.kvFormat}`;
  return {
    weights: blocks.length * (matrices + vectors),
    kvCache,
    state: 0,
    activations: blocks.length > 0 ? 4 * maxT * (3 * qWidth + 3 * kvWidth + gate) : 0,
    bound:
      blocks.length > 0
        ? [{ what: `model.layers.*.k_cache ${kvShape}`, bytes: o.context * kvWordsPerSlot(kv) * 4 }]
        : [],
  };
}
