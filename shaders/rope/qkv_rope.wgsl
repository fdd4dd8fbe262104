// qkv_rope: one dispatch from the output of a concatenated q|k|v matmul to attention's inputs:
// optional bias, optional QK-norm (per-head RMSNorm), RoPE on q and k, optional V norm (per-head
// RMSNorm without a weight), q written for attention, and k and v written into the KV cache at
// explicit slots. The same operations, in the same order, as the unfused path (AddInPlace,
// rmsnorm.wgsl, rope.wgsl, kv_write.wgsl), so results are bit-identical.
//
// Bindings (group 0): 0 uniform Params { heads, kvHeads, headDim, capacity, eps, ring, vEps }
//   (static: written once);
//   1 qkv: array<f32> [T, W], W = qWidth + 2 · kvWidth (q at column 0, k at qWidth, v at
//   qWidth + kvWidth; qWidth = heads · D, kvWidth = kvHeads · D), with OUTPUT_GATE
//   W = 2 · qWidth + 2 · kvWidth (a gate [qWidth] after v, not read here), with V_FROM_K
//   W = qWidth + kvWidth (no v columns: v is k's columns as loaded, before the norm and RoPE;
//   Gemma 4's attention_k_eq_v);
//   2 positions: array<u32> [T]; 3 slots: array<u32> [T]; 4 inv_freq: array<f32> [ROT / 2] (as rope.wgsl);
//   5 q_out: array<f32> [T, heads, D] (written); 6 kc, 7 vc: [rows, kvHeads, D] (written), f32 or
//   with KV_F16 IEEE halves packed two per u32 (element 2j in the low 16 bits, rounded to nearest
//   even by half_bits, as kv_write.wgsl); slot s at row cache_row(s, ring), as kv_write.wgsl (s mod
//   ring with a ring of rows = ring, s with ring 0 and rows = capacity); with STAGE_KV (an int8 or
//   int4 cache) f32 rows [T, kvHeads, D] instead, which kv_quant.wgsl rounds into the cache;
//   then, in this order from binding 8, with BIAS bias: array<f32> [qWidth + 2 · kvWidth] (q|k|v;
//   q|k with V_FROM_K);
//   with QK_NORM q_norm, k_norm: array<f32> [D] (binding numbers substituted by the wrapper).
// Work: a unit is 4 elements of one head of one row. Of a q or k head, units u < ROT / 4 are rope
//   units: each holds the RoPE pairs 2u and 2u + 1 (cos_sin of rope_trig; partners at + ROT / 2, or
//   adjacent when INTERLEAVED), whose four elements fill two whole words of an f16 cache: read
//   (+ bias, · norm), rotated, written to q_out or the K cache. With partial rotary (ROT < D, HF's
//   partial_rotary_factor), units u ≥ ROT / 4 hold elements 4u .. 4u + 3, which pass through
//   unrotated (+ bias, · norm: the norm spans all D). A v unit is copied (+ bias, · V_NORM's
//   1/√(mean(v²) + vEps), rmsnorm.wgsl's sum with a weight of ones) into the V cache.
//   Slots ≥ capacity are skipped, as kv_write does.
// Q_TEMP (Llama 4's query temperature, Ministral 3): q's elements, rotated or passed through, are
//   then multiplied by 1 + beta · ln(1 + floor(pos / FLOOR)) (q_temp, as rope.wgsl); k's are not.
// Grid and threads (row m = workgroup y; T = num_workgroups.y, so a decode step writes no uniform):
//   with PER_HEAD (QK_NORM or V_NORM), one workgroup of WG per head (x = hh: query head hh < heads,
//   else KV head hh - heads): with QK_NORM thread t sums squares of the head's elements t, t + WG,
//   ... and reduces with wg_sum (rmsnorm.wgsl's WG and order), a KV head's workgroup then does the
//   same over its v with V_NORM; then thread t takes units u = t, t + WG, ... (and, for a KV head,
//   the same v units). Without PER_HEAD, no workgroup memory and no barrier: one invocation per
//   unit, x · WG + t over the (heads + kvHeads) · D/4 q and k units, then the kvHeads · D/4 v units.
// Preconditions: D % 4 == 0 (any size: every loop strides by WG); ROT % 4 == 0, ROT ≤ D (ROT = D
//   when INTERLEAVED); WG = 64 (rmsnorm's), a power of two; positions < 102900; not both
//   OUTPUT_GATE and V_FROM_K.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const D: u32 = {{D}}u;
const ROT: u32 = {{ROT}}u; // rotated elements of a head: D, or fewer with partial rotary
const HALF: u32 = ROT / 2u;

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

//#if PER_HEAD
//#include reduce
//#endif
//#include rope_trig
//#if KV_F16
//#include half_bits
//#endif
//#include kv_ring

