// topk: the k best children of chosen logits rows for best-first tree drafting, on the GPU, so the
// CPU reads back k (token, log weight) pairs per row instead of the row. Exactly what the plain-TS
// reference `childrenRef` (topk.ts) computes: scores s_v = ℓ_v (GREEDY) or ℓ_v · invT + G(seed,
// position, v) over the tokens top-k / top-p / min-p allow; the k best by score, ties to the lower
// id; log weight min(0, c·(s - M) - log Σ exp(c·(s - M))) over the allowed tokens (M the best
// score, c = sharpen: 1 at T > 0; a draft head's greedy trees weigh its distribution sharpened, see
// GREEDY_TREE_SHARPEN in topk.ts). c only weighs: the children and their order do not depend on it.
//
// Three stages (renderWgsl flags) sharing one uniform block, dispatched in this order (greedy
// skips the first; GREEDY picks the chunk pass's score; ROWS is set for the first two):
//   THRESHOLD  one workgroup per row: the row's filter threshold thr (allowed: ℓ ≥ thr), the
//              smallest logit at which the sampler's own filter test (sample.wgsl: count and mass
//              of strictly larger logits, p / p_max, same f32 sums in the same order) passes. The
//              test is monotone in the logit, so thr is found by bisection over the order-preserving
//              u32 keys of f32 (32 passes over the row, no noise). Unfiltered rows get -FLT_MAX
//              (every finite logit allowed); a call with no filter on skips this pass, and the
//              chunk pass then reads no threshold.
//   CHUNK_PASS one workgroup per (row, chunk of CHUNK tokens): each thread keeps a private sorted
//              top-k of its tokens' scores and an online (max, Σ exp(s - max)); then k rounds of a
//              workgroup argmax pick the chunk's top-k, and a tree merges the (max, sum) pairs.
//   neither    one workgroup per row (the merge): the same two steps over the row's chunks' lists
//              and pairs; writes the k children.
// SAMPLE (the split sampler, SplitSampler in sample.ts): k = 1, row r ranks logits row r at
// positions[r], no (max, sum), and the merge writes the best id only. Its allowed set is the
// sampler's (each keeps exactly the tokens passing the same test) and its scores are the
// sampler's, so the id is the sampler's.
//
// Bindings (group 0), 0 uniform Params { R, V, k, chunks, seed, invT, topK, topP, minP, sharpen } in all:
//   THRESHOLD  1 logits: array<f32> [*, V]; 2 picks: array<u32> [R, 2] (logits row, absolute
//              position of the children; SAMPLE: positions [R]); 3 thr: array<f32> [R] (written).
//   CHUNK_PASS 1 logits; 2 picks; 3 thr (absent when GREEDY, parts moving to 3); 4 parts:
//              array<u32> [R, chunks, 2k + 2] (written): k (score bits, id) pairs best first, then
//              the chunk's (max, sum) bits.
//   neither    1 parts; 2 out: array<u32> [R, k, 2] (written): (token, log-weight bits), best
//              first, token NONE (weight 0) past the row's allowed tokens; SAMPLE: ids [R].
// Threads: WG per workgroup (256 for THRESHOLD, as the sampler sums; 64 otherwise, see topk.ts);
//   flat workgroup index over the grid (wid.y * nwg.x + wid.x).
// Preconditions: 1 ≤ k ≤ KMAX; chunks = ceil(V / CHUNK); invT > 0 unless GREEDY; logits finite
//   or -inf (a -inf logit is never a child, as in the reference).

{{PARAMS}}

const WG: u32 = {{WG}}u;
const KMAX: u32 = {{KMAX}}u;
const CHUNK: u32 = {{CHUNK}}u;
const LOWEST: f32 = -3.4028234663852886e38;

@group(0) @binding(0) var<uniform> p: Params;

//#include gumbel_noise

//#include pick

// The logits row and the children's position of ranked row `row`: picked, or row itself (SAMPLE).
//#if ROWS
//#if SAMPLE
@group(0) @binding(2) var<storage, read> positions: array<u32>;

fn row_base(row: u32) -> u32 {
  return row * p.V;
}

fn row_position(row: u32) -> u32 {
  return positions[row];
}
//#else
@group(0) @binding(2) var<storage, read> picks: array<u32>;

fn row_base(row: u32) -> u32 {
  return picks[2u * row] * p.V;
}

fn row_position(row: u32) -> u32 {
  return picks[2u * row + 1u];
}
//#endif
//#endif

