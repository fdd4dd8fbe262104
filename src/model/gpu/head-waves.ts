// A draft head's tree forward on its GPU runner (model/draft/gpu-head.ts), in waves: a row that
// reads the output of a row of the same forward (its parent's) runs in a later pass. Loaded by
// GpuRunner.forward only when the runner holds a head.
import { InvalidInputError } from '../../errors.js';
import type { GpuTimer } from '../../gpu/timing.js';
import { visWords } from '../../kernels/attention/attention-split.js';
import type { SamplerSpec } from '../runner.js';
import type { DraftTree } from '../tree.js';
import { encodePass, type RunnerParts, readStaging, stageInputs } from './pass.js';

/**
 * The waves of a draft head's forward of `tree` after `base` rows: 0 for a row whose input is
 * known before the forward (the target's feature p - 1 when p - 1 < known, or a committed row's
 * output), else one more than its parent's. Rows of one wave run in one pass.
 */
export function headWaves(tree: DraftTree, base: number, known: number): number[] {
  const waves: number[] = [];
  tree.parents.forEach((parent, i) => {
    const p = base + tree.depth[i]!;
    waves.push((p >= 1 && p - 1 < known) || parent < 0 ? 0 : waves[parent]! + 1);
  });
  return waves;
}

/** The rows of a {@link forwardWaves} forward: its tokens, the rows it scores, where it starts. */
export interface WaveRows {
  tokens: readonly number[];
  picked: readonly number[];
  base: number;
  sampler: SamplerSpec;
  masks: Uint32Array | undefined;
}

/**
 * A draft head's tree forward whose rows read rows of the same forward (see {@link headWaves}):
 * one submission per wave runs the layer over that wave's rows (their outputs go to the feature
 * store at their slots, where the next wave's rows read them), then one more scores the rows
 * from their outputs. Returns the sampled ids of `picked`.
 */
export async function forwardWaves(
  parts: RunnerParts,
  profiler: GpuTimer | undefined,
  tree: DraftTree,
  waves: readonly number[],
  { tokens, picked, base, sampler, masks }: WaveRows,
): Promise<Int32Array> {
  const { ctx, a, feats } = parts;
  if (!feats) throw new InvalidInputError('forward: a draft head keeps its outputs (features: true)');
  const T = tokens.length;
  const vis = visWords(tree.end);
  const rowsOf = (w: number) => tokens.map((_, i) => i).filter((i) => waves[i] === w);
  for (let w = 0; w <= Math.max(...waves); w++) {
    const rows = rowsOf(w);
    const enc = ctx.device.createCommandEncoder({ label: `forward-wave-${w}` });
    stageInputs(ctx, a, enc, {
      ids: rows.map((i) => tokens[i]!),
      positions: rows.map((i) => base + tree.depth[i]!),
      slots: rows.map((i) => base + i),
      vis: rows.flatMap((i) => [vis[2 * i]!, vis[2 * i + 1]!]),
      rows: [],
      samplePositions: [],
    });
    encodePass(parts, profiler, enc, rows.length, 0, base, sampler, {
      lastSlot: base + rows.at(-1)!,
      score: false,
    });
    ctx.counter.submit([enc.finish()]);
  }
  const R = picked.length;
  const H = parts.spec.hidden;
  const enc = ctx.device.createCommandEncoder({ label: 'forward-scores' });
  stageInputs(ctx, a, enc, {
    positions: [],
    slots: [],
    vis: [],
    rows: picked,
    samplePositions: picked.map((i) => base + tree.depth[i]! + 1),
  });
  enc.copyBufferToBuffer(feats.store, base * H * 4, a.x, 0, T * H * 4);
  encodePass(parts, profiler, enc, T, R, base, sampler, { layers: false, masks });
  enc.copyBufferToBuffer(a.out, 0, a.staging, 0, R * 4);
  ctx.counter.submit([enc.finish()]);
  return new Int32Array(await readStaging(ctx, a.staging, R * 4));
}
