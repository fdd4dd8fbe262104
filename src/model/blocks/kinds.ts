// Every block kind's reference side behind one switch: its tensors, its weights and its forward.
// A new kind adds an arm to each (the compiler's exhaustiveness check lists them).
import type { ModelSpec } from '../spec/spec.js';
import {
  type AttentionWeights,
  attentionRef,
  attentionTensors,
  readAttention,
} from './attention/reference.js';
import type { Block } from './blocks.js';
import { type LinearWeights, linearRef, linearTensors, readLinear } from './deltanet/reference.js';
import { type MlpWeights, mlpRef, mlpTensors, readMlp } from './mlp/reference.js';
import type { RefPass, TakeTensor } from './pass.js';
import {
  readShortConv,
  type ShortConvWeights,
  shortConvRef,
  shortConvTensors,
} from './shortconv/reference.js';

/** A block's weights for the reference, tagged with its kind. */
export type BlockWeights = AttentionWeights | LinearWeights | ShortConvWeights | MlpWeights;

/** The tensors a block reads, under the checkpoint's names, with their shapes. */
export function blockTensors(spec: ModelSpec, block: Block): [string, number[]][] {
  switch (block.kind) {
    case 'attention':
      return attentionTensors(spec, block);
    case 'linear':
      return linearTensors(spec, block);
    case 'conv':
      return shortConvTensors(spec, block);
    case 'mlp':
      return mlpTensors(spec, block);
  }
}

/** Reads a block's weights. */
export function readBlock(take: TakeTensor, spec: ModelSpec, block: Block): BlockWeights {
  switch (block.kind) {
    case 'attention':
      return readAttention(take, spec, block);
    case 'linear':
      return readLinear(take, spec, block);
    case 'conv':
      return readShortConv(take, spec, block);
    case 'mlp':
      return readMlp(take, spec, block);
  }
}

/** Runs a block's reference forward over the pass's rows (its weights read by {@link readBlock}). */
export function blockRef(pass: RefPass, block: Block, w: BlockWeights): void {
  if (block.kind === 'attention' && w.kind === 'attention') attentionRef(pass, block, w);
  else if (block.kind === 'linear' && w.kind === 'linear') linearRef(pass, block, w);
  else if (block.kind === 'conv' && w.kind === 'conv') shortConvRef(pass, block, w);
  else if (block.kind === 'mlp' && w.kind === 'mlp') mlpRef(pass, block, w);
  else throw new Error(`blockRef: ${block.kind} block given ${w.kind} weights`);
}
