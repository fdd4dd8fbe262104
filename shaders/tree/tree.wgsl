// tree: a speculative step's draft tree grown, laid out and verified on the GPU, so the CPU
// receives only the (token, parent) lists and the accepted path. The same algorithm as the
// drafter's CPU loop (decode/model-drafter.ts, EAGLE-2 best-first growth) and sample-and-match
// verification (decode/tree.ts longestAcceptedPath); growTreeRef (tree.ts) is the plain reference.
//
// Stages (renderWgsl flags), each one workgroup of one thread (a tree has at most MAXN nodes):
//   INIT    resets the tree: no nodes, no slots used; row 0 of the next ranking is the draft's last
//           scored row (the context's last token), its children at position L, under the root.
//   GROW    after the draft's children were ranked (TopKChildren, width per row): appends each ranked
//           row's children (parent: the node the row ran, or the root), with score = parent's
//           score + log weight (f32); then picks the frontier to expand next, as the CPU does: the
//           new nodes best first (ties to the earlier), at most width, each scoring above the n-th
//           best score of the tree so far (when it has n nodes; a child never outscores its parent,
//           so a node at or below that bar cannot add to the final tree), each taking one cache
//           slot of at most maxSlots. It writes the next draft pass's inputs: row r runs picked node
//           e at position L + depth(e) and slot L + (slots used before it), and sees the prefix
//           plus its ancestors' slots (vis, relative masks as in attention_split.wgsl); rows past
//           the picks repeat the last pick (same slot, same values: harmless), and with no pick
//           at all the tree is done and one dummy row runs at slot L (never read again).
//   PICK    keeps the n best nodes (score, then shallower, then earlier: an ancestor always comes
//           first, so the set is ancestor-closed), lays them out depth-first with siblings in
//           creation order, and writes the target's verify pass: row 0 the context's last token at
//           slot tb, row i + 1 draft node i at slot tb + 1 + i, position tb + 1 + depth, padding
//           rows (fewer than n nodes) as leaves under row 0 that are never accepted; and the
//           proposal (tokens, parents, scores) into the result.
//   ACCEPT  after the target sampled every row: walks from row 0, accepting the first child (in
//           depth-first order) whose token is the target's choice at its parent; writes the
//           accepted nodes and the emitted tokens into the result, and the target's commit slots
//           (tb + row of each path entry, row 0 first; NONE past the path: kv_compact skips it).
//
// Bindings (group 0): 0 uniform Params { L, n, width, maxSlots, tb, last } in all (width ≤ WIDTH:
//   children per node and nodes per draft pass), then
//   INIT    1 state (rw); 2 picks: array<u32> [WIDTH, 2] (logits row, children's position).
//   GROW    1 state (rw); 2 children: array<u32> [width, width, 2] (token or NONE, log-weight bits);
//           3 picks (w); 4 ids, 5 positions, 6 slots: array<u32> [width]; 7 vis: array<u32>
//           [width, 2] (the draft runner's pass inputs, w).
//   PICK    1 state (rw); 2 ids, 3 positions, 4 slots: array<u32> [n + 1]; 5 vis [n + 1, 2];
//           6 samplePositions [n + 1] (the target runner's pass inputs, w); 7 result (w).
//   ACCEPT  1 state (read); 2 choices: array<u32> [n + 1] (the target's sampled ids); 3 result
//           (rw); 4 commit: array<u32> [n + 1] (the target's commit slots, w).
// state: array<u32>, HEADER words (0 count, 1 slots used, 2 done, 3 passes that expanded a node,
//   4 nodes kept by PICK), then rowNode [WIDTH] (the node each draft row ran: NONE padding, ROOT
//   for the context's last token), rowParent [NMAX + 1] and rowToken [NMAX + 1] (the verify
//   pass's tree), then MAXN nodes of NODE words (token, parent or NONE, depth, score bits, slot or
//   NONE, vis lo, vis hi, kept).
// result: array<u32> (see RESULT_* in tree.ts): 0 nodes m, 1 accepted a, 2 passes that expanded,
//   3 done, then tokens [NMAX], parents [NMAX] (i32 bits, -1 under the root), accepted node
//   indices [NMAX], emitted tokens [NMAX + 1], scores [NMAX] (f32 bits, each kept node's).
// Preconditions: n ≤ NMAX ≤ 63; maxSlots ≤ 64 and L + maxSlots ≤ the draft cache's capacity;
//   the number of GROW calls keeps count ≤ MAXN (width² new nodes each).

