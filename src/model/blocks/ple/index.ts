// The per-layer-inputs kind (blocks/kind.ts, Gemma 4's PLE): its descriptor and names (block.ts),
// its reference forward (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts).
import type { BlockKind } from '../kind.js';
import { type PleBlock, pleTensors } from './block.js';
import { pleFootprint } from './footprint.js';
import { pleRef, readPle } from './reference.js';

export const ple: BlockKind<PleBlock> = {
  recurrent: false,
  tensors: pleTensors,
  reference(take, spec, block) {
    const w = readPle(take, spec, block);
    return (pass) => pleRef(pass, w);
  },
  // The GPU side loads with the first such block placed: the engine worker's chunk carries none of
  // it for the other models.
  async place(placer, block) {
    const { placePle } = await import('./gpu.js');
    return placePle(placer, block);
  },
  footprint: pleFootprint,
};
