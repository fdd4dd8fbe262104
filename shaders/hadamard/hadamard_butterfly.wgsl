// hadamard_butterfly: first half of the rotation y = H_n · D · x / √n with H_n = Hb ⊗ H_P: for each
// row and each block a of P consecutive elements, dst[block] = scale · H_P · (signs ⊙ x)[block]
// (natural-order fast Walsh–Hadamard butterflies). With one block per row (Kb = 1) this is the
// whole rotation (scale = 1/√n, dst = y); otherwise hadamard_mix applies Hb across blocks.
//
// Bindings (group 0): 0 uniform Params; 1 x: array<f32> [M, n]; 2 signs: array<f32> [n] (±1);
//   3 dst: array<f32> [M, n] (written).
// Threads: one workgroup of WG per (row, block) (flat index wid.y * nwg.x + wid.x = row * Kb + a);
//   the block lives in workgroup memory; stage h pairs (i, i + h) with i = (j / h) * 2h + j % h.
// Preconditions (checked in TS): n = Kb * P, P a power of two, P * 4 <= workgroup storage.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> signs: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

const P: u32 = {{P}}u;
const WG: u32 = {{WG}}u;

var<workgroup> s: array<f32, P>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let blk = wid.y * nwg.x + wid.x;
  if (blk >= p.M * p.Kb) {
    return;
  }
  let a = blk % p.Kb;
  let base = blk * P;
  for (var i = t; i < P; i += WG) {
    s[i] = x[base + i] * signs[a * P + i];
  }
  workgroupBarrier();
  for (var h = 1u; h < P; h <<= 1u) {
    for (var j = t; j < P / 2u; j += WG) {
      let i = (j / h) * 2u * h + j % h;
      let u = s[i];
      let v = s[i + h];
      s[i] = u + v;
      s[i + h] = u - v;
    }
    workgroupBarrier();
  }
  for (var i = t; i < P; i += WG) {
    dst[base + i] = s[i] * p.scale;
  }
}
