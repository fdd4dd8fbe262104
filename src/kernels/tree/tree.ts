import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { type WgslVariant, wgslVariant } from '../../gpu/wgsl.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';

const Params = defineUniforms('Params', {
  L: 'u32',
  n: 'u32',
  width: 'u32',
  maxSlots: 'u32',
  tb: 'u32',
  last: 'u32',
});

/** Frontier nodes expanded per depth, and children ranked per expanded node (EAGLE-2's top-k). */
export const TREE_WIDTH = 4;
/** Most draft nodes a device-grown tree keeps (the engine's largest tree budget). */
export const TREE_NMAX = 32;
/** Most nodes a device-grown tree holds while growing. */
const MAXN = 256;
/** Most draft passes (depths) one step may grow: every pass adds at most WIDTH² nodes. */
export const TREE_MAX_DEPTHS = Math.floor((MAXN - TREE_WIDTH) / (TREE_WIDTH * TREE_WIDTH));
const HEADER = 8;
const NODE = 8;
const STATE_WORDS = HEADER + TREE_WIDTH + 2 * (TREE_NMAX + 1) + MAXN * NODE;
/** Where the result's scores start (see tree.wgsl): after the header and four lists. */
const RESULT_SCORES = 8 + 3 * TREE_NMAX + TREE_NMAX + 1;
/** u32 words of a step's result (see tree.wgsl): 8 header words, then five lists. */
export const TREE_RESULT_WORDS = RESULT_SCORES + TREE_NMAX;

type Stage = 'INIT' | 'GROW' | 'PICK' | 'ACCEPT';
const STAGES: readonly Stage[] = ['INIT', 'GROW', 'PICK', 'ACCEPT'];

function treeWgsl(stage: Stage): WgslVariant {
  return wgslVariant(shaders.tree, Params, {
    WIDTH: TREE_WIDTH,
    MAXN,
    NMAX: TREE_NMAX,
    INIT: stage === 'INIT',
    GROW: stage === 'GROW',
    PICK: stage === 'PICK',
    ACCEPT: stage === 'ACCEPT',
  });
}

/** One speculative step's constants, written once per step. */
export interface TreeStepParams {
  /** Tokens in the draft cache (the context); tree nodes stand at positions L + depth. */
  L: number;
  /** Draft nodes to keep (the tree budget), 1..TREE_NMAX. */
  n: number;
  /** Children per expanded node and nodes expanded per draft pass: min(TREE_WIDTH, n). */
  width: number;
  /** Draft cache slots the growth may use after L (≤ 64, and L + maxSlots ≤ its capacity). */
  maxSlots: number;
  /** Rows the target has committed: the verify pass's row 0 stands there. */
  tb: number;
  /** The context's last token (the verify pass's row 0). */
  last: number;
}

/** The pass inputs of a runner that a tree kernel writes (see GpuRunner.io). */
export interface PassBuffers {
  ids: GPUBuffer; // [T] u32
  positions: GPUBuffer; // [T] u32
  slots: GPUBuffer; // [T] u32
  vis: GPUBuffer; // [T, 2] u32
  samplePositions: GPUBuffer; // [T] u32
}

/** What a step's result holds, as {@link readTreeResult} unpacks it. */
export interface TreeStepResult {
  /** The draft tree, depth-first: tokens and parents (-1 under the root). */
  tokens: number[];
  parents: number[];
  /** Accepted draft nodes, root to leaf. */
  accepted: number[];
  /** Tokens the target emits: the accepted drafts, then its own next choice. */
  emitted: number[];
  /** Each node's score (f32): the sum of its path's log weights, as ModelDrafter scores it. */
  scores: number[];
  /** Draft passes that expanded at least one node. */
  grown: number;
  /** Whether the growth stopped by itself (no frontier node could still join the tree). */
  done: boolean;
}

/** Unpacks a step's result words (tree.wgsl's layout). */
export function readTreeResult(w: Uint32Array): TreeStepResult {
  const m = w[0]!;
  const a = w[1]!;
  const tokens = Array.from(w.subarray(8, 8 + m));
  const parents = Array.from(w.subarray(8 + TREE_NMAX, 8 + TREE_NMAX + m), (p) => ((p | 0) < 0 ? -1 : p));
  const accepted = Array.from(w.subarray(8 + 2 * TREE_NMAX, 8 + 2 * TREE_NMAX + a));
  const emitted = Array.from(w.subarray(8 + 3 * TREE_NMAX, 8 + 3 * TREE_NMAX + a + 1));
  const scores = Array.from(new Float32Array(w.slice(RESULT_SCORES, RESULT_SCORES + m).buffer));
  return { tokens, parents, accepted, emitted, scores, grown: w[2]!, done: w[3] === 1 };
}

