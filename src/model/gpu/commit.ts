// What a runner with recurrent layers (linear-attention, short-convolution) adds to committing a
// path: a tree's path (or a chain's prefix) runs again as a chain into each layer's other state
// copy, in the submission that compacts the KV caches; and what those layers hold on the GPU.

import { writeBuffer } from '../../gpu/buffers.js';
import type { Block } from '../blocks/blocks.js';
import { encodeLinearCommit, linearStateBytes, projWidth } from '../blocks/deltanet/gpu.js';
import { encodeShortConvCommit, shortConvStateBytes } from '../blocks/shortconv/gpu.js';
import { isRecurrent, type ModelSpec } from '../spec/spec.js';
import { encodeCompaction, type RunnerCursor, type RunnerParts } from './pass.js';

/**
 * Commits a path of the last forward that its pass did not leave the state after (a tree's, or a
 * chain's prefix), in one write and one submission: the path's rows and slots staged, the KV
 * caches compacted along it, and each recurrent layer's state advanced along it as a chain
 * (encodeLinearCommit, encodeShortConvCommit) into its other copy. Steps the cursor's length and
 * state version.
 */
export function commitLinearPath(parts: RunnerParts, cur: RunnerCursor, path: readonly number[]): void {
  const { a, k, ctx } = parts;
  const { linCommit, linCount, linBase, linRows, proj, mixed } = a;
  if (!linCommit || !linCount || !linBase || !linRows || !proj || !mixed)
    throw new Error('commit: the runner has no recurrent-layer buffers');
  const n = path.length;
  const base = cur.committed;
  writeBuffer(ctx, linCommit, Uint32Array.from([n, base, ...path, ...path.map((i) => base + i)]));
  const enc = ctx.device.createCommandEncoder({ label: 'commit' });
  enc.copyBufferToBuffer(linCommit, 0, linCount, 0, 4);
  enc.copyBufferToBuffer(linCommit, 4, linBase, 0, 4);
  enc.copyBufferToBuffer(linCommit, 8, linRows, 0, n * 4);
  enc.copyBufferToBuffer(linCommit, 8 + n * 4, a.commitSlots, 0, n * 4);
  const pass = enc.beginComputePass({ label: 'commit' });
  if (path.some((node, i) => node !== i)) encodeCompaction(parts, pass, n, base);
  const inputs = { rows: linRows, count: linCount, base: linBase, n };
  parts.blocks.forEach((block, i) => {
    const state = parts.states[i];
    const w = parts.w.blocks[i]!;
    if (block.kind === 'linear' && w.kind === 'linear' && state && 'pair' in state) {
      if (!k.deltaNet || !k.gatherProj) throw new Error('commit: the runner has no linear-attention kernels');
      const kernels = { deltaNet: k.deltaNet, gather: k.gatherProj };
      encodeLinearCommit(pass, kernels, { proj, mixed }, w, state, cur.version, inputs);
    } else if (block.kind === 'conv' && w.kind === 'conv' && state && 'windows' in state) {
      if (!k.shortConv || !k.gatherConv)
        throw new Error('commit: the runner has no short-convolution kernels');
      const kernels = { shortConv: k.shortConv, gather: k.gatherConv };
      encodeShortConvCommit(pass, kernels, { proj, mixed }, w, state, cur.version, inputs);
    }
  });
  pass.end();
  ctx.counter.submit([enc.finish()]);
  cur.committed += n;
  cur.version++;
  cur.lastTokens = 0;
}

/** What a runner's recurrent (linear-attention, short-convolution) layers hold on the GPU, bytes. */
export interface LinearMemory {
  /** Their states: both copies, every layer. */
  readonly stateBytes: number;
  /** Per row of a pass (a draft tree's node): the projection rows a commit reads again. */
  readonly bytesPerTreeNode: number;
}

/** {@link LinearMemory} of a model's blocks; undefined without recurrent layers. */
export function linearMemory(spec: ModelSpec, blocks: readonly Block[]): LinearMemory | undefined {
  if (!isRecurrent(spec)) return undefined;
  const linear = blocks.filter((b) => b.kind === 'linear').length;
  const conv = blocks.filter((b) => b.kind === 'conv').length;
  const l = linear > 0 ? { state: linearStateBytes(spec), row: 4 * projWidth(spec) } : { state: 0, row: 0 };
  const c = conv > 0 ? { state: shortConvStateBytes(spec), row: 4 * 3 * spec.hidden } : { state: 0, row: 0 };
  return {
    stateBytes: linear * l.state + conv * c.state,
    bytesPerTreeNode: linear * l.row + conv * c.row,
  };
}
