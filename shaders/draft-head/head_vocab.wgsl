// head_vocab: scatters a draft head's logits over its draft vocabulary into full-vocabulary rows:
// logits[r, d2t[j]] = small[r, j]. The other entries are not touched (the caller presets them to
// -inf once, and no draft row writes them).
//
// Bindings (group 0): 0 uniform Params { V, Vd }; 1 d2t: array<u32> [Vd], the target id of each
//   draft id, strictly increasing, < V; 2 small: array<f32> [R, Vd]; 3 logits: array<f32> [R, V].
// Grid: (x, y, R) workgroups, x · y ≥ ⌈Vd / WG⌉ (kernels/dispatch.ts grid); thread j = flat index
//   (wid.y · nwg.x + wid.x) · WG + lid.x of row r = wid.z copies one entry. R comes from
//   num_workgroups, so the uniform is written once.
// Preconditions: d2t distinct and < V (two draft ids on one target id would race).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> d2t: array<u32>;
@group(0) @binding(2) var<storage, read> small: array<f32>;
@group(0) @binding(3) var<storage, read_write> logits: array<f32>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let j = (wid.y * nwg.x + wid.x) * WG + t;
  if (j >= p.Vd) {
    return;
  }
  let r = wid.z;
  logits[r * p.V + d2t[j]] = small[r * p.Vd + j];
}
