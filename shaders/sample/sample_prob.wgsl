// sample_prob: probability of one given token per logits row under softmax at temperature T,
// p = exp((ℓ_tok - max ℓ) · invT) / Σ_v exp((ℓ_v - max ℓ) · invT) (e.g. draft probabilities).
//
// Bindings (group 0): 0 uniform Params { R, V, invT }; 1 logits: array<f32> [R, V];
//   2 tokens: array<u32> [R]; 3 probs: array<f32> [R] (written).
// Threads: one workgroup of WG threads per row (flat workgroup index over the grid), each thread
//   striding over the vocabulary, fixed-order tree reductions (max, then sum) in workgroup memory.
// Preconditions: WG is a power of two ≤ 256; tokens < V (a larger id gets probability 0).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;

//#include reduce

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
  let lmax = wg_max(m, t);
  var z = 0.0;
  for (var v = t; v < p.V; v += WG) {
    z += exp((logits[base + v] - lmax) * p.invT);
  }
  let total = wg_sum(z, t);
  if (t == 0u) {
    let tok = tokens[row];
    probs[row] = select(0.0, exp((logits[base + min(tok, p.V - 1u)] - lmax) * p.invT) / total, tok < p.V);
  }
}
