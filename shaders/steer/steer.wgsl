// steer: activation steering of the residual stream, in place, one row per workgroup.
//
//   d      = x[row, :] · r                       (skipped when a == 0)
//   x[row] = x[row] − a·d·r + b·r
//
// "ablate" is a = 1, b = 0 (x ← x − (x·r)r: the component along the unit vector r removed);
// "add" is a = 0, b = scale (x ← x + scale·r).
//
// Bindings: 0 uniform Params { H, offset, a, b }; 1 r: array<f32> (the vector at r[offset ..
//   offset + H), so one buffer holds every layer's vector); 2 x: array<f32> [rows, H] (read-write).
// Threads: workgroup `row` (flat over the grid) owns row `row`; its WG threads stride over the H
//   columns, sum their partial dot products in workgroup memory (tree reduction), then update the
//   same columns. The dispatch size is the number of rows.
// Preconditions: WG is a power of two; r is a unit vector for "ablate" (checked by the TS side).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> r: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  let base = row * p.H;
  var d = 0.0;
  if (p.a != 0.0) {
    var acc = 0.0;
    for (var i = lid; i < p.H; i += WG) {
      acc += x[base + i] * r[p.offset + i];
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
      if (lid < s) {
        partial[lid] += partial[lid + s];
      }
      workgroupBarrier();
    }
    d = partial[0];
  }
  let c = p.b - p.a * d;
  for (var i = lid; i < p.H; i += WG) {
    x[base + i] += c * r[p.offset + i];
  }
}
