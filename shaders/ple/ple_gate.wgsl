// ple_gate: one layer's gated per-layer input (Gemma 4), out[t, j] = gelu_tanh(g[t, j]) *
// inputs[t, offset + j] for j < P, with offset = l * P (layer l's slice of ple_combine's output).
// gelu_tanh is gate_act.wgsl's GELU form, the one GeGLU's kernels (elementwise SILU_MUL, the gated
// matmul epilogue) use, so the same gate gives the same bits.
//
// Bindings (group 0): 0 uniform Params { width, stride, offset } (width = P, stride = L * P,
//   offset = l * P: static, one uniform per layer, written once); 1 g: array<f32> [T, P];
//   2 inputs: array<f32> [T, L * P]; 3 out: array<f32> [T, P] (written; aliases neither input).
// Threads: one invocation per output, row t = gid.y (T = num_workgroups.y, so a step writes no
//   uniform), column j = gid.x < P.
// Preconditions: offset + width ≤ stride.

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> inputs: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

//#include gate_act

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.y;
  let j = gid.x;
  if (j >= p.width) {
    return;
  }
  out[t * p.width + j] = gate_act(g[t * p.width + j]) * inputs[t * p.stride + p.offset + j];
}
