// matmul: y[m, n] = sum_k x[x_off + m, k] * W[n, k], with W packed in one weight format and
// dequantized in registers (never expanded in GPU memory). One template serves GEMV (MT = 1) and
// GEMM (MT = accumulators per thread, a power of two up to 64).
//
// Bindings (group 0): 0 uniform Params; 1 w: array<WTYPE> (one part of the matrix: n_rows rows,
//   the codes of its flat elements e = n * K + k from word 0, read as vec4<u32> for F32, F16 and
//   INT8, vec2<u32> for Q4_0 and INT4, u32 for INT2); 2 x: array<vec4<f32>> [rows, K];
//   3 y: array<f32> [M, N] (columns n_off .. n_off + n_rows written); 4 scales: array<u32> (the
//   part's block metadata from word 0, integer formats). Large matrices are dispatched per part;
//   a part starts on a group pair / super-block (checked in TS), so e indexes both arrays.
// Layouts (flat over e; see QuantizedMatrix in quant.ts), read per "block" of 16 elements
//   e .. e + 15 (e % 16 == 0, within one row, one group and one sub-block):
//   F32 16 words at e; F16 8 words at e / 2 (element 2j in the low half);
//   INT8 (Q8_0) 4 words at e / 4, byte e % 4, two's complement q; f16 d of group g = e >> 5 in
//     half g & 1 of scales[g >> 1]; w = d * q.
//   Q4_0 2 words at e / 8, nibble e % 8, q in [0, 15]; d as INT8; w = d * q - 8d.
//   INT4 (Q4_K) codes as Q4_0; super-block s = e >> 8 has scales[4s .. 4s + 3]: 6-bit sc_j at bit
//     6j and mn_j at bit 6(8 + j) of the 96-bit little-endian words 0-2 (j = (e >> 5) & 7), word
//     3 = f16 D | f16 M << 16; w = a * q - b, a = D * sc_j, b = M * mn_j.
//   INT2 (Q2_K) 1 word at e / 16, bits 2 * (e % 16), q in [0, 3]; scales[5s .. 5s + 4]: byte j & 3
//     of word j >> 2 = sc_j | mn_j << 4 (j = (e >> 4) & 15), word 4 = f16 D | f16 M << 16;
//     w = a * q - b as INT4.
//   Weights are dequantized in registers (w = fma(a, q, -b), exact as quant.ts's dequantize) and
//   multiplied in f32.
// Threads: one workgroup of TPR = 64 threads per weight row n of the part (flat workgroup index
//   wid.y * nwg.x + wid.x), writing output column n_off + n. Thread t walks blocks t, t + 64, ... of
//   row n; for each block it unpacks the 16 weights once and updates the accumulators of all M rows
//   of x, so every weight is read once per dispatch. The 64 partials of each output are then
//   combined by store_rows (matmul_store.wgsl) in an order that does not depend on M or MT: row r's
//   result is bit-identical in a GEMV and in any GEMM batch (explicit fma keeps compilers from
//   contracting differently per variant).
// Preconditions (checked in TS): K % 16 == 0, each part starts at a flat index that is a multiple
//   of 64 (INT8, Q4_0) or 256 (INT4, INT2), M <= MT.
//#if SUBGROUPS
enable subgroups;
//#endif

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<{{WTYPE}}>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
//#if SCALES
@group(0) @binding(4) var<storage, read> scales: array<u32>;
//#endif

const TPR: u32 = 64u;
const MT: u32 = {{MT}}u;
// Outputs reduced per round in workgroup memory (MT is a multiple of RC).
const RC: u32 = {{RC}}u;

//#include matmul_store

// Rows of x are plain f32: nothing to scale by (× 1 is exact).
fn row_scale(m: u32) -> f32 {
  return 1.0;
}

// 16 weights of one block, dequantized.
struct Block {
  a: vec4<f32>,
  b: vec4<f32>,
  c: vec4<f32>,
  d: vec4<f32>,
}

fn i8x4(v: u32) -> vec4<f32> {
  return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u));
}

fn u4x4(v: u32, sh: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(v) >> (vec4<u32>(0u, 4u, 8u, 12u) + sh)) & vec4<u32>(15u));
}

fn u2x4(v: u32, sh: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(v) >> (vec4<u32>(0u, 2u, 4u, 6u) + sh)) & vec4<u32>(3u));
}

//#include quant_scales

// Four codes q on the grid a * q - b (one rounding: a * q is exact).
fn deq(q: vec4<f32>, ab: vec2<f32>) -> vec4<f32> {
  return fma(q, vec4<f32>(ab.x), vec4<f32>(-ab.y));
}

// The 16 weights of the block at flat element e of the part.
fn load_block(e: u32) -> Block {
//#if F32
  let i = e / 4u;
  return Block(bitcast<vec4<f32>>(w[i]), bitcast<vec4<f32>>(w[i + 1u]), bitcast<vec4<f32>>(w[i + 2u]), bitcast<vec4<f32>>(w[i + 3u]));
//#endif
//#if F16
  let h0 = w[e / 8u];
  let h1 = w[e / 8u + 1u];
  return Block(
    vec4<f32>(unpack2x16float(h0.x), unpack2x16float(h0.y)),
    vec4<f32>(unpack2x16float(h0.z), unpack2x16float(h0.w)),
    vec4<f32>(unpack2x16float(h1.x), unpack2x16float(h1.y)),
    vec4<f32>(unpack2x16float(h1.z), unpack2x16float(h1.w)),
  );
//#endif
//#if INT8
  let v = w[e / 16u];
  let ab = grid_at(e);
  return Block(deq(i8x4(v.x), ab), deq(i8x4(v.y), ab), deq(i8x4(v.z), ab), deq(i8x4(v.w), ab));
//#endif
//#if NIBBLES
  let v = w[e / 16u];
  let ab = grid_at(e);
  return Block(deq(u4x4(v.x, 0u), ab), deq(u4x4(v.x, 16u), ab), deq(u4x4(v.y, 0u), ab), deq(u4x4(v.y, 16u), ab));
//#endif
//#if INT2
  let ab = grid_at(e);
  let v = w[e / 16u];
  return Block(deq(u2x4(v, 0u), ab), deq(u2x4(v, 8u), ab), deq(u2x4(v, 16u), ab), deq(u2x4(v, 24u), ab));
//#endif
}

fn dot4(a: vec4<f32>, b: vec4<f32>, c: f32) -> f32 {
  return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, c))));
}

@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
//#if SUBGROUPS
  @builtin(subgroup_invocation_id) lane: u32,
//#endif
) {
  // n: row of this part's weights; output column p.n_off + n.
  let n = wid.y * nwg.x + wid.x;
  if (n >= p.n_rows) {
    return;
  }
  let nblk = p.K / 16u;
  let k4 = p.K / 4u;
  var acc: array<f32, MT>;
  for (var blk = t; blk < nblk; blk += TPR) {
    let wb = load_block(n * p.K + blk * 16u);
    for (var m = 0u; m < MT; m++) {
      if (m < p.M) {
        let xi = (p.x_off + m) * k4 + blk * 4u;
        let part = dot4(wb.d, x[xi + 3u], dot4(wb.c, x[xi + 2u], dot4(wb.b, x[xi + 1u], dot4(wb.a, x[xi], 0.0))));
        acc[m] = acc[m] + part;
      }
    }
  }
//#if SUBGROUPS
  store_rows(&acc, n, t, lane);
//#else
  store_rows(&acc, n, t, 0u);
//#endif
}
