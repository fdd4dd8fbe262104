// hadamard_mix: second half of the rotation when a row has Kb > 1 blocks of P elements:
// y[r, a*P + b] = scale * sum_c Hb[a, c] * t[r, c*P + b], Hb the Kb×Kb ±1 matrix (H_K ⊗ H_2^j).
//
// Bindings (group 0): 0 uniform Params; 1 t: array<f32> [M, n] (from hadamard_butterfly);
//   2 hb: array<f32> [Kb, Kb] (±1, row-major); 3 y: array<f32> [M, n] (written).
// Threads: one invocation per output element, WG per workgroup, flat index
//   (wid.y * nwg.x + wid.x) * WG + t; the sum over c runs in order c = 0..Kb-1.
// Preconditions (checked in TS): n = Kb * P.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> tmp: array<f32>;
@group(0) @binding(2) var<storage, read> hb: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let idx = (wid.y * nwg.x + wid.x) * WG + t;
  if (idx >= p.M * p.n) {
    return;
  }
  let row = idx / p.n;
  let i = idx % p.n;
  let P = p.n / p.Kb;
  let a = i / P;
  let b = i % P;
  var acc = 0.0;
  for (var c = 0u; c < p.Kb; c++) {
    acc += hb[a * p.Kb + c] * tmp[row * p.n + c * P + b];
  }
  y[idx] = acc * p.scale;
}
