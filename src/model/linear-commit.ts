// What a runner with linear-attention layers adds to committing a path: a tree's path (or a
// chain's prefix) runs again as a chain into each layer's other state copy, in the submission that
// compacts the KV caches; and what those layers hold on the GPU.
import type { ModelSpec } from '../formats/spec.js';
import { writeBuffer } from '../gpu/buffers.js';
import type { Block } from './blocks/blocks.js';
import { encodeLinearCommit, linearStateBytes, projWidth } from './blocks/linear-gpu.js';
import { encodeCompaction, type RunnerCursor, type RunnerParts } from './gpu-pass.js';

/**
 * Commits a path of the last forward that its pass did not leave the state after (a tree's, or a
 * chain's prefix), in one write and one submission: the path's rows and slots staged, the KV
 * caches compacted along it, and each linear layer's state advanced along it as a chain
 * (encodeLinearCommit) into its other copy. Steps the cursor's length and state version.
 */
export function commitLinearPath(parts: RunnerParts, cur: RunnerCursor, path: readonly number[]): void {
  const { a, k, ctx } = parts;
  const { linCommit, linCount, linBase, linRows, proj, mixed } = a;
  if (!linCommit || !linCount || !linBase || !linRows || !proj || !mixed || !k.deltaNet || !k.gatherProj)
    throw new Error('commit: the runner has no linear-attention buffers');
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
  const kernels = { deltaNet: k.deltaNet, gather: k.gatherProj };
  parts.blocks.forEach((block, i) => {
    const state = parts.states[i];
    const w = parts.w.blocks[i]!;
    if (block.kind !== 'linear' || w.kind !== 'linear' || !state || !('pair' in state)) return;
    encodeLinearCommit(pass, kernels, { proj, mixed }, w, state, cur.version, inputs);
  });
  pass.end();
  ctx.counter.submit([enc.finish()]);
  cur.committed += n;
  cur.version++;
  cur.lastTokens = 0;
}

/** What a runner's linear-attention layers hold on the GPU, bytes. */
export interface LinearMemory {
  /** Their states: both copies, every layer. */
  readonly stateBytes: number;
  /** Per row of a pass (a draft tree's node): the projection rows a commit reads again. */
  readonly bytesPerTreeNode: number;
}

/** {@link LinearMemory} of a model's blocks; undefined without linear-attention layers. */
export function linearMemory(spec: ModelSpec, blocks: readonly Block[]): LinearMemory | undefined {
  if (!spec.linearAttention) return undefined;
  const layers = blocks.filter((b) => b.kind === 'linear').length;
  return { stateBytes: layers * linearStateBytes(spec), bytesPerTreeNode: layers * 4 * projWidth(spec) };
}
