// The layer-end kind (blocks/kind.ts, Gemma 4): its descriptor and names (block.ts), its reference
// forward (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts).
import type { BlockKind } from '../kind.js';
import { type LayerEndBlock, layerEndTensors } from './block.js';
import { layerEndFootprint } from './footprint.js';
import { layerEndRef, readLayerEnd } from './reference.js';

export const layerend: BlockKind<LayerEndBlock> = {
  recurrent: false,
  tensors: layerEndTensors,
  reference(take, spec, block) {
    const w = readLayerEnd(take, spec, block);
    return (pass) => layerEndRef(pass, block, w);
  },
  // The GPU side loads with the first such block placed: the engine worker's chunk carries none of
  // it for the other models.
  async place(placer, block) {
    const { placeLayerEnd } = await import('./gpu.js');
    return placeLayerEnd(placer, block);
  },
  footprint: layerEndFootprint,
};
