// The mixture-of-experts kind (blocks/kind.ts): its descriptor and names (block.ts), its reference
// forward (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts).
import type { BlockKind } from '../kind.js';
import { type MoeBlock, moeTensors } from './block.js';
import { moeFootprint } from './footprint.js';
import { moeRef, readMoe } from './reference.js';

export const moe: BlockKind<MoeBlock> = {
  recurrent: false,
  tensors: moeTensors,
  reference(take, spec, block) {
    const w = readMoe(take, spec, block);
    return (pass) => moeRef(pass, block, w);
  },
  // The GPU side (its kernels, the expert matmul and the cache) loads with the first mixture placed:
  // the engine worker's chunk carries none of it for the other models.
  async place(placer, block) {
    const { placeMoe } = await import('./gpu.js');
    return placeMoe(placer, block);
  },
  footprint: moeFootprint,
};
