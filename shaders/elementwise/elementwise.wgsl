// elementwise: the small per-element ops between matmuls. One op per variant (renderWgsl flags):
//
// SILU_MUL: h[m, i] = act(gate[m, i]) * up[m, i], act = gate_act.wgsl's: silu(g) = g / (1 +
//   exp(-g)), or gelu_tanh(g) with GELU (GeGLU).
//   FUSED: 0 uniform Params { M, I }; 1 gu: array<f32> [M, 2I] (row m = gate | up, the output of
//     one matmul over gate_proj and up_proj rows stacked); 2 h: array<f32> [M, I] (written).
//   otherwise: 0 Params; 1 gate [M, I]; 2 up [M, I]; 3 h [M, I] (written).
// ADD: residual add in place, y[i] += x[i]. 0 uniform Params { n }; 1 x [n]; 2 y [n] (read-write).
// GATHER: out[r, :] = h[rows[r], :] (the rows the LM head needs). 0 uniform Params { R, n };
//   1 rows: array<u32> [R]; 2 h: array<f32> [M, n]; 3 out: array<f32> [R, n] (written).
// SIGMOID_GATE: x[m, i] *= sigmoid(src[m, offset + i]), sigmoid(y) = 1 / (1 + exp(-y)) (gated
//   attention: attn_out · sigmoid(gate), the gate columns of the q|k|v|gate matmul's rows).
//   0 uniform Params { n, stride, offset } (static: written once); 1 src: array<f32> [M, stride];
//   2 x: array<f32> [M, n] (read-write).
// SOFTCAP: x[i] = cap · tanh(x[i] / cap) in place (final-logit soft-capping, Gemma 2 and 4), tanh
//   computed as softcap_tanh below (no overflow, exact to a few ulps). 0 uniform Params { n, cap };
//   1 x: array<f32> [n] (read-write).
// SCALE: x[i] *= s[0] in place (Gemma 4's learned per-layer scalar). 0 uniform Params { n };
//   1 s: array<f32> [1]; 2 x: array<f32> [n] (read-write).
//
// Threads: one invocation per output element, flat index over the grid (gid.y * nwg.x * WG + gid.x);
//   SIGMOID_GATE: row m = gid.y (M = num_workgroups.y, so a decode step writes no uniform),
//   element i = gid.x < n.
// Preconditions: GATHER row indices < M (checked by the wrapper's convenience function only).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
//#if SILU_MUL
//#if FUSED
@group(0) @binding(1) var<storage, read> gu: array<f32>;
@group(0) @binding(2) var<storage, read_write> h: array<f32>;
//#else
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> h: array<f32>;
//#endif
//#include gate_act
//#endif
//#if ADD
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
//#endif
//#if GATHER
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
//#endif
//#if SIGMOID_GATE
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
//#endif
//#if SOFTCAP
@group(0) @binding(1) var<storage, read_write> x: array<f32>;

// tanh(y) for any finite y, never NaN: (1 - e) / (1 + e) with e = exp(-2|y|) ≤ 1, which cannot
// overflow (WGSL's tanh may compute exp(2y), infinite past |y| ≈ 44, and give inf / inf on some
// drivers), then y's sign; below |y| = 1/4, where 1 - e cancels, the odd Taylor polynomial to y⁹
// (truncation under 1e-8 relative there).
fn softcap_tanh(y: f32) -> f32 {
  let a = abs(y);
  let e = exp(-2.0 * a);
  let z = a * a;
  let poly = a + a * z * (-1.0 / 3.0 + z * (2.0 / 15.0 + z * (-17.0 / 315.0 + z * (62.0 / 2835.0))));
  let t = select((1.0 - e) / (1.0 + e), poly, a < 0.25);
  return select(t, -t, y < 0.0);
}
//#endif
//#if SCALE
@group(0) @binding(1) var<storage, read> s: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
//#endif

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
//#if SILU_MUL
  if (i >= p.M * p.I) {
    return;
  }
//#if FUSED
  let m = i / p.I;
  let g = gu[m * 2u * p.I + i % p.I];
  let u = gu[m * 2u * p.I + p.I + i % p.I];
//#else
  let g = gate[i];
  let u = up[i];
//#endif
  h[i] = gate_act(g) * u;
//#endif
//#if ADD
  if (i >= p.n) {
    return;
  }
  y[i] += x[i];
//#endif
//#if GATHER
  if (i >= p.R * p.n) {
    return;
  }
  out[i] = src[rows[i / p.n] * p.n + i % p.n];
//#endif
//#if SIGMOID_GATE
  let m = gid.y;
  if (gid.x >= p.n) {
    return;
  }
  let g = src[m * p.stride + p.offset + gid.x];
  x[m * p.n + gid.x] *= 1.0 / (1.0 + exp(-g));
//#endif
//#if SOFTCAP
  if (i >= p.n) {
    return;
  }
  x[i] = p.cap * softcap_tanh(x[i] / p.cap);
//#endif
//#if SCALE
  if (i >= p.n) {
    return;
  }
  x[i] *= s[0];
//#endif
}
