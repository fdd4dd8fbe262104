// sample_prob: probability of one given token per logits row under softmax at temperature T,
// p = exp((ℓ_tok - max ℓ) · invT) / Σ_v exp((ℓ_v - max ℓ) · invT) (e.g. draft probabilities).
//
// Bindings (group 0): 0 uniform Params { R, V, invT }; 1 logits: array<f32> [R, V];
//   2 tokens: array<u32> [R]; 3 probs: array<f32> [R] (written).
// Threads: one workgroup of WG threads per row (flat workgroup index over the grid), each thread
//   striding over the vocabulary, fixed-order tree reductions (max, then sum) in workgroup memory.
// Preconditions: WG is a power of two ≤ 256; tokens < V (a larger id gets probability 0).

{{PARAMS}}

override WG: u32 = 256;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.R) {
    return;
  }
  let base = row * p.V;
  var m = -3.4e38;
  for (var v = t; v < p.V; v += WG) {
    m = max(m, logits[base + v]);
  }
  red[t] = m;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      red[t] = max(red[t], red[t + s]);
    }
  }
  workgroupBarrier();
  let lmax = red[0];
  workgroupBarrier(); // all threads have read red[0] before it is reused
  var z = 0.0;
  for (var v = t; v < p.V; v += WG) {
    z += exp((logits[base + v] - lmax) * p.invT);
  }
  red[t] = z;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      red[t] += red[t + s];
    }
  }
  workgroupBarrier();
  if (t == 0u) {
    let tok = tokens[row];
    probs[row] = select(0.0, exp((logits[base + min(tok, p.V - 1u)] - lmax) * p.invT) / red[0], tok < p.V);
  }
}