// The element offset of row m's K/V row: in the cache at slots[m] (NONE past capacity: skipped), or
// with STAGE_KV (an int8 / int4 cache, which kv_quant writes from them) in f32 rows [T, kvHeads, D].
const NONE: u32 = 0xffffffffu;
fn kv_row(m: u32) -> u32 {
  let slot = slots[m];
  if (slot >= p.capacity) {
    return NONE;
  }
//#if STAGE_KV
  return m * p.kvHeads * D;
//#else
  return cache_row(slot, p.ring) * p.kvHeads * D;
//#endif
}

//#if Q_TEMP
// Llama 4's query temperature at position pos: 1 + beta · ln(1 + floor(pos / FLOOR)).
fn q_temp(pos: u32) -> f32 {
  return 1.0 + bitcast<f32>({{Q_TEMP_BETA_BITS}}u) * log(1.0 + f32(pos / {{Q_TEMP_FLOOR}}u));
}
//#endif

const U: u32 = D / 4u; // units per head
const UR: u32 = ROT / 4u; // rope units per head (the first UR); the rest pass through

// The qkv row stride W.
fn row_width() -> u32 {
//#if OUTPUT_GATE
  return 2u * (p.heads + p.kvHeads) * D;
//#else
//#if V_FROM_K
  return (p.heads + p.kvHeads) * D;
//#else
  return (p.heads + 2u * p.kvHeads) * D;
//#endif
//#endif
}

// The first column of KV head kh's v in a row: its k's with V_FROM_K.
fn v_col(kh: u32) -> u32 {
//#if V_FROM_K
  return (p.heads + kh) * D;
//#else
  return (p.heads + p.kvHeads + kh) * D;
//#endif
}

// Input element `col` of row m (row stride W), with the bias added as AddInPlace adds it.
fn load(m: u32, W: u32, col: u32) -> f32 {
//#if BIAS
  return qkv[m * W + col] + bias[col];
//#else
  return qkv[m * W + col];
//#endif
}

// Element e of row m's q or k head at column col, after the bias and, with QK_NORM, the norm
// (x · inv · g as rmsnorm.wgsl computes it).
fn normed(m: u32, W: u32, col: u32, e: u32, isQ: bool, inv: f32) -> f32 {
  let x = load(m, W, col + e);
//#if QK_NORM
  return x * inv * select(k_norm[e], q_norm[e], isQ);
//#else
  return x;
//#endif
}

// Elements (ea, eb) of row m's head at column col (normed), rotated by pair i's angle at pos.
fn rotated(m: u32, W: u32, col: u32, ea: u32, eb: u32, i: u32, pos: f32, isQ: bool, inv: f32) -> vec2<f32> {
  let a = normed(m, W, col, ea, isQ, inv);
  let b = normed(m, W, col, eb, isQ, inv);
//#if ATTN_FACTOR
  let cs = cos_sin(pos * inv_freq[i]) * bitcast<f32>({{ATTN_FACTOR_BITS}}u);
//#else
  let cs = cos_sin(pos * inv_freq[i]);
//#endif
  return rotate(a, b, cs.x, cs.y);
}

// Pass-through unit u ≥ UR (partial rotary) of head hh of row m: elements 4u .. 4u + 3, normed but
// not rotated, to q_out or into the K cache at slots[m] (two whole words of an f16 cache).
fn pass_unit(m: u32, W: u32, col: u32, hh: u32, u: u32, isQ: bool, inv: f32) {
  let e = 4u * u;
  let x = vec4<f32>(
    normed(m, W, col, e, isQ, inv),
    normed(m, W, col, e + 1u, isQ, inv),
    normed(m, W, col, e + 2u, isQ, inv),
    normed(m, W, col, e + 3u, isQ, inv),
  );
  if (isQ) {
    let o = (m * p.heads + hh) * D + e;
//#if Q_TEMP
    let t = q_temp(positions[m]);
    q_out[o] = x.x * t;
    q_out[o + 1u] = x.y * t;
    q_out[o + 2u] = x.z * t;
    q_out[o + 3u] = x.w * t;
//#else
    q_out[o] = x.x;
    q_out[o + 1u] = x.y;
    q_out[o + 2u] = x.z;
    q_out[o + 3u] = x.w;
//#endif
    return;
  }
  let row = kv_row(m);
  if (row == NONE) {
    return;
  }
  let dst = row + (hh - p.heads) * D + e;
//#if KV_F16
  kc[dst / 2u] = half_bits(x.x) | (half_bits(x.y) << 16u);
  kc[dst / 2u + 1u] = half_bits(x.z) | (half_bits(x.w) << 16u);
//#else
  kc[dst] = x.x;
  kc[dst + 1u] = x.y;
  kc[dst + 2u] = x.z;
  kc[dst + 3u] = x.w;
//#endif
}