{{PARAMS}}

const WIDTH: u32 = {{WIDTH}}u;
const MAXN: u32 = {{MAXN}}u;
const NMAX: u32 = {{NMAX}}u;
const NONE: u32 = 0xffffffffu;
const ROOT: u32 = 0xfffffffeu;
const HEADER: u32 = 8u;
const ROW_NODE: u32 = HEADER;
const ROW_PARENT: u32 = ROW_NODE + WIDTH;
const ROW_TOKEN: u32 = ROW_PARENT + NMAX + 1u;
const NODES: u32 = ROW_TOKEN + NMAX + 1u;
const NODE: u32 = 8u;
const R_TOKENS: u32 = 8u;
const R_PARENTS: u32 = R_TOKENS + NMAX;
const R_ACCEPTED: u32 = R_PARENTS + NMAX;
const R_EMITTED: u32 = R_ACCEPTED + NMAX;
const R_SCORES: u32 = R_EMITTED + NMAX + 1u;
const NEG_INF: f32 = -3.4028234663852886e38;

@group(0) @binding(0) var<uniform> p: Params;

fn node_at(i: u32, f: u32) -> u32 {
  return state[NODES + i * NODE + f];
}

//#if !ACCEPT
fn set_node(i: u32, f: u32, v: u32) {
  state[NODES + i * NODE + f] = v;
}
//#endif

fn score_of(i: u32) -> f32 {
  return bitcast<f32>(node_at(i, 3u));
}

// A 64-bit mask (x low, y high) shifted toward older slots by s bits.
fn shl64(m: vec2<u32>, s: u32) -> vec2<u32> {
  if (s >= 64u) {
    return vec2<u32>(0u, 0u);
  }
  if (s >= 32u) {
    return vec2<u32>(0u, m.x << (s - 32u));
  }
  if (s == 0u) {
    return m;
  }
  return vec2<u32>(m.x << s, (m.y << s) | (m.x >> (32u - s)));
}

//#if INIT
@group(0) @binding(1) var<storage, read_write> state: array<u32>;
@group(0) @binding(2) var<storage, read_write> picks: array<u32>;

@compute @workgroup_size(1)
fn main() {
  for (var i = 0u; i < HEADER; i++) {
    state[i] = 0u;
  }
  state[ROW_NODE] = ROOT;
  for (var r = 1u; r < WIDTH; r++) {
    state[ROW_NODE + r] = NONE;
  }
  picks[0] = 0u;
  picks[1] = p.L;
}
//#endif

//#if GROW
@group(0) @binding(1) var<storage, read_write> state: array<u32>;
@group(0) @binding(2) var<storage, read> children: array<u32>;
@group(0) @binding(3) var<storage, read_write> picks: array<u32>;
@group(0) @binding(4) var<storage, read_write> ids: array<u32>;
@group(0) @binding(5) var<storage, read_write> positions: array<u32>;
@group(0) @binding(6) var<storage, read_write> slots: array<u32>;
@group(0) @binding(7) var<storage, read_write> vis: array<u32>;

// The n-th best score of nodes 0..count-1, counting ties (n ≤ count): the best score below the
// last one found, until n nodes hold the scores found so far.
fn nth_best(count: u32) -> f32 {
  var bar = 3.4028234663852886e38; // scores are ≤ 0
  var left = p.n;
  loop {
    var best = NEG_INF;
    var ties = 0u;
    for (var i = 0u; i < count; i++) {
      let s = score_of(i);
      if (s >= bar) {
        continue;
      }
      if (ties == 0u || s > best) {
        best = s;
        ties = 1u;
      } else if (s == best) {
        ties++;
      }
    }
    if (ties == 0u || ties >= left) {
      bar = best;
      break;
    }
    left -= ties;
    bar = best;
  }
  // Returned after the loop: naga (wgpu) requires a return at the end of the function.
  return bar;
}

