// The layer-end block on the GPU (Gemma 4). Written with its kernels.
import type { GpuBlock, Placer } from '../gpu.js';
import type { LayerEndBlock } from './block.js';

export async function placeLayerEnd(_placer: Placer, block: LayerEndBlock): Promise<GpuBlock> {
  throw new Error(`placeLayerEnd: layer ${block.layer}: not on the GPU yet`);
}