// Whether the sampler filters (top-k, top-p or min-p) when sampling: only then is the threshold
// pass dispatched and read.
fn filtered() -> bool {
  return p.invT > 0.0 && (p.topK > 0u || p.topP < 1.0 || p.minP > 0.0);
}

//#if THRESHOLD
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read_write> thr: array<f32>;
//#include reduce

// f32 ↔ u32 keys whose unsigned order is the float order (for non-NaN values).
fn key_of(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(~b, b | 0x80000000u, (b & 0x80000000u) == 0u);
}

fn value_of(k: u32) -> f32 {
  return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.R) {
    return;
  }
  let base = row_base(row);
  _ = row_position(row); // binding 2 stays in the auto layout when SAMPLE
  if (!filtered()) {
    if (t == 0u) {
      thr[row] = LOWEST;
    }
    return;
  }
  // Max, min and softmax normaliser at temperature 1/invT, as sample.wgsl computes them.
  var m = LOWEST;
  var lo_l = -LOWEST;
  for (var v = t; v < p.V; v += WG) {
    m = max(m, logits[base + v]);
    lo_l = min(lo_l, logits[base + v]);
  }
  let lmax = wg_max(m, t);
  let lmin = -wg_max(-lo_l, t);
  var z = 0.0;
  for (var v = t; v < p.V; v += WG) {
    z += exp((logits[base + v] - lmax) * p.invT);
  }
  let total = wg_sum(z, t);
  // pass(x): the sampler's test of a token with logit x. The answer lies in (lo, hi]: pass(lmax)
  // holds (nothing is larger, p / p_max = 1); 32 halvings close any u32 interval.
  var lo = key_of(lmin) - 1u;
  var hi = key_of(lmax);
  for (var i = 0u; i < 32u; i++) {
    let mid = lo + (hi - lo) / 2u;
    let x = value_of(mid);
    var mass = 0.0;
    var count = 0.0;
    for (var v = t; v < p.V; v += WG) {
      let l = logits[base + v];
      if (l > x) {
        mass += exp((l - lmax) * p.invT);
        count += 1.0;
      }
    }
    let above_mass = wg_sum(mass, t);
    let above = wg_sum(count, t);
    let px = exp((x - lmax) * p.invT);
    let ok = (p.topK == 0u || above < f32(p.topK)) && (p.topP >= 1.0 || above_mass < p.topP * total) &&
      (p.minP <= 0.0 || px >= p.minP);
    if (hi - lo > 1u) {
      hi = select(hi, mid, ok);
      lo = select(mid, lo, ok);
    }
  }
  if (t == 0u) {
    thr[row] = value_of(hi);
  }
}
//#else
var<workgroup> red_s: array<f32, WG>;
var<workgroup> red_i: array<u32, WG>;
var<private> top_s: array<f32, KMAX>;
var<private> top_i: array<u32, KMAX>;

// Inserts (s, i) into this thread's sorted top-k, dropping the k+1-th.
fn offer(s: f32, i: u32) {
  let k = p.k;
  if (!better(s, i, top_s[k - 1u], top_i[k - 1u])) {
    return;
  }
  var j = k - 1u;
  while (j > 0u && better(s, i, top_s[j - 1u], top_i[j - 1u])) {
    top_s[j] = top_s[j - 1u];
    top_i[j] = top_i[j - 1u];
    j--;
  }
  top_s[j] = s;
  top_i[j] = i;
}

// Round j of the workgroup's top-k: every thread offers its best unpicked pair, the argmax tree
// leaves the j-th best in slot 0 and its owner (ids are unique across threads) moves past it.
fn pick(t: u32, head: ptr<function, u32>) -> vec2<u32> {
  let h = *head;
  red_s[t] = select(LOWEST, top_s[min(h, KMAX - 1u)], h < p.k);
  red_i[t] = select(NONE, top_i[min(h, KMAX - 1u)], h < p.k);
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s && better(red_s[t + s], red_i[t + s], red_s[t], red_i[t])) {
      red_s[t] = red_s[t + s];
      red_i[t] = red_i[t + s];
    }
  }
  workgroupBarrier();
  let won = vec2<u32>(bitcast<u32>(red_s[0]), red_i[0]);
  workgroupBarrier(); // every thread has read slot 0 before the next round writes it
  if (won.y != NONE && h < p.k && top_i[min(h, KMAX - 1u)] == won.y) {
    *head = h + 1u;
  }
  return won;
}

var<workgroup> red_z: array<f32, WG>;

// (max, Σ exp(c·(s - max))) of two parts as one (c = p.sharpen; c = 1 multiplies exactly).
fn combine(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let m = max(a.x, b.x);
  return vec2<f32>(m, a.y * exp((a.x - m) * p.sharpen) + b.y * exp((b.x - m) * p.sharpen));
}

