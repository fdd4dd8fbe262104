// rmsnorm: y[r, i] = x[r, i] / sqrt(mean_i(x[r, :]^2) + eps) * g[i], with g = w or (ONE_PLUS) 1 + w.
// QK-norm is the same kernel over rows = tokens * heads and n = headDim.
// ADD (a post-norm residual add, Gemma 3's sandwich norms): y[r, i] = y[r, i] + that, y being the
//   residual stream; the normed value has the same bits as without ADD, then one f32 add (which a
//   driver may contract with the last multiply into an fma, rounding once less).
//
// Bindings (group 0): 0 uniform Params { rows, n, eps }; 1 x: array<f32> [rows, n];
//   2 w: array<f32> [n]; 3 y: array<f32> [rows, n] (written, read first with ADD; must not alias x).
// Threads: one workgroup of WG threads per row (flat workgroup index over the grid); each thread
//   sums squares over i = t, t + WG, ..., then a fixed-order tree reduction in workgroup memory
//   (so a row's result does not depend on how many rows share the dispatch).
// Preconditions: WG is a power of two; n ≥ 1.

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

//#include reduce

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.n;
  var ss = 0.0;
  for (var i = t; i < p.n; i += WG) {
    let v = x[base + i];
    ss += v * v;
  }
  let inv = 1.0 / sqrt(wg_sum(ss, t) / f32(p.n) + p.eps);
  for (var i = t; i < p.n; i += WG) {
//#if ONE_PLUS
    let g = 1.0 + w[i];
//#else
    let g = w[i];
//#endif
    let v = x[base + i] * inv * g;
//#if ADD
    y[base + i] = y[base + i] + v;
//#else
    y[base + i] = v;
//#endif
  }
}
