// combine: a mixture layer's output added into the residual stream, for T = p.rows rows:
//   x[t, i] += Σ_j w[t · K + j] · down[pos(t, j), i]  (j = 0 .. K - 1 in order)
//              + (SHARED) w[sharedAt + t] · shared_out[t, i],
// pos(t, j) being choice t · K + j's sorted position (the routing table's positions part, table.ts),
// where the expert matmuls left its expert's output. STORE: x[t, i] = that sum (x is not read). Each output's sum runs in that fixed order, one
// thread each, so a row's result does not depend on T or on the other rows.
//
// Bindings (group 0): 0 uniform Params { rows, hidden, topK, positions, sharedAt };
//   1 table: array<u32> the routing table (read at positions + c); 2 w: array<f32> the routing
//   weights ([t · K + j], then the shared weights from sharedAt); 3 down: array<f32> [T · K, H] the
//   experts' outputs in sorted order; 4 x: array<f32> [T, H] (read and written; STORE: written);
//   SHARED: 5 shared_out: array<f32> [T, H] the shared expert's output.
// Threads: one per output (t, i), WG per workgroup, over a flat workgroup index (the grid).
// Preconditions: the table's positions of the T · K choices are < T · K.

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> down: array<f32>;
@group(0) @binding(4) var<storage, read_write> x: array<f32>;
//#if SHARED
@group(0) @binding(5) var<storage, read> shared_out: array<f32>;
//#endif

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) tid: u32,
) {
  let at = (wid.y * nwg.x + wid.x) * WG + tid;
  if (at >= p.rows * p.hidden) {
    return;
  }
  let t = at / p.hidden;
  let i = at % p.hidden;
  var acc = 0.0;
  for (var j = 0u; j < p.topK; j++) {
    let c = t * p.topK + j;
    acc += w[c] * down[table[p.positions + c] * p.hidden + i];
  }
//#if SHARED
  acc += w[p.sharedAt + t] * shared_out[at];
//#endif
//#if STORE
  x[at] = acc;
//#else
  x[at] = x[at] + acc;
//#endif
}
