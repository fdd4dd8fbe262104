// matmul: y[m, n] = sum_k x[x_off + m, k] * W[n, k], with W packed in one weight format and
// dequantized in registers (never expanded in GPU memory). One template serves GEMV (MT = 1) and
// GEMM (MT = accumulators per thread, a power of two up to 64).
//
// Bindings (group 0): 0 uniform Params; 1 w: array<u32> (one part of the matrix: n_rows packed rows,
//   row n starts at word n * wpr); 2 x: array<vec4<f32>> [rows, K]; 3 y: array<f32> [M, N] (columns
//   n_off .. n_off + n_rows written); 4 scales: array<f32> [n_rows, K / group] (int formats);
//   5 zeros: array<f32> [n_rows, K / group] (int4, int2). Large matrices are dispatched per part.
// Block layout: a "block" is 16 consecutive elements of a row: f32 16 words, f16 8 words (element
//   2j in the low half), int8 4 words (byte j%4, two's complement), int4 2 words (nibble j%8, code
//   q in [0,15]), int2 1 word (bits 2*(j%16), q in [0,3]); w = (q - zero) * scale.
// Threads: one workgroup of TPR = 64 threads per weight row n of the part (flat workgroup index
//   wid.y * nwg.x + wid.x), writing output column n_off + n. Thread t walks blocks t, t + 64, ... of row n; for each block it
//   unpacks the 16 weights once and updates the accumulators of all M rows of x, so every weight
//   is read once per dispatch. The 64 partials of each output are then combined by store_rows
//   (matmul_store.wgsl) in an order that does not depend on M or MT: row r's result is
//   bit-identical in a GEMV and in any GEMM batch (explicit fma keeps compilers from contracting
//   differently per variant).
// Preconditions (checked in TS): K % 16 == 0, K % group == 0, group % 16 == 0, M <= MT.
//#if SUBGROUPS
enable subgroups;
//#endif

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
//#if SCALES
@group(0) @binding(4) var<storage, read> scales: array<f32>;
//#endif
//#if ZEROS
@group(0) @binding(5) var<storage, read> zeros: array<f32>;
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

// 16 weights of one block, before the group scale.
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

fn load_block(n: u32, blk: u32) -> Block {
  let row = n * p.wpr;
//#if F32
  let i = row + blk * 16u;
  return Block(
    bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u])),
    bitcast<vec4<f32>>(vec4<u32>(w[i + 4u], w[i + 5u], w[i + 6u], w[i + 7u])),
    bitcast<vec4<f32>>(vec4<u32>(w[i + 8u], w[i + 9u], w[i + 10u], w[i + 11u])),
    bitcast<vec4<f32>>(vec4<u32>(w[i + 12u], w[i + 13u], w[i + 14u], w[i + 15u])),
  );
//#endif
//#if F16
  let i = row + blk * 8u;
  return Block(
    vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u])),
    vec4<f32>(unpack2x16float(w[i + 2u]), unpack2x16float(w[i + 3u])),
    vec4<f32>(unpack2x16float(w[i + 4u]), unpack2x16float(w[i + 5u])),
    vec4<f32>(unpack2x16float(w[i + 6u]), unpack2x16float(w[i + 7u])),
  );
//#endif
//#if INT8
  let i = row + blk * 4u;
  return Block(i8x4(w[i]), i8x4(w[i + 1u]), i8x4(w[i + 2u]), i8x4(w[i + 3u]));
//#endif
//#if INT4
  let i = row + blk * 2u;
  let z = vec4<f32>(zeros[n * p.ngroups + (blk * 16u) / p.group]);
  let w0 = w[i];
  let w1 = w[i + 1u];
  return Block(u4x4(w0, 0u) - z, u4x4(w0, 16u) - z, u4x4(w1, 0u) - z, u4x4(w1, 16u) - z);
//#endif
//#if INT2
  let z = vec4<f32>(zeros[n * p.ngroups + (blk * 16u) / p.group]);
  let v = w[row + blk];
  return Block(u2x4(v, 0u) - z, u2x4(v, 8u) - z, u2x4(v, 16u) - z, u2x4(v, 24u) - z);
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
    let wb = load_block(n, blk);
//#if SCALES
    let s = scales[n * p.ngroups + (blk * 16u) / p.group];
//#endif
    for (var m = 0u; m < MT; m++) {
      if (m < p.M) {
        let xi = (p.x_off + m) * k4 + blk * 4u;
        let part = dot4(wb.d, x[xi + 3u], dot4(wb.c, x[xi + 2u], dot4(wb.b, x[xi + 1u], dot4(wb.a, x[xi], 0.0))));
//#if SCALES
        acc[m] = fma(part, s, acc[m]);
//#else
        acc[m] = acc[m] + part;
//#endif
      }
    }
  }
//#if SUBGROUPS
  store_rows(&acc, n, t, lane);
//#else
  store_rows(&acc, n, t, 0u);
//#endif
}
