// ple_combine: Gemma 4's per-layer inputs from their two halves, for each row r = t * L + l (token
// t, layer l) of P values:
//   v[i] = proj[r, i] * proj_scale (proj_scale = f32(1 / sqrt(H)); proj is per_layer_model_projection * x),
//   n[i] = w[i] * (v[i] * (1 / sqrt(sum_i(v[i]^2) / P + eps))) (RMSNorm of v with weight w),
//   out[r, i] = (n[i] + tok[r, i]) * f32(1 / sqrt(2)) (tok: the per-layer table's rows, times sqrt(P)).
// [T, L * P] and [T * L, P] are the same bytes, so a row is one contiguous run of P values.
//
// Bindings (group 0): 0 uniform Params { rows, width, eps, proj_scale } (rows = T * L, width = P);
//   1 proj: array<f32> [T * L, P]; 2 tok: array<f32> [T * L, P]; 3 w: array<f32> [P];
//   4 out: array<f32> [T * L, P] (written; must alias neither proj nor tok).
// Threads: one workgroup of WG threads per row (flat workgroup index over the grid); each thread
//   sums squares over i = t, t + WG, ..., then reduce.wgsl's fixed-order tree (so a row's result
//   does not depend on how many rows share the dispatch), then writes the same i.
// Preconditions: WG is a power of two; P ≥ 1.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const MIX: f32 = 0.70710678118654752; // 1 / sqrt(2), rounded to f32 as the reference's fround

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read> tok: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

//#include reduce

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  // Uniform per workgroup: a whole workgroup leaves or stays, as wg_sum needs.
  if (row >= p.rows) {
    return;
  }
  let base = row * p.width;
  var ss = 0.0;
  for (var i = t; i < p.width; i += WG) {
    let v = proj[base + i] * p.proj_scale;
    ss += v * v;
  }
  let inv = 1.0 / sqrt(wg_sum(ss, t) / f32(p.width) + p.eps);
  for (var i = t; i < p.width; i += WG) {
    let n = w[i] * (proj[base + i] * p.proj_scale * inv);
    out[base + i] = (n + tok[base + i]) * MIX;
  }
}