// Unit u of head hh (a query head below heads, else KV head hh - heads) of row m: RoPE pairs
// 2u and 2u + 1, whose four elements (a0, b0, a1, b1) fill two whole cache words; written to q_out,
// or into the K cache at slots[m] (skipped past capacity, as kv_write does). Units u ≥ UR pass
// through (pass_unit).
fn rope_unit(m: u32, hh: u32, u: u32, inv: f32) {
  let qWidth = p.heads * D;
  let kvWidth = p.kvHeads * D;
  let W = row_width();
  let isQ = hh < p.heads;
  let kh = hh - p.heads; // KV head when !isQ
  let col = select(qWidth + kh * D, hh * D, isQ);
  if (u >= UR) {
    pass_unit(m, W, col, hh, u, isQ, inv);
    return;
  }
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
  let pos = f32(positions[m]);
  let r0 = rotated(m, W, col, a0, b0, 2u * u, pos, isQ, inv);
  let r1 = rotated(m, W, col, a1, b1, 2u * u + 1u, pos, isQ, inv);
  if (isQ) {
    let o = (m * p.heads + hh) * D;
//#if Q_TEMP
    let t = q_temp(positions[m]);
    q_out[o + a0] = r0.x * t;
    q_out[o + b0] = r0.y * t;
    q_out[o + a1] = r1.x * t;
    q_out[o + b1] = r1.y * t;
//#else
    q_out[o + a0] = r0.x;
    q_out[o + b0] = r0.y;
    q_out[o + a1] = r1.x;
    q_out[o + b1] = r1.y;
//#endif
    return;
  }
  let row = kv_row(m);
  if (row == NONE) {
    return;
  }
  let dst = row + kh * D; // element offset of this KV head in the cache (or its staging row)
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

// Element `col` of row m's v (+ bias), with V_NORM times vinv (rmsnorm.wgsl's x · inv · g with a
// weight g of ones: the same bits).
fn v_at(m: u32, W: u32, col: u32, vinv: f32) -> f32 {
//#if V_NORM
  return load(m, W, col) * vinv;
//#else
  return load(m, W, col);
//#endif
}

// Elements 4u .. 4u + 3 of KV head kh's v (+ bias, · vinv with V_NORM) of row m into the V cache
// at slots[m].
fn copy_v(m: u32, kh: u32, u: u32, vinv: f32) {
  let kvWidth = p.kvHeads * D;
  let W = row_width();
  let row = kv_row(m);
  if (row == NONE) {
    return;
  }
  let src = v_col(kh) + 4u * u;
  let dst = row + kh * D + 4u * u;
//#if KV_F16
  vc[dst / 2u] = half_bits(v_at(m, W, src, vinv)) | (half_bits(v_at(m, W, src + 1u, vinv)) << 16u);
  vc[dst / 2u + 1u] = half_bits(v_at(m, W, src + 2u, vinv)) | (half_bits(v_at(m, W, src + 3u, vinv)) << 16u);
//#else
  for (var e = 0u; e < 4u; e++) {
    vc[dst + e] = v_at(m, W, src + e, vinv);
  }
//#endif
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let m = wid.y;
//#if PER_HEAD
  // One workgroup per head hh: rmsnorm.wgsl's sum (thread t adds elements t, t + WG, ..., then
  // wg_sum) and its divisor, the uniform (a constant divisor may compile to a multiply by its
  // reciprocal, which rounds differently: seen with D = 96).
  let hh = wid.x;
  let W = row_width();
  var inv = 1.0;
//#if QK_NORM
  let col = select(p.heads * D + (hh - p.heads) * D, hh * D, hh < p.heads);
  var ss = 0.0;
  for (var i = t; i < D; i += WG) {
    let v = load(m, W, col + i);
    ss += v * v;
  }
  inv = 1.0 / sqrt(wg_sum(ss, t) / f32(p.headDim) + p.eps);
//#endif
  var vinv = 1.0;
//#if V_NORM
  if (hh >= p.heads) { // uniform across the workgroup: wg_sum's barriers are reached by all
    let vcol = v_col(hh - p.heads);
    var vs = 0.0;
    for (var i = t; i < D; i += WG) {
      let v = load(m, W, vcol + i);
      vs += v * v;
    }
    vinv = 1.0 / sqrt(wg_sum(vs, t) / f32(p.headDim) + p.vEps);
  }
//#endif
  for (var u = t; u < U; u += WG) {
    rope_unit(m, hh, u, inv);
    if (hh >= p.heads) {
      copy_v(m, hh - p.heads, u, vinv);
    }
  }
//#else
  // One invocation per unit: the rope units of every head, then the v units of every KV head.
  let i = wid.x * WG + t;
  let ropeUnits = (p.heads + p.kvHeads) * U;
  if (i < ropeUnits) {
    rope_unit(m, i / U, i % U, 1.0);
  } else if (i < ropeUnits + p.kvHeads * U) {
    let j = i - ropeUnits;
    copy_v(m, j / U, j % U, 1.0);
  }
//#endif
}
