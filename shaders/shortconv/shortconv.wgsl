// shortconv: an LFM2 short-convolution layer's mixer over a pass of T rows, between in_proj and
// out_proj, and its window update. Per row t and channel c, with B | C | x = proj[t]:
//   u_t = B ⊙ x,  y_t[c] = C[c] · Σ_j w[c, j] · u_{t - (K - 1) + j}[c]
// where the u before row 0 are the K - 1 rows of state_in (zeros when positions[0] == 0, a new
// sequence). No activation.
//
// Bindings (group 0): 0 uniform Params { channels H, maxRows } (static: written once);
//   1 proj: array<f32> [T, 3H], each row B (columns 0 .. H - 1) | C | x; 2 positions: array<u32>
//   [T] (only positions[0] read); 3 count: array<u32> [1], T (the runner stages it: a decode step
//   writes no uniform); 4 weight: array<f32> [H, K] (the checkpoint's [H, 1, K], oldest tap first);
//   5 state_in: array<f32> [K - 1, H], the last K - 1 rows of u, oldest first (read unless fresh);
//   6 out: array<f32> [T, H] (written); 7 state_out: array<f32> [K - 1, H] (written: the last
//   K - 1 rows of [state_in; u]). The window is read from one buffer and written to another, so a
//   pass that is never committed leaves the committed one as it was (the runner alternates them).
//   With TREE, binding 7 is instead vis: array<u32> [T, 2], each row's visible slots (visWords of
//   attention_split: bit d of row r set iff row r - d is r itself or an ancestor); no state_out.
// Threads: one invocation per channel c (x · WG + t), which walks the T rows in order with its
//   window of K values of u in a private array, so a pass of T rows does the same operations in
//   the same order as T passes of one row: results are bit-identical whatever the split. With
//   TREE (a draft tree in depth-first order), row r's window is its own u after those of its last
//   K - 1 ancestors (then the state's rows): the same values, summed in the same order, as the
//   chain of its path run alone.
// Preconditions: 2 ≤ K; T = min(count[0], maxRows); with TREE, T ≤ 64.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const K: u32 = {{K}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> count: array<u32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> state_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
//#if TREE
@group(0) @binding(7) var<storage, read> vis: array<u32>;

// Whether row r sees the row d before it (its ancestor, or itself at d = 0).
fn visible(r: u32, d: u32) -> bool {
  return ((vis[2u * r + (d >> 5u)] >> (d & 31u)) & 1u) != 0u;
}
//#else
@group(0) @binding(7) var<storage, read_write> state_out: array<f32>;
//#endif

// u = B ⊙ x of row r, channel c.
fn gated(r: u32, c: u32) -> f32 {
  let at = r * 3u * p.channels + c;
  return proj[at] * proj[at + 2u * p.channels];
}

// Writes C ⊙ (w · win) of row r, channel c.
fn emit(r: u32, c: u32, w: ptr<function, array<f32, K>>, win: ptr<function, array<f32, K>>) {
  var y = 0.0;
  for (var j = 0u; j < K; j++) {
    y += (*w)[j] * (*win)[j];
  }
  out[r * p.channels + c] = proj[r * 3u * p.channels + p.channels + c] * y;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let H = p.channels;
  if (c >= H) {
    return;
  }
  let rows = min(count[0], p.maxRows);
  var w: array<f32, K>;
  for (var j = 0u; j < K; j++) {
    w[j] = weight[c * K + j];
  }
  let fresh = positions[0] == 0u;
//#if TREE
  for (var r = 0u; r < rows; r++) {
    // win[K - 1] is row r's u; before it its ancestors', newest last, then the state's rows.
    var win: array<f32, K>;
    win[K - 1u] = gated(r, c);
    var filled = 1u;
    var j = r;
    while (filled < K && j > 0u) {
      j--;
      if (visible(r, r - j)) {
        win[K - 1u - filled] = gated(j, c);
        filled++;
      }
    }
    var i = K - 1u; // the state's rows, newest (K - 2) first
    while (filled < K) {
      i--;
      win[K - 1u - filled] = select(state_in[i * H + c], 0.0, fresh);
      filled++;
    }
    emit(r, c, &w, &win);
  }
//#else
  // win[j]: u at time t - (K - 1) + j while row t is computed; zeros before a new sequence.
  var win: array<f32, K>;
  if (!fresh) {
    for (var i = 0u; i < K - 1u; i++) {
      win[i] = state_in[i * H + c];
    }
  }
  for (var t = 0u; t < rows; t++) {
    win[K - 1u] = gated(t, c);
    emit(t, c, &w, &win);
    for (var j = 0u; j < K - 1u; j++) {
      win[j] = win[j + 1u];
    }
  }
  for (var i = 0u; i < K - 1u; i++) {
    state_out[i * H + c] = win[i];
  }
//#endif
}
