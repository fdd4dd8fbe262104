// The short-convolution kind (blocks/kind.ts): its descriptor and names (block.ts), its reference
// forward (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts). Its state is
// recurrent.
import type { BlockKind } from '../kind.js';
import { type ShortConvBlock, shortConvTensors } from './block.js';
import { shortConvFootprint } from './footprint.js';
import { readShortConv, shortConvRef } from './reference.js';

export const shortconv: BlockKind<ShortConvBlock> = {
  recurrent: true,
  tensors: shortConvTensors,
  reference(take, spec, block) {
    const w = readShortConv(take, spec, block);
    return (pass) => shortConvRef(pass, block, w);
  },
  // The GPU side (its kernel and shader) loads with the first LFM2 placed, as the mixture's does.
  async place(placer, block) {
    const { placeShortConv } = await import('./gpu.js');
    return placeShortConv(placer, block);
  },
  footprint: shortConvFootprint,
};
