// The plain-TS reference of a mixture layer's routing: router logits to each row's chosen experts
// and their weights (the route kernel's reference, and the mixture block's reference forward's).

/** How a router's logits choose experts (a spec's `MoeSpec` is one). */
export interface RouteOptions {
  readonly experts: number;
  readonly topK: number;
  /** Softmax over the experts, or a sigmoid of each. */
  readonly scoring: 'softmax' | 'sigmoid';
  /** The chosen scores are divided by their sum plus `renormEps`. */
  readonly renormalize: boolean;
  readonly renormEps: number;
  /** The weights are multiplied by this. */
  readonly routedScale: number;
}

/** The experts each row runs and their weights: row t's j-th choice at t · topK + j, best first. */
export interface Routing {
  readonly experts: Int32Array; // [T, topK]
  readonly weights: Float32Array; // [T, topK]
}

/**
 * The routing of T rows from their router logits [T, E]: scores (softmax over the experts, or a
 * sigmoid each), the topK best by score plus the selection bias `bias` [E] (ties: the lower
 * expert), their unbiased scores divided by their sum plus `renormEps` where `renormalize`, times
 * `routedScale`, and with `expertScale` [E] times the chosen expert's scale (Gemma 4's
 * `per_expert_scale`). Scores and weights are rounded to f32 as PyTorch holds them; sums are f64.
 */
export function routeRef(
  logits: Float32Array,
  o: RouteOptions,
  bias?: Float32Array,
  expertScale?: Float32Array,
): Routing {
  const E = o.experts;
  const k = o.topK;
  const T = logits.length / E;
  const experts = new Int32Array(T * k);
  const weights = new Float32Array(T * k);
  const scores = new Float32Array(E);
  const order = Array.from({ length: E }, (_, e) => e);
  for (let t = 0; t < T; t++) {
    const row = logits.subarray(t * E, (t + 1) * E);
    if (o.scoring === 'softmax') {
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v);
      let sum = 0;
      for (let e = 0; e < E; e++) sum += Math.exp(row[e]! - max);
      for (let e = 0; e < E; e++) scores[e] = Math.exp(row[e]! - max) / sum;
    } else {
      for (let e = 0; e < E; e++) scores[e] = 1 / (1 + Math.exp(-row[e]!));
    }
    const key = (e: number) => (bias ? Math.fround(scores[e]! + bias[e]!) : scores[e]!);
    order.sort((a, b) => key(b) - key(a) || a - b);
    let sum = 0;
    for (let j = 0; j < k; j++) sum += scores[order[j]!]!;
    const div = o.renormalize ? Math.fround(sum) + o.renormEps : 1;
    for (let j = 0; j < k; j++) {
      experts[t * k + j] = order[j]!;
      const w = Math.fround(Math.fround(scores[order[j]!]! / div) * o.routedScale);
      weights[t * k + j] = expertScale ? Math.fround(w * expertScale[order[j]!]!) : w;
    }
  }
  return { experts, weights };
}
