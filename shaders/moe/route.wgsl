// route: a mixture layer's routing of T rows (T = p.rows ≤ MAX_ROWS ≤ WG) in one workgroup:
//   h[t, :] = rmsnorm(x[t, :]) · g, bit for bit RmsNorm's (rmsnorm.wgsl at the same WG: each thread
//     sums squares over i = tid, tid + WG, ..., then the fixed-order tree of wg_sum);
//   logits[t, e] = Σ_i router[e, i] · h[t, i] (i = 0 .. H - 1 in order, one thread per (t, e));
//     ROUTER_NORM (Gemma 4): the router reads its own norm of x instead, x[t, i] · inv[t] ·
//     (scales[i] · p.routerScale), inv[t] being the row's 1/rms that h took;
//   SHARED: the shared expert's weight sigmoid(Σ_i shared_router[i] · h[t, i]), the same way;
//   per row (one thread each): scores (SOFTMAX: exp(l - max) / Σ exp, sums over e in order; else a
//     sigmoid each), the K best by score (+ BIAS bias[e]) with ties to the lower expert, weights =
//     score / (Σ chosen scores + renormEps) (RENORM; the sum in choice order) · routedScale
//     (EXPERT_SCALE: times scales[SCALE_AT + e], the chosen expert's own scale);
//   the routing table (kernels/moe/table.ts): a counting sort of the T · K choices by expert.
// Every sum runs in an order fixed by its row alone, so a row's results do not depend on T.
//
// Bindings (group 0): 0 uniform Params { rows, hidden, eps, renormEps, routedScale, routerScale };
//   1 x: array<f32> [T, H]; 2 g: array<f32> [H] the norm weight as it multiplies;
//   3 router: array<f32> [E, H]; 4 h: array<f32> [T, H] (written);
//   5 scratch: array<f32> [MAX_ROWS, E] (the logits, then the scores; the kernel's own);
//   6 table: array<u32> (written: words 0 .. 4 + 4 · groups, then members and positions of the
//     T · K choices; the rest is left as it was);
//   7 weights: array<f32> (written: [t · K + j] row t's j-th choice, best first, for t < T; SHARED:
//     [MAX_ROWS · K + t] row t's shared-expert weight);
//   BIAS: 8 bias: array<f32> [E]; SHARED: 8 (9 with BIAS) shared_router: array<f32> [H];
//   ROUTER_NORM or EXPERT_SCALE: SCALES_BINDING scales: array<f32>, [H] the router norm's learned
//     scale (ROUTER_NORM), then from SCALE_AT (H, or 0 without ROUTER_NORM) [E] the experts' scales.
// Threads: one workgroup of WG. The norm takes the rows one after another, all threads on each;
//   the router's dot products are spread over all threads, one (row, expert) each; scoring and
//   choosing take one thread per row; the table takes one thread per expert (thread 0 lays out
//   the groups between).
// Preconditions: WG is a power of two and ≥ MAX_ROWS; 1 ≤ T ≤ MAX_ROWS; K ≤ E; BIAS and SHARED
//   together bind 9 storage buffers (WebGPU's default limit is 8); so do either with the scales. Logits that are NaN give an
//   unspecified (but in-bounds) choice.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const E: u32 = {{E}}u;
const K: u32 = {{K}}u;
const MAX_ROWS: u32 = {{MAX_ROWS}}u;
const CHOICES: u32 = {{CHOICES}}u; // MAX_ROWS · K, a literal for naga's array sizes
// The routing table's word offsets (routeTableLayout): groups at 4, then members, then positions.
const MEMBERS: u32 = {{MEMBERS}}u;
const POSITIONS: u32 = {{POSITIONS}}u;
//#if EXPERT_SCALE
//#if ROUTER_NORM
const SCALE_AT: u32 = {{H}}u;
//#else
const SCALE_AT: u32 = 0u;
//#endif
//#endif

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> router: array<f32>;
@group(0) @binding(4) var<storage, read_write> h: array<f32>;
@group(0) @binding(5) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(6) var<storage, read_write> table: array<u32>;
@group(0) @binding(7) var<storage, read_write> weights: array<f32>;
//#if BIAS
@group(0) @binding(8) var<storage, read> bias: array<f32>;
//#endif
//#if SHARED
@group(0) @binding({{SHARED_BINDING}}) var<storage, read> shared_router: array<f32>;
//#endif
//#if SCALES
@group(0) @binding({{SCALES_BINDING}}) var<storage, read> scales: array<f32>;
//#endif

//#include reduce

// Each choice's expert, [t · K + j].
var<workgroup> chosen: array<u32, CHOICES>;
// Per expert: how many choices name it, and its group's first sorted position.
var<workgroup> counts: array<u32, E>;
var<workgroup> firsts: array<u32, E>;
//#if ROUTER_NORM
// Each row's 1/rms, which the router's own norm shares with h's.
var<workgroup> inv_rows: array<f32, MAX_ROWS>;
//#endif

