// deltanet_conv: the causal depthwise conv of a Gated DeltaNet layer over a pass of T rows, and
// its state update: u[t, c] = silu(Σ_j w[c, j] · x[t - (K - 1) + j, c]), where x is the q|k|v part
// of proj (row t ≥ 0) after the K - 1 rows of conv_state (zeros when positions[0] == 0, a new
// sequence).
//
// Bindings (group 0): 0 uniform Params (deltanet_rule.wgsl's; static, written once; this kernel
//   uses channels C, row P, maxRows); 1 proj: array<f32> [T, P] (x = columns 0 .. C - 1);
//   2 positions: array<u32> [T] (only positions[0] read); 3 count: array<u32> [1], T (the runner
//   stages it: a decode step writes no uniform); 4 conv_weight: array<f32> [C, K];
//   5 state_in: array<f32> [K - 1, C] (read unless fresh); 6 conv: array<f32> [T, C] (written);
//   7 state_out: array<f32> [K - 1, C] (written: the last K - 1 rows of [state_in; x]). The state
//   is read from one buffer and written to another, so a pass that is never committed leaves the
//   committed state as it was (the runner alternates the two).
//   With TREE, binding 7 is instead vis: array<u32> [T, 2], each row's visible slots (visWords of
//   attention_split: bit d of row r set iff row r - d is r itself or an ancestor); no state_out.
// Threads: one invocation per channel c (x · WG + t), which walks the T rows in order with its
//   window of K inputs in a private array, so a pass of T rows does the same operations in the same
//   order as T passes of one row: results are bit-identical whatever the split. With TREE (a draft
//   tree in depth-first order), row r's window is its own input after those of its last K - 1
//   ancestors (then the state's rows): the same values, summed in the same order, as the chain of
//   its path run alone.
// Preconditions: 2 ≤ K; T = min(count[0], maxRows); with TREE, T ≤ 64.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const K: u32 = {{K}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> count: array<u32>;
@group(0) @binding(4) var<storage, read> conv_weight: array<f32>;
@group(0) @binding(5) var<storage, read> state_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> conv: array<f32>;
//#if TREE
@group(0) @binding(7) var<storage, read> vis: array<u32>;

// Whether row r sees the row d before it (its ancestor, or itself at d = 0).
fn visible(r: u32, d: u32) -> bool {
  return ((vis[2u * r + (d >> 5u)] >> (d & 31u)) & 1u) != 0u;
}
//#else
@group(0) @binding(7) var<storage, read_write> state_out: array<f32>;
//#endif

fn silu(y: f32) -> f32 {
  return y / (1.0 + exp(-y));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let C = p.channels;
  if (c >= C) {
    return;
  }
  let rows = min(count[0], p.maxRows);
  var w: array<f32, K>;
  for (var j = 0u; j < K; j++) {
    w[j] = conv_weight[c * K + j];
  }
  let fresh = positions[0] == 0u;
//#if TREE
  for (var r = 0u; r < rows; r++) {
    // win[K - 1] is row r's input; before it its ancestors', newest last, then the state's rows.
    var win: array<f32, K>;
    win[K - 1u] = proj[r * p.row + c];
    var filled = 1u;
    var j = r;
    while (filled < K && j > 0u) {
      j--;
      if (visible(r, r - j)) {
        win[K - 1u - filled] = proj[j * p.row + c];
        filled++;
      }
    }
    var i = K - 1u; // the state's rows, newest (K - 2) first
    while (filled < K) {
      i--;
      win[K - 1u - filled] = select(state_in[i * C + c], 0.0, fresh);
      filled++;
    }
    var y = 0.0;
    for (var k = 0u; k < K; k++) {
      y += w[k] * win[k];
    }
    conv[r * C + c] = silu(y);
  }
//#else
  // win[j]: x at time t - (K - 1) + j while row t is computed; zeros before a new sequence.
  var win: array<f32, K>;
  if (!fresh) {
    for (var i = 0u; i < K - 1u; i++) {
      win[i] = state_in[i * C + c];
    }
  }
  for (var t = 0u; t < rows; t++) {
    win[K - 1u] = proj[t * p.row + c];
    var y = 0.0;
    for (var j = 0u; j < K; j++) {
      y += w[j] * win[j];
    }
    conv[t * C + c] = silu(y);
    for (var j = 0u; j < K - 1u; j++) {
      win[j] = win[j + 1u];
    }
  }
  for (var i = 0u; i < K - 1u; i++) {
    state_out[i * C + c] = win[i];
  }
//#endif
}
