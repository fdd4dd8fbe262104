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
// Threads: WG per workgroup, no workgroup memory beside QK-norm's reduction (so without QK-norm
//   the kernel has no barrier). QK-norm: thread t sums squares of elements t, t + WG, ... and
//   reduces with wg_sum (rmsnorm.wgsl's WG and order). Then thread t takes units u = t, t + WG, ...:
//   the RoPE pairs i0 = 2u and i1 = 2u + 1 (cos_sin of rope_trig), whose four elements fill two
//   whole words of an f16 cache; it reads them (+ bias, · norm), rotates them and writes q, or k
//   into the cache. A KV head's workgroup then copies its v (+ bias) into the cache.
//   Slots ≥ capacity are skipped, as kv_write does.
// Preconditions: D % 4 == 0, D ≤ 256; WG = 64 (rmsnorm's), a power of two; positions < 102900.

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

// Element pair (ea, eb) of row m's head at column col, rotated by pair i's angle at pos (after the
// bias and, with QK_NORM, the norm: x · inv · g as rmsnorm.wgsl computes it).
fn rotated(m: u32, W: u32, col: u32, ea: u32, eb: u32, i: u32, pos: f32, isQ: bool, inv: f32) -> vec2<f32> {
  var a = load(m, W, col + ea);
  var b = load(m, W, col + eb);
//#if QK_NORM
  a = a * inv * select(k_norm[ea], q_norm[ea], isQ);
  b = b * inv * select(k_norm[eb], q_norm[eb], isQ);
//#endif
  let cs = cos_sin(pos * inv_freq[i]);
  return rotate(a, b, cs.x, cs.y);
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
  var inv = 1.0;
//#if QK_NORM
  // rmsnorm.wgsl's sum: thread t adds elements t, t + WG, ... then wg_sum; the divisor is the
  // uniform, as there (a constant divisor may compile to a multiply by its reciprocal, which
  // rounds differently: seen with D = 96).
  var ss = 0.0;
  for (var i = t; i < D; i += WG) {
    let v = load(m, W, col + i);
    ss += v * v;
  }
  inv = 1.0 / sqrt(wg_sum(ss, t) / f32(p.headDim) + p.eps);
//#endif
  let pos = f32(positions[m]);
  let slot = slots[m];
  let dst = slot * kvWidth + kh * D; // element offset of this KV head in the cache
  let writeKv = !isQ && slot < p.capacity;
  // Unit u: pairs i = 2u and 2u + 1 (elements (a0, b0) and (a1, b1)), which fill two cache words.
  for (var u = t; u < D / 4u; u += WG) {
//#if INTERLEAVED
    let a0 = 4u * u;
    let b0 = a0 + 1u;
    let a1 = a0 + 2u;
    let b1 = a0 + 3u;
//#else
    let a0 = 2u * u;
    let a1 = a0 + 1u;
    let b0 = a0 + HALF;
    let b1 = a1 + HALF;
//#endif
    let r0 = rotated(m, W, col, a0, b0, 2u * u, pos, isQ, inv);
    let r1 = rotated(m, W, col, a1, b1, 2u * u + 1u, pos, isQ, inv);
    if (isQ) {
      let o = (m * p.heads + hh) * D;
      q_out[o + a0] = r0.x;
      q_out[o + b0] = r0.y;
      q_out[o + a1] = r1.x;
      q_out[o + b1] = r1.y;
    } else if (writeKv) {
//#if KV_F16
//#if INTERLEAVED
      kc[(dst + a0) / 2u] = half_bits(r0.x) | (half_bits(r0.y) << 16u);
      kc[(dst + a1) / 2u] = half_bits(r1.x) | (half_bits(r1.y) << 16u);
//#else
      kc[(dst + a0) / 2u] = half_bits(r0.x) | (half_bits(r1.x) << 16u);
      kc[(dst + b0) / 2u] = half_bits(r0.y) | (half_bits(r1.y) << 16u);
//#endif
//#else
      kc[dst + a0] = r0.x;
      kc[dst + b0] = r0.y;
      kc[dst + a1] = r1.x;
      kc[dst + b1] = r1.y;
//#endif
    }
  }
  if (!writeKv) {
    return;
  }
  let vCol = qWidth + kvWidth + kh * D;
//#if KV_F16
  for (var w = t; w < D / 2u; w += WG) {
    vc[dst / 2u + w] = half_bits(load(m, W, vCol + 2u * w)) | (half_bits(load(m, W, vCol + 2u * w + 1u)) << 16u);
  }
//#else
  for (var i = t; i < D; i += WG) {
    vc[dst + i] = load(m, W, vCol + i);
  }
//#endif
}
