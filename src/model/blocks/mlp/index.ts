// The MLP kind (blocks/kind.ts): its descriptor and names (block.ts), its reference forward
// (reference.ts), its GPU side (gpu.ts) and its footprint (footprint.ts).
import type { BlockKind } from '../kind.js';
import { type MlpBlock, mlpTensors } from './block.js';
import { mlpFootprint } from './footprint.js';
import { placeMlp } from './gpu.js';
import { mlpRef, readMlp } from './reference.js';

export const mlp: BlockKind<MlpBlock> = {
  recurrent: false,
  tensors: mlpTensors,
  reference(take, spec, block) {
    const w = readMlp(take, spec, block);
    return (pass) => mlpRef(pass, block, w);
  },
  place: placeMlp,
  footprint: mlpFootprint,
};