@compute @workgroup_size(1)
fn main() {
  var count = state[0];
  let first = count;
  if (state[2] == 0u) {
    for (var r = 0u; r < p.width; r++) {
      let ran = state[ROW_NODE + r];
      if (ran == NONE) {
        continue;
      }
      var parent = NONE;
      var depth = 0u;
      var base = 0.0;
      if (ran != ROOT) {
        parent = ran;
        depth = node_at(ran, 2u) + 1u;
        base = score_of(ran);
      }
      for (var c = 0u; c < p.width; c++) {
        let token = children[(r * p.width + c) * 2u];
        if (token == NONE || count >= MAXN) {
          continue;
        }
        let lw = bitcast<f32>(children[(r * p.width + c) * 2u + 1u]);
        set_node(count, 0u, token);
        set_node(count, 1u, parent);
        set_node(count, 2u, depth);
        set_node(count, 3u, bitcast<u32>(base + lw));
        set_node(count, 4u, NONE);
        set_node(count, 5u, 0u);
        set_node(count, 6u, 0u);
        set_node(count, 7u, 0u);
        count++;
      }
    }
  }
  state[0] = count;

  // The frontier: the new nodes, best first, above the bar, while slots remain.
  var bar = NEG_INF;
  if (count >= p.n) {
    bar = nth_best(count);
  }
  var picked = 0u;
  var used = state[1];
  var lastBest = 3.4028234663852886e38;
  var lastIndex = 0u;
  var havePrev = false;
  for (var turn = 0u; turn < p.width; turn++) {
    if (state[2] != 0u || used >= p.maxSlots) {
      break;
    }
    // The best new node after the previous pick in (score desc, index asc) order.
    var best = NONE;
    var bestScore = NEG_INF;
    for (var i = first; i < count; i++) {
      let s = score_of(i);
      let after = !havePrev || s < lastBest || (s == lastBest && i > lastIndex);
      if (after && (best == NONE || s > bestScore)) {
        best = i;
        bestScore = s;
      }
    }
    if (best == NONE || bestScore <= bar) {
      break;
    }
    havePrev = true;
    lastBest = bestScore;
    lastIndex = best;
    // Its slot, and what it sees: the prefix and its ancestors (relative to its own slot).
    let slot = p.L + used;
    used++;
    let parent = node_at(best, 1u);
    var m = vec2<u32>(0xffffffffu, 0xffffffffu);
    var parentSlot = p.L - 1u;
    if (parent != NONE) {
      m = vec2<u32>(node_at(parent, 5u), node_at(parent, 6u));
      parentSlot = node_at(parent, 4u);
    }
    m = shl64(m, slot - parentSlot);
    m.x |= 1u;
    set_node(best, 4u, slot);
    set_node(best, 5u, m.x);
    set_node(best, 6u, m.y);
    let depth = node_at(best, 2u);
    ids[picked] = node_at(best, 0u);
    positions[picked] = p.L + depth;
    slots[picked] = slot;
    vis[2u * picked] = m.x;
    vis[2u * picked + 1u] = m.y;
    picks[2u * picked] = picked;
    picks[2u * picked + 1u] = p.L + depth + 1u;
    state[ROW_NODE + picked] = best;
    picked++;
  }
  state[1] = used;
  if (picked == 0u) {
    // Done: one dummy row at slot L (a scratch slot nothing reads again).
    state[2] = 1u;
    ids[0] = 0u;
    positions[0] = p.L;
    slots[0] = p.L;
    vis[0] = 1u;
    vis[1] = 0u;
    picks[0] = 0u;
    picks[1] = p.L + 1u;
    state[ROW_NODE] = NONE;
    picked = 1u;
  } else {
    state[3] += 1u;
  }
  for (var r = picked; r < p.width; r++) {
    ids[r] = ids[picked - 1u];
    positions[r] = positions[picked - 1u];
    slots[r] = slots[picked - 1u];
    vis[2u * r] = vis[2u * (picked - 1u)];
    vis[2u * r + 1u] = vis[2u * (picked - 1u) + 1u];
    picks[2u * r] = picks[2u * (picked - 1u)];
    picks[2u * r + 1u] = picks[2u * (picked - 1u) + 1u];
    state[ROW_NODE + r] = NONE;
  }
}
//#endif

//#if PICK
@group(0) @binding(1) var<storage, read_write> state: array<u32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> positions: array<u32>;
@group(0) @binding(4) var<storage, read_write> slots: array<u32>;
@group(0) @binding(5) var<storage, read_write> vis: array<u32>;
@group(0) @binding(6) var<storage, read_write> samplePositions: array<u32>;
@group(0) @binding(7) var<storage, read_write> result: array<u32>;

// Whether node a ranks before node b in the final choice: score, then shallower, then earlier.
fn ranks_before(a: u32, b: u32) -> bool {
  let sa = score_of(a);
  let sb = score_of(b);
  if (sa != sb) {
    return sa > sb;
  }
  let da = node_at(a, 2u);
  let db = node_at(b, 2u);
  if (da != db) {
    return da < db;
  }
  return a < b;
}