// The key the choice ranks by: the score, plus the selection bias.
fn key_of(score: f32, e: u32) -> f32 {
//#if BIAS
  return score + bias[e];
//#else
  return score;
//#endif
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) tid: u32) {
  let H = p.hidden;
  // The norm, row by row: the sum order of rmsnorm.wgsl.
  for (var r = 0u; r < p.rows; r++) {
    let base = r * H;
    var ss = 0.0;
    for (var i = tid; i < H; i += WG) {
      let v = x[base + i];
      ss += v * v;
    }
    let inv = 1.0 / sqrt(wg_sum(ss, tid) / f32(H) + p.eps);
//#if ROUTER_NORM
    if (tid == 0u) {
      inv_rows[r] = inv;
    }
//#endif
    for (var i = tid; i < H; i += WG) {
      let v = x[base + i] * inv * g[i];
      h[base + i] = v;
    }
  }
  storageBarrier();
//#if ROUTER_NORM
  workgroupBarrier();
//#endif

  // The router's logits (and the shared expert's gate, as expert E), one dot product per thread.
//#if SHARED
  let n_logits = E + 1u;
//#else
  let n_logits = E;
//#endif
  for (var c = tid; c < p.rows * n_logits; c += WG) {
    let r = c / n_logits;
    let e = c % n_logits;
    let hb = r * H;
    var acc = 0.0;
    if (e < E) {
      let wb = e * H;
//#if ROUTER_NORM
      let inv = inv_rows[r];
      for (var i = 0u; i < H; i++) {
        acc += router[wb + i] * (x[hb + i] * inv * (scales[i] * p.routerScale));
      }
//#else
      for (var i = 0u; i < H; i++) {
        acc += router[wb + i] * h[hb + i];
      }
//#endif
      scratch[r * E + e] = acc;
    }
//#if SHARED
    else {
      for (var i = 0u; i < H; i++) {
        acc += shared_router[i] * h[hb + i];
      }
      weights[MAX_ROWS * K + r] = 1.0 / (1.0 + exp(-acc));
    }
//#endif
  }
  storageBarrier();

  // Scores and choice, one thread per row.
  if (tid < p.rows) {
    let sb = tid * E;
//#if SOFTMAX
    var mx = scratch[sb];
    for (var e = 1u; e < E; e++) {
      mx = max(mx, scratch[sb + e]);
    }
    var sum = 0.0;
    for (var e = 0u; e < E; e++) {
      sum += exp(scratch[sb + e] - mx);
    }
    for (var e = 0u; e < E; e++) {
      scratch[sb + e] = exp(scratch[sb + e] - mx) / sum;
    }
//#else
    for (var e = 0u; e < E; e++) {
      scratch[sb + e] = 1.0 / (1.0 + exp(-scratch[sb + e]));
    }
//#endif
    // The j-th choice is the best (key, then lower expert) of those ranked after the (j-1)-th.
    var prev_key = 0.0;
    var prev_e = 0u;
    var total = 0.0;
    for (var j = 0u; j < K; j++) {
      var best_key = 0.0;
      var best_e = E;
      for (var e = 0u; e < E; e++) {
        let k = key_of(scratch[sb + e], e);
        let after = j == 0u || k < prev_key || (k == prev_key && e > prev_e);
        if (after && (best_e == E || k > best_key)) {
          best_key = k;
          best_e = e;
        }
      }
      best_e = min(best_e, E - 1u); // only when keys are NaN
      chosen[tid * K + j] = best_e;
      prev_key = best_key;
      prev_e = best_e;
      total += scratch[sb + best_e];
    }
//#if RENORM
    let div = total + p.renormEps;
//#else
    let div = 1.0;
//#endif
    for (var j = 0u; j < K; j++) {
      let e = chosen[tid * K + j];
      let s = scratch[sb + e];
//#if EXPERT_SCALE
      weights[tid * K + j] = s / div * p.routedScale * scales[SCALE_AT + e];
//#else
      weights[tid * K + j] = s / div * p.routedScale;
//#endif
    }
  }
  workgroupBarrier();

  // The table: each expert's count, the groups laid out in expert order, then each expert's
  // members in choice order.
  let n = p.rows * K;
  for (var e = tid; e < E; e += WG) {
    var count = 0u;
    for (var c = 0u; c < n; c++) {
      count += select(0u, 1u, chosen[c] == e);
    }
    counts[e] = count;
  }
  workgroupBarrier();
  if (tid == 0u) {
    var at = 0u;
    var groups = 0u;
    for (var e = 0u; e < E; e++) {
      firsts[e] = at;
      let count = counts[e];
      if (count > 0u) {
        let gw = 4u + 4u * groups;
        table[gw] = e;
        table[gw + 1u] = at;
        table[gw + 2u] = count;
        table[gw + 3u] = 0u;
        groups++;
        at += count;
      }
    }
    table[0] = groups;
    // The tallies every routing adds to (never reset here): experts read, rows routed, routings.
    table[1] = table[1] + groups;
    table[2] = table[2] + p.rows;
    table[3] = table[3] + 1u;
  }
  workgroupBarrier();
  for (var e = tid; e < E; e += WG) {
    var at = firsts[e];
    for (var c = 0u; c < n && at < firsts[e] + counts[e]; c++) {
      if (chosen[c] == e) {
        table[MEMBERS + at] = c / K;
        table[POSITIONS + c] = at;
        at++;
      }
    }
  }
}
