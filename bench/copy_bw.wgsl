// copy_bw: dst[i] = src[i] over vec4<u32> elements: the plain copy the kernel benchmark measures
// to know the bandwidth the device actually reaches.
//
// Bindings (group 0): 0 uniform Params { n: u32 } (vec4 count); 1 src: array<vec4<u32>> [n];
//   2 dst: array<vec4<u32>> [n] (written).
// Threads: one invocation per vec4, WG per workgroup, flat index (wid.y * nwg.x + wid.x) * WG + t.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let i = (wid.y * nwg.x + wid.x) * WG + t;
  if (i < p.n) {
    dst[i] = src[i];
  }
}
