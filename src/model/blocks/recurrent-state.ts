// The reference's state of the recurrent blocks (deltanet/, shortconv/): per layer, the state after
// the committed prefix and after each row of the last forward, which those blocks advance.

/**
 * A recurrent layer's state after some token: the convolution's window and, for a Gated DeltaNet,
 * the recurrent state.
 */
export interface RecurrentState {
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
export class RecurrentStates {
  private committed = new Map<number, RecurrentState>();
  private rows = new Map<number, RecurrentState[]>();

  /**
   * The state row `parent` left (-1: the committed prefix's), copied; `zeros()` on an empty cache
   * or before the layer's first commit.
   */
  before(layer: number, parent: number, empty: boolean, zeros: () => RecurrentState): RecurrentState {
    const from = parent >= 0 ? this.rows.get(layer)![parent]! : empty ? undefined : this.committed.get(layer);
    return from ? { conv: from.conv.slice(), S: from.S.slice() } : zeros();
  }

  /** Starts a forward's rows for `layer`. */
  beginRows(layer: number): RecurrentState[] {
    const list: RecurrentState[] = [];
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