var<private> rowOf: array<u32, MAXN>; // each kept node's verify row (0 under the root)
var<private> stack: array<u32, NMAX>;

@compute @workgroup_size(1)
fn main() {
  let count = state[0];
  // The n best nodes: n rounds of the best not yet kept.
  var m = 0u;
  for (var turn = 0u; turn < p.n; turn++) {
    var best = NONE;
    for (var i = 0u; i < count; i++) {
      if (node_at(i, 7u) == 0u && (best == NONE || ranks_before(i, best))) {
        best = i;
      }
    }
    if (best == NONE) {
      break;
    }
    set_node(best, 7u, 1u);
    m++;
  }
  state[4] = m;
  // Depth-first order, siblings in creation order: visit a node, then its kept children.
  let tb = p.tb;
  ids[0] = p.last;
  positions[0] = tb;
  slots[0] = tb;
  vis[0] = 0xffffffffu;
  vis[1] = 0xffffffffu;
  samplePositions[0] = tb + 1u;
  state[ROW_PARENT] = NONE;
  state[ROW_TOKEN] = p.last;
  var row = 1u;
  var top = 0u;
  var parent = NONE; // the node whose children are being listed
  var next = 0u; // the next candidate child index
  loop {
    // The next kept child of `parent` at or after `from`.
    var child = NONE;
    for (var i = next; i < count; i++) {
      if (node_at(i, 7u) == 1u && node_at(i, 1u) == parent) {
        child = i;
        break;
      }
    }
    if (child != NONE) {
      let r = row;
      row++;
      rowOf[child] = r;
      var pr = 0u;
      if (parent != NONE) {
        pr = rowOf[parent];
      }
      let depth = node_at(child, 2u);
      ids[r] = node_at(child, 0u);
      positions[r] = tb + 1u + depth;
      slots[r] = tb + r;
      samplePositions[r] = tb + 2u + depth;
      var mv = shl64(vec2<u32>(vis[2u * pr], vis[2u * pr + 1u]), r - pr);
      mv.x |= 1u;
      vis[2u * r] = mv.x;
      vis[2u * r + 1u] = mv.y;
      state[ROW_PARENT + r] = pr;
      state[ROW_TOKEN + r] = ids[r];
      result[R_TOKENS + r - 1u] = ids[r];
      result[R_PARENTS + r - 1u] = select(pr - 1u, NONE, pr == 0u);
      result[R_SCORES + r - 1u] = node_at(child, 3u);
      // Descend: list the child's children first, then resume after it.
      stack[top] = child;
      top++;
      parent = child;
      next = child + 1u;
      continue;
    }
    if (top == 0u) {
      break;
    }
    top--;
    let done = stack[top];
    parent = node_at(done, 1u);
    next = done + 1u;
  }
  // Padding rows: leaves under row 0 that verification never accepts.
  for (var r = row; r <= p.n; r++) {
    ids[r] = p.last;
    positions[r] = tb + 1u;
    slots[r] = tb + r;
    samplePositions[r] = tb + 2u;
    var mv = shl64(vec2<u32>(0xffffffffu, 0xffffffffu), r);
    mv.x |= 1u;
    vis[2u * r] = mv.x;
    vis[2u * r + 1u] = mv.y;
    state[ROW_PARENT + r] = NONE;
  }
  result[0] = m;
  result[2] = state[3];
  result[3] = state[2];
}
//#endif

//#if ACCEPT
@group(0) @binding(1) var<storage, read> state: array<u32>;
@group(0) @binding(2) var<storage, read> choices: array<u32>;
@group(0) @binding(3) var<storage, read_write> result: array<u32>;
@group(0) @binding(4) var<storage, read_write> commit: array<u32>;

@compute @workgroup_size(1)
fn main() {
  let m = state[4];
  var current = 0u;
  var a = 0u;
  commit[0] = p.tb;
  loop {
    let y = choices[current];
    result[R_EMITTED + a] = y;
    // Children of `current` carry it as parent; the first in depth-first order wins.
    var hit = NONE;
    for (var r = current + 1u; r <= m; r++) {
      if (state[ROW_PARENT + r] == current && state[ROW_TOKEN + r] == y) {
        hit = r;
        break;
      }
    }
    if (hit == NONE) {
      break;
    }
    result[R_ACCEPTED + a] = hit - 1u;
    a++;
    commit[a] = p.tb + hit;
    current = hit;
  }
  result[1] = a;
  for (var i = a + 1u; i <= p.n; i++) {
    commit[i] = NONE;
  }
}
//#endif
