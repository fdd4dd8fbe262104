// selftest: y[i] = alpha * a[i] + b[i] (saxpy). The smallest real kernel, used to check that a host
// can compile, dispatch and read back WebGPU work (Node/Dawn, page, Web Worker).
//
// Bindings (group 0): 0 uniform Params { n: u32, alpha: f32 }; 1 a: array<f32> [n];
//   2 b: array<f32> [n]; 3 y: array<f32> [n] (written).
// Threads: one invocation per element, workgroups of WG along x, then rows of the grid along y
//   (global index = gid.y * grid_x * WG + gid.x) so n may exceed 65535 * WG.
// Preconditions: arrays hold at least n elements.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
  if (i >= p.n) {
    return;
  }
  y[i] = p.alpha * a[i] + b[i];
}
