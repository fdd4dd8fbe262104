// The Gated DeltaNet kind (blocks/kind.ts): its descriptor and names (block.ts), its reference
// forward (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts). Its state is
// recurrent.
import type { BlockKind } from '../kind.js';
import { type DeltaNetBlock, deltaNetTensors } from './block.js';
import { deltaNetFootprint } from './footprint.js';
import { deltaNetRef, readDeltaNet } from './reference.js';

export const deltanet: BlockKind<DeltaNetBlock> = {
  recurrent: true,
  tensors: deltaNetTensors,
  reference(take, spec, block) {
    const w = readDeltaNet(take, spec, block);
    return (pass) => deltaNetRef(pass, block, w);
  },
  // The GPU side (its kernels and shaders) loads with the first hybrid model placed: the engine
  // worker's chunk carries none of it for the other models.
  async place(placer, block) {
    const { placeDeltaNet } = await import('./gpu.js');
    return placeDeltaNet(placer, block);
  },
  footprint: deltaNetFootprint,
};
