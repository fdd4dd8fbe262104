// The per-layer-inputs block on the GPU (Gemma 4's PLE). Written with its kernels.
import type { GpuBlock, Placer } from '../gpu.js';
import type { PleBlock } from './block.js';

export async function placePle(_placer: Placer, block: PleBlock): Promise<GpuBlock> {
  throw new Error(`placePle: ${block.names.table}: not on the GPU yet`);
}
