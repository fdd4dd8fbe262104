// The kind table: every block kind, one folder each, and the questions the rest of weft asks of a
// block through it (no switch over kinds anywhere else).
import type { WeightFormat } from '../../quant/formats.js';
import type { ModelSpec } from '../spec/spec.js';
import { attention } from './attention/index.js';
import type { Block, BlockKindName, BlockOf } from './blocks.js';
import { deltanet } from './deltanet/index.js';
import type { GpuBlock, Placer } from './gpu.js';
import type { BlockKind, FootprintOptions, KindFootprint, RefBlock } from './kind.js';
import { layerend } from './layerend/index.js';
import { mlp } from './mlp/index.js';
import { moe } from './moe/index.js';
import type { TensorShapes } from './names.js';
import type { TakeTensor } from './pass.js';
import { ple } from './ple/index.js';
import { shortconv } from './shortconv/index.js';

/** Every block kind, by name. */
const KINDS: { readonly [K in BlockKindName]: BlockKind<BlockOf<K>> } = {
  attention,
  mlp,
  moe,
  deltanet,
  shortconv,
  ple,
  layerend,
};

/** The kind of blocks named `kind`. */
function kindOf<K extends BlockKindName>(kind: K): BlockKind<BlockOf<K>> {
  return KINDS[kind];
}

/** A block's tensors that the spec says exist, under the checkpoint's names, with their shapes. */
export function blockTensors(spec: ModelSpec, block: Block): TensorShapes {
  return kindOf(block.kind).tensors(spec, block);
}

/** A block's reference forward, its weights read by `take`. */
export function referenceBlock(take: TakeTensor, spec: ModelSpec, block: Block): RefBlock {
  return kindOf(block.kind).reference(take, spec, block);
}

/** Whether a block's state is recurrent (see BlockKind.recurrent). */
export function isRecurrentBlock(block: Block): boolean {
  return kindOf(block.kind).recurrent;
}

/** Places a block's weights on the GPU (see BlockKind.place). */
export function placeBlock(placer: Placer, block: Block): Promise<GpuBlock> {
  return kindOf(block.kind).place(placer, block);
}

/** What a model's blocks take on the GPU, summed over their kinds (see BlockKind.footprint). */
export function blocksFootprint(
  spec: ModelSpec,
  blocks: readonly Block[],
  format: WeightFormat,
  o: FootprintOptions,
): KindFootprint {
  const parts = [...new Set(blocks.map((b) => b.kind))].map((name) =>
    kindFootprint(spec, blocks, name, format, o),
  );
  return {
    weights: parts.reduce((n, p) => n + p.weights, 0),
    kvCache: parts.reduce((n, p) => n + p.kvCache, 0),
    state: parts.reduce((n, p) => n + p.state, 0),
    activations: parts.reduce((n, p) => n + p.activations, 0),
    bound: parts.flatMap((p) => p.bound),
  };
}

/** The footprint of the blocks of kind `name` among `blocks`. */
function kindFootprint<K extends BlockKindName>(
  spec: ModelSpec,
  blocks: readonly Block[],
  name: K,
  format: WeightFormat,
  o: FootprintOptions,
): KindFootprint {
  const mine = blocks.filter((b): b is BlockOf<K> => b.kind === name);
  return kindOf(name).footprint(spec, mine, format, o);
}
