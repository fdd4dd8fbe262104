// quantize_act: per-token dynamic int8 quantisation of activations for W8A8 matmuls.
// For each row m of x [rows, K] (starting at row x_off): sx[m] = max_k |x| / 127 and
// q[m, k] = clamp(round(x[m, k] / sx[m]), -127, 127) (round half to even; q = 0 when the row is 0).
//
// Bindings (group 0): 0 uniform Params; 1 x: array<vec4<f32>> [rows, K];
//   2 xq: array<u32> [M, K / 4] (written; element k in byte k % 4, two's complement, the int8 weight
//   packing); 3 sx: array<f32> [M] (written).
// Threads: one workgroup of 64 per row (flat workgroup index wid.y * nwg.x + wid.x); thread t takes
//   the vec4s t, t + 64, ...; the row maximum is a fixed workgroup-memory tree (max is exact, so the
//   order does not matter anyway). A row's output never depends on M.
// Preconditions (checked in TS): K % 4 == 0.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;
@group(0) @binding(3) var<storage, read_write> sx: array<f32>;

const WG: u32 = 64u;

//#include reduce

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let m = wid.y * nwg.x + wid.x;
  if (m >= p.M) {
    return;
  }
  let k4 = p.K / 4u;
  let base = (p.x_off + m) * k4;
  var amax = 0.0;
  for (var i = t; i < k4; i += WG) {
    let v = abs(x[base + i]);
    amax = max(amax, max(max(v.x, v.y), max(v.z, v.w)));
  }
  let rmax = wg_max(amax, t);
  let s = rmax / 127.0;
  if (t == 0u) {
    sx[m] = s;
  }
  for (var i = t; i < k4; i += WG) {
    var q = vec4<i32>(0);
    if (rmax > 0.0) {
      q = clamp(vec4<i32>(round(x[base + i] / s)), vec4<i32>(-127), vec4<i32>(127));
    }
    xq[m * k4 + i] = pack4xI8(q);
  }
}
