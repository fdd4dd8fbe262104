// The attention kind (blocks/kind.ts): its descriptor and names (block.ts), its reference forward
// (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts).
import type { BlockKind } from '../kind.js';
import { type AttentionBlock, attentionTensors } from './block.js';
import { attentionFootprint } from './footprint.js';
import { placeAttention } from './gpu.js';
import { attentionRef, readAttention } from './reference.js';

export const attention: BlockKind<AttentionBlock> = {
  recurrent: false,
  tensors: attentionTensors,
  reference(take, spec, block) {
    const w = readAttention(take, spec, block);
    return (pass) => attentionRef(pass, block, w);
  },
  place: placeAttention,
  footprint: attentionFootprint,
};
