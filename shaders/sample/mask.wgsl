// mask: a grammar's token bitmask applied to logits in place before sampling, so constrained
// decoding never reads logits back. logits[r, v] = -inf where bit (v % 32) of mask[r, v / 32] is 0.
//
// Bindings (group 0): 0 uniform Params { R, V, W } (W = ceil(V / 32) words per mask row);
//   1 mask: array<u32> [R, W] (bit set: token allowed); 2 logits: array<f32> [R, V] (read-write).
// Threads: one invocation per logit, flat index over the grid (gid.y * nwg.x * WG + gid.x).
// Preconditions: W = ceil(V / 32); every row allows at least one token (else greedy picks id 0 and
//   Gumbel sampling has nothing to choose from).

{{PARAMS}}

const WG: u32 = {{WG}}u;
// -inf as bits: WGSL has no infinite literal, and a constant expression may not be infinite, so the
// bitcast happens at run time (p.W is a runtime value that adds 0).
const NEG_INF: u32 = 0xff800000u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> mask: array<u32>;
@group(0) @binding(2) var<storage, read_write> logits: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
  if (i >= p.R * p.V) {
    return;
  }
  let r = i / p.V;
  let v = i % p.V;
  if (((mask[r * p.W + v / 32u] >> (v % 32u)) & 1u) == 0u) {
    logits[i] = bitcast<f32>(NEG_INF | (p.W & 0u));
  }
}
