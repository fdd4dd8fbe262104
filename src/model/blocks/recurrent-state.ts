// The reference's state of the recurrent layers, the linear-attention (Gated DeltaNet) and the
// short-convolution (LFM2) ones: per layer, the state after the committed prefix and after each row
// of the last forward (linear.ts and shortconv.ts advance it).
import { layerKind, linearSizes, type ModelSpec } from '../spec/spec.js';

/**
 * A recurrent layer's state after some token: the convolution's window and, for a Gated DeltaNet,
 * the recurrent state.
 */
export interface LinearState {
  /**
   * [convKernel - 1, convChannels] the last inputs of q | k | v, oldest first; a short convolution's
   * [kernel - 1, H] last rows of B · x.
   */
  readonly conv: Float32Array;
  /** [valueHeads, keyDim, valueDim]; empty for a short convolution. */
  readonly S: Float32Array;
}

/**
 * The reference's recurrent-layer states: per layer, the state after the committed prefix, and the
 * state after each row of the last forward (a tree row's state is its parent's advanced by its
 * token, so no row sees a sibling's). Committing a path keeps the state after its last node; the
 * state cannot roll back to an earlier length, only start again from zeros.
 */
export class LinearStates {
  private committed = new Map<number, LinearState>();
  private rows = new Map<number, LinearState[]>();

  constructor(private readonly spec: ModelSpec) {}

  /** The state row `parent` left (-1: the committed prefix's; zeros on an empty cache), copied. */
  before(layer: number, parent: number, empty: boolean): LinearState {
    const from = parent >= 0 ? this.rows.get(layer)![parent]! : empty ? undefined : this.committed.get(layer);
    if (from) return { conv: from.conv.slice(), S: from.S.slice() };
    if (layerKind(this.spec, layer) === 'conv') {
      const window = (this.spec.shortConv!.kernel - 1) * this.spec.hidden;
      return { conv: new Float32Array(window), S: new Float32Array(0) };
    }
    const la = this.spec.linearAttention!;
    return {
      conv: new Float32Array((la.convKernel - 1) * linearSizes(this.spec).convChannels),
      S: new Float32Array(la.valueHeads * la.keyDim * la.valueDim),
    };
  }

  /** Starts a forward's rows for `layer`. */
  beginRows(layer: number): LinearState[] {
    const list: LinearState[] = [];
    this.rows.set(layer, list);
    return list;
  }

  /** Keeps the state after node `last` of the last forward as every layer's committed state. */
  commit(last: number): void {
    for (const [layer, list] of this.rows) this.committed.set(layer, list[last]!);
    this.rows.clear();
  }

  /** Back to an empty sequence. */
  reset(): void {
    this.committed.clear();
    this.rows.clear();
  }
}