/**
 * The tree kernels of a speculative step run on the device (tree.wgsl): INIT, GROW after each
 * ranking of draft rows, PICK (the kept tree as the target's verify pass) and ACCEPT (the
 * longest accepted path and the target's commit slots). The algorithm is the drafter's CPU loop
 * (ModelDrafter's best-first growth, with f32 scores) and `longestAcceptedPath`, which serve as
 * its reference: the tests compare the trees and paths they give on the same model.
 */
export class DeviceTree {
  private readonly pipelines: Record<Stage, GPUComputePipeline>;
  private readonly uniform: UniformSlot<LayoutKeys<typeof Params>>;
  /** The growing tree and its verify layout (tree.wgsl's state). */
  private readonly state: GPUBuffer;
  /** [TREE_RESULT_WORDS] u32, the step's result. */
  readonly result: GPUBuffer;

  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
  ) {
    this.pipelines = {
      INIT: ctx.pipelines.get('tree', ...treeWgsl('INIT')),
      GROW: ctx.pipelines.get('tree', ...treeWgsl('GROW')),
      PICK: ctx.pipelines.get('tree', ...treeWgsl('PICK')),
      ACCEPT: ctx.pipelines.get('tree', ...treeWgsl('ACCEPT')),
    };
    this.uniform = new UniformSlot(ctx, Params, 'tree-params');
    this.state = createBuffer(ctx, STATE_WORDS * 4, 'tree-state');
    this.result = createBuffer(ctx, TREE_RESULT_WORDS * 4, 'tree-result');
  }

  /** Compiles the pipelines ahead of time, throwing GpuStepError with WGSL diagnostics on failure. */
  static async prepare(ctx: GpuContext): Promise<void> {
    await Promise.all(STAGES.map((s) => ctx.pipelines.prepare('tree', ...treeWgsl(s))));
  }

  /** Sets the step's constants (one uniform write when they change). Call before encoding a step. */
  setStep(p: TreeStepParams): void {
    if (!Number.isInteger(p.n) || p.n < 1 || p.n > TREE_NMAX)
      throw new InvalidInputError(`DeviceTree: budget n must be 1..${TREE_NMAX}, got ${p.n}`);
    if (!Number.isInteger(p.maxSlots) || p.maxSlots < 1 || p.maxSlots > 64)
      throw new InvalidInputError(`DeviceTree: maxSlots must be 1..64, got ${p.maxSlots}`);
    if (p.width !== Math.min(TREE_WIDTH, p.n))
      throw new InvalidInputError(
        `DeviceTree: width must be min(${TREE_WIDTH}, n) = ${Math.min(TREE_WIDTH, p.n)}, got ${p.width}`,
      );
    if (!Number.isInteger(p.L) || p.L < 1)
      throw new InvalidInputError(`DeviceTree: the context length L must be ≥ 1, got ${p.L}`);
    this.uniform.write(p);
  }

  /** Resets the tree; `picks` ([width, 2] u32) gets the ranking of the draft's last scored row. */
  encodeInit(pass: GPUComputePassEncoder, picks: GPUBuffer): void {
    this.run(pass, 'INIT', [picks]);
  }

  /**
   * Appends the children ranked into `children` ([width, width, 2] u32, TopKChildren's output)
   * and writes the next draft pass's inputs into `draft` and the next ranking's rows into `picks`.
   */
  encodeGrow(pass: GPUComputePassEncoder, children: GPUBuffer, picks: GPUBuffer, draft: PassBuffers): void {
    this.run(pass, 'GROW', [children, picks, draft.ids, draft.positions, draft.slots, draft.vis]);
  }

  /** Keeps the best n nodes and writes the target's verify pass (n + 1 rows) into `target`. */
  encodePick(pass: GPUComputePassEncoder, target: PassBuffers): void {
    this.run(pass, 'PICK', [
      target.ids,
      target.positions,
      target.slots,
      target.vis,
      target.samplePositions,
      this.result,
    ]);
  }

  /** Walks the accepted path over the target's sampled `choices` ([n + 1] u32); writes `commit` ([n + 1] u32). */
  encodeAccept(pass: GPUComputePassEncoder, choices: GPUBuffer, commit: GPUBuffer): void {
    this.run(pass, 'ACCEPT', [choices, this.result, commit]);
  }

  private run(pass: GPUComputePassEncoder, stage: Stage, buffers: GPUBuffer[]): void {
    const pipeline = this.pipelines[stage];
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, this.binds.get(pipeline, [this.uniform.buffer, this.state, ...buffers]));
    this.ctx.counter.dispatch(pass, 1);
  }

  destroy(): void {
    this.uniform.destroy();
    this.state.destroy();
    this.result.destroy();
  }
}
