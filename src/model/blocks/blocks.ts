// A model's forward as a list of blocks, built from its config by its family (families/): each
// block a kind (attention, mlp, moe, deltanet, shortconv, ple, layerend) with its layer and its tensors' names. The GPU
// runner encodes the list and the reference runs it, each through the kind table (index.ts), so
// the two cannot drift apart in structure.
import type { AttentionBlock } from './attention/block.js';
import type { DeltaNetBlock } from './deltanet/block.js';
import type { LayerEndBlock } from './layerend/block.js';
import type { MlpBlock } from './mlp/block.js';
import type { MoeBlock } from './moe/block.js';
import type { PleBlock } from './ple/block.js';
import type { ShortConvBlock } from './shortconv/block.js';

/** One block of a model's forward. */
export type Block =
  | AttentionBlock
  | MlpBlock
  | MoeBlock
  | DeltaNetBlock
  | ShortConvBlock
  | PleBlock
  | LayerEndBlock;

/** A block kind's name. */
export type BlockKindName = Block['kind'];

/** The block of kind `K`. */
export type BlockOf<K extends BlockKindName> = Extract<Block, { readonly kind: K }>;

/** Whether `blocks[i]` is the first (or the last) block of its layer: where steering reads and writes. */
export function layerEdges(blocks: readonly Block[], i: number): { first: boolean; last: boolean } {
  const layer = blocks[i]!.layer;
  return { first: blocks[i - 1]?.layer !== layer, last: blocks[i + 1]?.layer !== layer };
}
