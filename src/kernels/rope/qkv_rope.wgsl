// qkv_rope: one dispatch from the output of a concatenated q|k|v matmul to attention's inputs:
// optional bias, optional QK-norm (per-head RMSNorm), RoPE on q and k, q written for attention, and
// k and v written into the KV cache at explicit slots. The same operations, in the same order, as
// the unfused path (AddInPlace, rmsnorm.wgsl, rope.wgsl, kv_write.wgsl), so results are bit-identical.
//
// Bindings (group 0): 0 uniform Params { heads, kvHeads, headDim, capacity, eps } (static: written once);
//   1 qkv: array<f32> [T, W], W = qWidth + 2 · kvWidth (q at column 0, k at qWidth, v at
//   qWidth + kvWidth; qWidth = heads · D, kvWidth = kvHeads · D); 2 positions: array<u32> [T];
//   3 slots: array<u32> [T]; 4 inv_freq: array<f32> [D / 2] (as rope.wgsl);
//   5 q_out: array<f32> [T, heads, D] (written); 6 kc, 7 vc: [capacity, kvHeads, D] (written), f32 or
//   with KV_F16 IEEE halves packed two per u32 (element 2j in the low 16 bits, rounded to nearest
//   even by half_bits, as kv_write.wgsl);
//   then, in this order from binding 8, with BIAS bias: array<f32> [W]; with QK_NORM q_norm, k_norm:
//   array<f32> [D] (binding numbers substituted by the wrapper).
// Grid: (heads + kvHeads, T) workgroups (T from num_workgroups, so a decode step writes no uniform).
//   Workgroup (hh, m): query head hh < heads, or KV head hh - heads (which also copies that head's v).
// Threads: WG per workgroup. The head's D values (+ bias) are staged in workgroup memory; QK-norm
//   sums squares over i = t, t + WG, ... and reduces with wg_sum (rmsnorm.wgsl's WG and order); RoPE:
//   thread t rotates pairs i = t, t + WG, ... (cos_sin of rope_trig); then q, or k and v, are written.
//   Slots ≥ capacity are skipped, as kv_write does.
// Preconditions: D even, D ≤ 256; WG = 64 (rmsnorm's), a power of two; positions < 102900.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const D: u32 = {{D}}u;
const HALF: u32 = D / 2u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(5) var<storage, read_write> q_out: array<f32>;
//#if KV_F16
@group(0) @binding(6) var<storage, read_write> kc: array<u32>;
@group(0) @binding(7) var<storage, read_write> vc: array<u32>;
//#else
@group(0) @binding(6) var<storage, read_write> kc: array<f32>;
@group(0) @binding(7) var<storage, read_write> vc: array<f32>;
//#endif
//#if BIAS
@group(0) @binding({{BIAS_BINDING}}) var<storage, read> bias: array<f32>;
//#endif
//#if QK_NORM
@group(0) @binding({{QN_BINDING}}) var<storage, read> q_norm: array<f32>;
@group(0) @binding({{KN_BINDING}}) var<storage, read> k_norm: array<f32>;
//#endif

var<workgroup> xs: array<f32, D>; // this head's values, then normed, then rotated

//#include reduce
//#include rope_trig
//#if KV_F16
//#include half_bits
//#endif

// Input element `col` of row m, with the bias added as AddInPlace adds it.
fn load(m: u32, W: u32, col: u32) -> f32 {
//#if BIAS
  return qkv[m * W + col] + bias[col];
//#else
  return qkv[m * W + col];
//#endif
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let hh = wid.x;
  let m = wid.y;
  let qWidth = p.heads * D;
  let kvWidth = p.kvHeads * D;
  let W = qWidth + 2u * kvWidth;
  let isQ = hh < p.heads;
  let kh = hh - p.heads; // KV head when !isQ
  let col = select(qWidth + kh * D, hh * D, isQ);
  for (var i = t; i < D; i += WG) {
    xs[i] = load(m, W, col + i);
  }
  workgroupBarrier();
//#if QK_NORM
  var ss = 0.0;
  for (var i = t; i < D; i += WG) {
    let v = xs[i];
    ss += v * v;
  }
  // Divide by the uniform, as rmsnorm.wgsl does: a constant divisor may compile to a multiply by
  // its reciprocal, which rounds differently (seen with D = 96).
  let inv = 1.0 / sqrt(wg_sum(ss, t) / f32(p.headDim) + p.eps);
  for (var i = t; i < D; i += WG) {
    let g = select(k_norm[i], q_norm[i], isQ);
    xs[i] = xs[i] * inv * g;
  }
  workgroupBarrier();
//#endif
  let pos = f32(positions[m]);
  for (var i = t; i < HALF; i += WG) {
    let cs = cos_sin(pos * inv_freq[i]);
//#if INTERLEAVED
    let ia = 2u * i;
    let ib = 2u * i + 1u;
//#else
    let ia = i;
    let ib = i + HALF;
//#endif
    let o = rotate(xs[ia], xs[ib], cs.x, cs.y);
    xs[ia] = o.x;
    xs[ib] = o.y;
  }
  workgroupBarrier();
  if (isQ) {
    for (var i = t; i < D; i += WG) {
      q_out[(m * p.heads + hh) * D + i] = xs[i];
    }
    return;
  }
  let slot = slots[m];
  if (slot >= p.capacity) {
    return;
  }
  let vCol = qWidth + kvWidth + kh * D;
//#if KV_F16
  let dst = (slot * kvWidth + kh * D) / 2u;
  for (var w = t; w < HALF; w += WG) {
    kc[dst + w] = half_bits(xs[2u * w]) | (half_bits(xs[2u * w + 1u]) << 16u);
    vc[dst + w] = half_bits(load(m, W, vCol + 2u * w)) | (half_bits(load(m, W, vCol + 2u * w + 1u)) << 16u);
  }
//#else
  let dst = slot * kvWidth + kh * D;
  for (var i = t; i < D; i += WG) {
    kc[dst + i] = xs[i];
    vc[dst + i] = load(m, W, vCol + i);
  }
//#endif
}
