// The plain-TS reference of attention over a KV cache (decode, causal prefill, tree verification),
// the oracle of split attention's tests, and the shapes and tree layouts its callers share.
import { InvalidInputError } from '../../errors.js';
import { type KvShape, kvRowOf } from '../kv/kv.js';

/**
 * Static shape of attention over one model's KV cache (every layer shares it): the cache's shape and
 * format (kvHeads divides heads for GQA) plus the query heads.
 */
export interface AttentionShape extends KvShape {
  /** Query heads. */
  heads: number;
  /** Softmax scale; defaults to 1/√headDim. */
  scale?: number;
}

/**
 * `ends` of a chain of `t` rows (every row's subtree reaches the last row): attention over it is
 * causal prefill, and with t = 1 decode. Any value ≥ t - 1 acts the same, so one buffer filled
 * with 0xffffffff serves every causal chunk and decode step.
 */
export function chainEnds(t: number): Uint32Array {
  return new Uint32Array(t).fill(t - 1);
}

/**
 * `ends[i]`, the last row of node i's subtree, from a parent array of a tree laid out depth-first
 * (`parents[i] < i`, or -1 for a root). Throws when the layout is not depth-first (a node's subtree
 * must be a contiguous range starting at the node).
 */
export function subtreeEnds(parents: ArrayLike<number>): Uint32Array {
  const n = parents.length;
  const ends = Uint32Array.from({ length: n }, (_, i) => i);
  // Children come after parents, so a reverse sweep has every subtree finished before its parent.
  for (let i = n - 1; i >= 0; i--) {
    const par = parents[i]!;
    if (par >= i || par < -1 || !Number.isInteger(par))
      throw new InvalidInputError(`subtreeEnds: parents[${i}] = ${par} must be -1 or in [0, ${i})`);
    if (par >= 0) ends[par] = Math.max(ends[par]!, ends[i]!);
  }
  // Depth-first order: every row in [i, ends[i]] must descend from i (ancestors have lower ids).
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j <= ends[i]!; j++) {
      let a = parents[j]!;
      while (a > i) a = parents[a]!;
      if (a !== i)
        throw new InvalidInputError(`subtreeEnds: node ${j} lies in ${i}'s range but is not its descendant`);
    }
  }
  return ends;
}

/** Inputs of {@link attentionRef}: cache contents and the rows to attend from. */
export interface AttentionInputs extends AttentionShape {
  /** [T, heads, headDim] queries. */
  q: Float32Array;
  /**
   * [capacity, kvHeads, headDim] keys (slots < base + T used), or with a `ring` [ring, kvHeads,
   * headDim], slot s at row s mod ring.
   */
  k: Float32Array;
  /** [capacity, kvHeads, headDim] values, or [ring, kvHeads, headDim] as `k`. */
  v: Float32Array;
  /** [T] last row of each row's subtree ({@link chainEnds} for causal). */
  ends: Uint32Array;
  /** Prefix length: row r stands at slot base + r. */
  base: number;
  /** Slots below it are seen only by their own row (default 0), as in `SplitAttentionShape`. */
  firstSlot?: number;
  /**
   * Sliding window (Gemma 3's and Mistral's local layers): a row at position p sees a key at
   * position k only if p - k < window. 0 or absent: no window.
   */
  window?: number;
  /**
   * [T] each row's position, as RoPE reads it (default base + r, a chain; a tree's rows stand at
   * base + depth). Prefix slot s < base stands at position s, tree slot base + j at positions[j].
   */
  positions?: ArrayLike<number>;
}

/**
 * Plain-TS attention with the same visibility rule as the kernels (prefix slots, then tree slots
 * base + j with j ≤ r ≤ ends[j]; of the slots below `firstSlot` only the row's own; with a
 * `window`, only keys less than `window` positions behind the row's), max-subtracted softmax in
 * f64, GQA, output [T, heads, headDim]. Reads slot s at row s mod ring with a `ring`.
 */
export function attentionRef(a: AttentionInputs): Float32Array {
  const { heads, kvHeads, headDim: D, base, ends, firstSlot = 0, window = 0 } = a;
  const T = ends.length;
  const positions = a.positions ?? Array.from({ length: T }, (_, r) => base + r);
  if (positions.length !== T)
    throw new InvalidInputError(`attentionRef: ${positions.length} positions for ${T} rows`);
  if (!Number.isInteger(window) || window < 0)
    throw new InvalidInputError(`attentionRef: window must be an integer ≥ 0, got ${window}`);
  const scale = a.scale ?? 1 / Math.sqrt(D);
  const group = heads / kvHeads;
  const out = new Float32Array(T * heads * D);
  const positionOf = (s: number) => (s < base ? s : positions[s - base]!);
  for (let r = 0; r < T; r++) {
    const inWindow = (s: number) => window === 0 || positions[r]! - positionOf(s) < window;
    for (let h = 0; h < heads; h++) {
      const kvh = Math.floor(h / group);
      const qo = (r * heads + h) * D;
      const slots: number[] = [];
      for (let s = 0; s <= base + r; s++)
        if ((s < base || ends[s - base]! >= r) && (s >= firstSlot || s === base + r) && inWindow(s))
          slots.push(s);
      const at = slots.map((s) => (kvRowOf(a, s) * kvHeads + kvh) * D); // each key's offset in k and v
      const sc = at.map((o) => {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += a.q[qo + d]! * a.k[o + d]!;
        return dot * scale;
      });
      const m = Math.max(...sc);
      const w = sc.map((x) => Math.exp(x - m));
      const z = w.reduce((x, y) => x + y, 0);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        at.forEach((o, i) => {
          acc += w[i]! * a.v[o + d]!;
        });
        out[qo + d] = acc / z;
      }
    }
  }
  return out;
}
