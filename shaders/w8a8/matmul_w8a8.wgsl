// matmul_w8a8: y[m, n] = sx[m] * sum_blocks (a * sum_{k in block} qx[m, k] * q[n, k] - b * sum_{k in
// block} qx[m, k]), integer dot products (dot4I8Packed, i32) per 16-element block, each block's
// sums scaled by its grid (a, b) in f32. Weights: int8 (Q8_0: a = d, b = 0), q4_0 (lanes q - 8,
// a = d, b = 0), int4 (Q4_K) or int2 (Q2_K) (lanes q, a = D * sc, b = M * mn); activations from
// quantize_act.
//
// Bindings (group 0): 0 uniform Params; 1 w: array<WTYPE> (one part of n_rows rows, flat as in
//   matmul_common.wgsl: element e = n * K + k; one block of 16 codes per vec4<u32> (INT8), vec2<u32>
//   (Q4_0, INT4) or u32 (INT2)); 2 xq: array<vec4<u32>> [rows, K / 16] (int8, 4 per word);
//   3 sx: array<f32> [rows]; 4 y: array<f32> [M, N] (columns n_off .. n_off + n_rows written);
//   5 scales: array<u32> (the part's block metadata, read by quant_scales.wgsl's grid_at).
// Layouts: those of matmul_common.wgsl's header (src/quant/formats.ts's QuantizedMatrix). A 16-element block lies in
//   one group / sub-block (K % 16 == 0), so one (a, b) serves it; int8's groups of 32 are summed
//   in i32 per 16-element half, each half then multiplied by d in f32.
// Threads: one workgroup of TPR = 64 per weight row of the part, thread t walks
//   16-element blocks t, t + 64, ..., each weight block unpacked once for all M rows; the 64
//   partials are combined and scaled by sx by store_rows (matmul_store.wgsl), in an order that
//   never depends on M, MT or the subgroup size (batch invariance).
// Preconditions (checked in TS): K % 16 == 0, parts start on a group pair / super-block, M <= MT.
{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<{{WTYPE}}>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> sx: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> scales: array<u32>;

const TPR: u32 = 64u;
const MT: u32 = {{MT}}u;
const RC: u32 = {{RC}}u;

// The activation row's int8 scale.
fn row_scale(m: u32) -> f32 {
  return sx[p.x_off + m];
}

//#include quant_scales

// Four codes (v >> sh, v >> sh + bits, ...) of `bits` bits minus `z`, as packed int8 lanes.
fn lanes(v: u32, sh: u32, bits: u32, z: i32) -> u32 {
  let shifts = vec4<u32>(0u, bits, 2u * bits, 3u * bits) + sh;
  let q = vec4<i32>((vec4<u32>(v) >> shifts) & vec4<u32>((1u << bits) - 1u));
  return pack4xI8(q - vec4<i32>(z));
}

// The 16 codes of the block at flat element e as four words of int8 lanes.
fn load_block(e: u32) -> vec4<u32> {
//#if INT8
  return w[e / 16u];
//#endif
//#if NIBBLES
  let v = w[e / 16u];
  return vec4<u32>(lanes(v.x, 0u, 4u, Z), lanes(v.x, 16u, 4u, Z), lanes(v.y, 0u, 4u, Z), lanes(v.y, 16u, 4u, Z));
//#endif
//#if INT2
  let v = w[e / 16u];
  return vec4<u32>(lanes(v, 0u, 2u, 0), lanes(v, 8u, 2u, 0), lanes(v, 16u, 2u, 0), lanes(v, 24u, 2u, 0));
//#endif
}

// Code offset folded into the lanes: q4_0's 8 (so its b is dropped), none for int4.
//#if Q4_0
const Z: i32 = 8;
//#else
const Z: i32 = 0;
//#endif

// acc plus one block's contribution: the i32 dot of its activation codes xb with its weight
// codes wb, scaled by the grid ab (OFFSET: minus b times the sum of the activation codes).
fn block_step(xb: vec4<u32>, wb: vec4<u32>, ab: vec2<f32>, acc: f32) -> f32 {
  let d = dot4I8Packed(xb.x, wb.x) + dot4I8Packed(xb.y, wb.y) + dot4I8Packed(xb.z, wb.z) + dot4I8Packed(xb.w, wb.w);
//#if OFFSET
  // sum of the block's activation codes: a dot with four 1 lanes per word.
  let one = 0x01010101u;
  let sxq = dot4I8Packed(xb.x, one) + dot4I8Packed(xb.y, one) + dot4I8Packed(xb.z, one) + dot4I8Packed(xb.w, one);
  return fma(f32(d), ab.x, fma(f32(sxq), -ab.y, acc));
//#else
  return fma(f32(d), ab.x, acc);
//#endif
}

//#if SERIAL
// Serial form (software adapters; see GpuContext.serial): thread t of a workgroup owns weight row
// n = flat workgroup index * ST + t and walks all of its blocks in order, acc[m] = fma(...) per
// block exactly as below, then writes acc[m] * sx[m]. No workgroup memory and no barrier. The
// order depends on neither M nor MT (batch invariance); it differs from the split form's.
const ST: u32 = {{ST}}u;

@compute @workgroup_size(ST)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let n = (wid.y * nwg.x + wid.x) * ST + t;
  if (n >= p.n_rows) {
    return;
  }
  let nblk = p.K / 16u;
  var acc: array<f32, MT>;
  for (var blk = 0u; blk < nblk; blk++) {
    let e = n * p.K + blk * 16u;
    let wb = load_block(e);
    let ab = grid_at(e);
    for (var m = 0u; m < MT; m++) {
      if (m < p.M) {
        acc[m] = block_step(xq[(p.x_off + m) * nblk + blk], wb, ab, acc[m]);
      }
    }
  }
  for (var m = 0u; m < p.M; m++) {
    y[m * p.N + p.n_off + n] = acc[m] * row_scale(m);
  }
}
//#else
//#include matmul_store

@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  // n: row of this part's weights; output column p.n_off + n.
  let n = wid.y * nwg.x + wid.x;
  if (n >= p.n_rows) {
    return;
  }
  let nblk = p.K / 16u;
  var acc: array<f32, MT>;
  for (var blk = t; blk < nblk; blk += TPR) {
    let e = n * p.K + blk * 16u;
    let wb = load_block(e);
    let ab = grid_at(e);
    for (var m = 0u; m < MT; m++) {
      if (m < p.M) {
        acc[m] = block_step(xq[(p.x_off + m) * nblk + blk], wb, ab, acc[m]);
      }
    }
  }
  store_rows(&acc, n, t);
}
//#endif