// Tree merge of every thread's (max, sum) pair; the result to every thread.
fn reduce_mz(t: u32, mz: vec2<f32>) -> vec2<f32> {
  red_s[t] = mz.x;
  red_z[t] = mz.y;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      let c = combine(vec2<f32>(red_s[t], red_z[t]), vec2<f32>(red_s[t + s], red_z[t + s]));
      red_s[t] = c.x;
      red_z[t] = c.y;
    }
  }
  workgroupBarrier();
  let r = vec2<f32>(red_s[0], red_z[0]);
  workgroupBarrier();
  return r;
}

fn clear_top() {
  for (var j = 0u; j < KMAX; j++) {
    top_s[j] = LOWEST;
    top_i[j] = NONE;
  }
}

//#if CHUNK_PASS
@group(0) @binding(1) var<storage, read> logits: array<f32>;
//#if GREEDY
@group(0) @binding(3) var<storage, read_write> parts: array<u32>;
//#else
@group(0) @binding(3) var<storage, read> thr: array<f32>;
@group(0) @binding(4) var<storage, read_write> parts: array<u32>;
//#endif

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let g = wid.y * nwg.x + wid.x;
  if (g >= p.R * p.chunks) {
    return;
  }
  let row = g / p.chunks;
  let start = (g % p.chunks) * CHUNK;
  let end = min(start + CHUNK, p.V);
  let base = row_base(row);
//#if GREEDY
  _ = row_position(row); // binding 2 stays in the auto layout when SAMPLE
//#else
  let key = gumbel_key(p.seed, row_position(row));
  // Unfiltered rows allow every token: their threshold pass is not dispatched (topk.ts).
  let floor = select(LOWEST, thr[row], filtered());
//#endif
  clear_top();
  var mz = vec2<f32>(LOWEST, 0.0);
  for (var v = start + t; v < end; v += WG) {
    let l = logits[base + v];
//#if GREEDY
    let s = l;
//#else
    if (!(l >= floor)) {
      continue;
    }
    let s = l * p.invT + gumbel_from_uniform(uniform_from_bits(philox_bits(key, v)));
//#endif
    if (!(s > LOWEST)) {
      continue; // a -inf score is never a child and weighs nothing
    }
    offer(s, v);
//#if !SAMPLE
    mz = combine(mz, vec2<f32>(s, 1.0));
//#endif
  }
//#if !SAMPLE
  mz = reduce_mz(t, mz);
//#endif
  let at = g * (2u * p.k + 2u);
  var head = 0u;
  for (var j = 0u; j < p.k; j++) {
    let won = pick(t, &head);
    if (t == 0u) {
      parts[at + 2u * j] = won.x;
      parts[at + 2u * j + 1u] = won.y;
    }
  }
  if (t == 0u) {
    parts[at + 2u * p.k] = bitcast<u32>(mz.x);
    parts[at + 2u * p.k + 1u] = bitcast<u32>(mz.y);
  }
}
//#else
@group(0) @binding(1) var<storage, read> parts: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>; // SAMPLE: ids [R]

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.R) {
    return;
  }
  let stride = 2u * p.k + 2u;
  let first = row * p.chunks * stride;
  clear_top();
  var mz = vec2<f32>(LOWEST, 0.0);
  for (var c = t; c < p.chunks; c += WG) {
    let at = first + c * stride;
//#if !SAMPLE
    mz = combine(mz, vec2<f32>(bitcast<f32>(parts[at + 2u * p.k]), bitcast<f32>(parts[at + 2u * p.k + 1u])));
//#endif
    for (var j = 0u; j < p.k; j++) {
      offer(bitcast<f32>(parts[at + 2u * j]), parts[at + 2u * j + 1u]);
    }
  }
  var head = 0u;
//#if SAMPLE
  let won = pick(t, &head);
  if (t == 0u) {
    out[row] = won.y;
  }
//#else
  mz = reduce_mz(t, mz);
  let log_z = log(mz.y);
  for (var j = 0u; j < p.k; j++) {
    let won = pick(t, &head);
    if (t == 0u) {
      let w = min(0.0, (bitcast<f32>(won.x) - mz.x) * p.sharpen - log_z);
      out[2u * (row * p.k + j)] = won.y;
      out[2u * (row * p.k + j) + 1u] = bitcast<u32>(select(0.0, w, won.y != NONE));
    }
  }
//#endif
}
//#endif
//#endif
