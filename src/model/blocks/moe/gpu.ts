// The mixture block on the GPU (in progress).
import type { GpuBlock, Placer } from '../gpu.js';
import type { MoeBlock } from './block.js';

/** Places the block's tensors. */
export async function placeMoe(_placer: Placer, block: MoeBlock): Promise<GpuBlock> {
  throw new Error(`moe: layer ${block.layer}: the GPU side is not written yet`);
}
