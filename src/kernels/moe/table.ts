// The routing of a mixture layer's rows as the GPU holds it (written by the route kernel, read by
// the expert matmuls and the combine kernel), and its plain-TS builder, the reference of the route
// kernel's grouping. Rows that chose one expert form its group; groups are in expert order and a
// group's members in (row, choice) order, so each chosen expert's weights are read once per pass
// for all its rows (a counting sort of the T · k choices).
//
// Layout (u32 words), for at most `maxRows` rows of `topK` choices among `experts` experts:
//   [0]            n: the groups (experts chosen by some row)
//   [1 .. 3]       tallies each routing adds to, from a zeroed buffer on: the groups (experts
//                  read), the rows routed, the routings (a layer's pass each)
//   [4 + 4g ..]    group g < n: expert, first member, member count, unused
//   [members + s]  member s < T · k (sorted position): the row it belongs to
//   [positions + c] choice c = t · k + j: its sorted position (where its expert's output lands)
// Each choice's routing weight is in a separate f32 buffer [maxRows · k] (then each row's shared
// expert weight [maxRows]).

/** The sizes a routing table is laid out for. */
export interface RouteShape {
  readonly experts: number;
  readonly topK: number;
  /** Rows of a pass, at most. */
  readonly maxRows: number;
}

/** Most groups a pass can have: min(experts, maxRows · topK). */
export function maxGroups(s: RouteShape): number {
  return Math.min(s.experts, s.maxRows * s.topK);
}

/** Word offsets of the table's parts, and its size in words. */
export function routeTableLayout(s: RouteShape): {
  readonly groups: number;
  readonly members: number;
  readonly positions: number;
  readonly words: number;
} {
  const groups = 4;
  const members = groups + 4 * maxGroups(s);
  const positions = members + s.maxRows * s.topK;
  return { groups, members, positions, words: positions + s.maxRows * s.topK };
}

/**
 * f32 words of the buffer of routing weights: each choice's weight [maxRows · topK] (row t's j-th
 * at t · topK + j), then, with a shared expert, each row's shared-expert weight [maxRows].
 */
export function routeWeightWords(s: RouteShape, shared: boolean): number {
  return s.maxRows * (s.topK + (shared ? 1 : 0));
}

/** The table of `experts` [T · k] (each row's choices) as the route kernel writes it. */
export function routeTableRef(s: RouteShape, experts: Int32Array): Uint32Array {
  const L = routeTableLayout(s);
  const out = new Uint32Array(L.words);
  const n = experts.length;
  const counts = new Uint32Array(s.experts);
  for (const e of experts) counts[e]!++;
  const first = new Uint32Array(s.experts);
  let groups = 0;
  let at = 0;
  for (let e = 0; e < s.experts; e++) {
    first[e] = at;
    if (counts[e] === 0) continue;
    out.set([e, at, counts[e]!], L.groups + 4 * groups++);
    at += counts[e]!;
  }
  out[0] = groups;
  // The tallies after this one routing, from a zeroed table.
  out[1] = groups;
  out[2] = n / s.topK;
  out[3] = 1;
  const next = first.slice();
  for (let c = 0; c < n; c++) {
    const pos = next[experts[c]!]!++;
    out[L.members + pos] = Math.floor(c / s.topK);
    out[L.positions + c] = pos;
  }
  return out;
}
