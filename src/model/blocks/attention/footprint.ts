// What a model's attention blocks take on the GPU (BlockKind.footprint): their matrices as packed,
// norms and per-row biases, each layer's KV cache (a sliding layer's ring; none for a KV-shared
// layer), and the q | k | v scratch rows. The sizes follow what gpu.ts allocates, each layer at its
// own head size and KV heads (layerSpec).
import { type KvShape, kvRows, kvWordsPerSlot } from '../../../kernels/kv/kv.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import {
  deriveSizes,
  kvSourceLayer,
  layerAttention,
  layerKind,
  layerSpec,
  type ModelSpec,
} from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { BoundBuffer, FootprintOptions, KindFootprint } from '../kind.js';
import { type AttentionBlock, kvProjections } from './block.js';
import { layerKvShape } from './gpu.js';

/**
 * Bytes of cached keys and values attention reads for one new token after `keys` positions: every
 * attention layer's visible slots (a sliding layer's window; a KV-shared layer reads its source's
 * rows), K and V, at the cache's format (an integer format's scales included).
 */
export function attentionReadBytes(
  model: ModelSpec,
  kv: Pick<KvShape, 'format' | 'rotate'>,
  keys: number,
): number {
  let bytes = 0;
  for (let layer = 0; layer < model.layers; layer++) {
    if (layerKind(model, layer) !== 'attention') continue;
    const { window } = layerAttention(model, layer);
    const base = { capacity: keys + 1, kvHeads: model.kvHeads, headDim: model.headDim, ...kv };
    const shape = layerKvShape(model, base, kvSourceLayer(model, layer));
    bytes += 2 * Math.min(keys, window ?? keys) * kvWordsPerSlot({ ...shape, ring: 0 }) * 4;
  }
  return bytes;
}

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
