// What a model's attention blocks take on the GPU (BlockKind.footprint): their matrices as packed,
// norms and per-row biases, each layer's KV cache (a sliding layer's ring; none for a KV-shared
// layer), and the q | k | v scratch rows. The sizes follow what gpu.ts allocates, each layer at its
// own head size and KV heads (layerSpec).
import { kvRows, kvWordsPerSlot } from '../../../kernels/kv/kv.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import { deriveSizes, kvSourceLayer, layerSpec, type ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { BoundBuffer, FootprintOptions, KindFootprint } from '../kind.js';
import { type AttentionBlock, kvProjections } from './block.js';
import { layerKvShape } from './gpu.js';

/** The bytes of a model's attention blocks (see BlockKind.footprint). */
export function attentionFootprint(
  model: ModelSpec,
  blocks: readonly AttentionBlock[],
  format: WeightFormat,
  o: FootprintOptions,
): KindFootprint {
  const H = model.hidden;
  const maxT = MAX_FORWARD_TOKENS;
  const base = { capacity: o.context, kvHeads: model.kvHeads, headDim: model.headDim, format: o.kvFormat };
  let weights = 0;
  let kvCache = 0;
  let activations = 0;
  const bound: BoundBuffer[] = [];
  for (const b of blocks) {
    const spec = layerSpec(model, b.layer);
    const { qWidth, kvWidth } = deriveSizes(spec);
    const kv = kvProjections(spec, b.layer);
    const kvMatrices = kv === 'none' ? 0 : kv === 'k' ? 1 : 2;
    // q_proj with an output gate holds each head's query and gate rows.
    weights +=
      packedBytes(format, (spec.outputGate ? 2 : 1) * qWidth, H) +
      kvMatrices * packedBytes(format, kvWidth, H) +
      packedBytes(format, H, qWidth) +
      // The input norm, and biases repeated for every forward row.
      4 * (H + (spec.qkvBias ? maxT * (qWidth + 2 * kvWidth) : 0) + (spec.qkNorm ? 2 * spec.headDim : 0));
    // q | k | v (with an output gate, the gate too), q, k, v, their normed copies, the output.
    const gate = spec.outputGate ? qWidth : 0;
    activations = Math.max(activations, 4 * maxT * (3 * qWidth + 4 * kvWidth + gate));
    // A KV-shared layer reads its source's cache; a sliding layer's ring holds its window and a
    // little more, not the context (layerKvShape).
    if (kvSourceLayer(model, b.layer) !== b.layer) continue;
    const shape = layerKvShape(model, base, b.layer);
    const bytes = kvRows(shape) * kvWordsPerSlot(shape) * 4;
    kvCache += 2 * bytes;
    const what = `model.layers.*.k_cache [${kvRows(shape)}, ${shape.kvHeads}, ${shape.headDim}] ${o.kvFormat}`;
    if (!bound.some((x) => x.what === what)) bound.push({ what, bytes });
  }
  return { weights, kvCache, state: 0, activations, bound };
}
