// matmul_w8a8: y[m, n] = sx[m] * sum_g sw[n, g] * sum_{k in g} qx[m, k] * qw[n, k], integer dot
// products (dot4I8Packed, i32) per 16-element block, f32 across blocks. Weights int8 (qw = q),
// int4 or int2 (qw = q - zero, unpacked into int8 lanes); activations from quantize_act.
//
// Bindings (group 0): 0 uniform Params; 1 w: array<u32> (one part of n_rows packed rows as in
//   matmul.wgsl, row n at word n * wpr); 2 xq: array<u32> [rows, K / 4] (int8, 4 per word);
//   3 sx: array<f32> [rows]; 4 y: array<f32> [M, N] (columns n_off .. n_off + n_rows written);
//   5 scales: array<f32> [n_rows, K / group]; 6 zeros [n_rows, K / group] (int4, int2).
// Threads: as matmul.wgsl: one workgroup of TPR = 64 per weight row of the part, thread t walks 16-element
//   blocks t, t + 64, ..., each weight block unpacked once for all M rows; the 64 partials are
//   combined and scaled by sx by store_rows (matmul_store.wgsl), in an order that never depends on
//   M or MT (batch invariance).
// Preconditions (checked in TS): K % 16 == 0, group % 16 == 0, M <= MT.
//#if SUBGROUPS
enable subgroups;
//#endif

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> sx: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> scales: array<f32>;
//#if ZEROS
@group(0) @binding(6) var<storage, read> zeros: array<f32>;
//#endif

const TPR: u32 = 64u;
const MT: u32 = {{MT}}u;
const RC: u32 = {{RC}}u;

//#include matmul_store

// The activation row's int8 scale.
fn row_scale(m: u32) -> f32 {
  return sx[p.x_off + m];
}

// Four codes (q >> sh, q >> sh + B, ...) of BITS bits minus the zero point, as packed int8 lanes.
fn lanes(v: u32, sh: u32, bits: u32, z: i32) -> u32 {
  let shifts = vec4<u32>(0u, bits, 2u * bits, 3u * bits) + sh;
  let q = vec4<i32>((vec4<u32>(v) >> shifts) & vec4<u32>((1u << bits) - 1u));
  return pack4xI8(q - vec4<i32>(z));
}

// The 16 weights of block `blk` of row n as four words of int8 lanes.
fn load_block(n: u32, blk: u32) -> vec4<u32> {
  let row = n * p.wpr;
//#if INT8
  let i = row + blk * 4u;
  return vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
//#endif
//#if INT4
  let z = i32(zeros[n * p.ngroups + (blk * 16u) / p.group]);
  let i = row + blk * 2u;
  return vec4<u32>(lanes(w[i], 0u, 4u, z), lanes(w[i], 16u, 4u, z), lanes(w[i + 1u], 0u, 4u, z), lanes(w[i + 1u], 16u, 4u, z));
//#endif
//#if INT2
  let z = i32(zeros[n * p.ngroups + (blk * 16u) / p.group]);
  let v = w[row + blk];
  return vec4<u32>(lanes(v, 0u, 2u, z), lanes(v, 8u, 2u, z), lanes(v, 16u, 2u, z), lanes(v, 24u, 2u, z));
//#endif
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
  var acc: array<f32, MT>;
  for (var blk = t; blk < nblk; blk += TPR) {
    let wb = load_block(n, blk);
    let s = scales[n * p.ngroups + (blk * 16u) / p.group];
    for (var m = 0u; m < MT; m++) {
      if (m < p.M) {
        let xb = xq[(p.x_off + m) * nblk + blk];
        let d = dot4I8Packed(xb.x, wb.x) + dot4I8Packed(xb.y, wb.y) + dot4I8Packed(xb.z, wb.z) + dot4I8Packed(xb.w, wb.w);
        acc[m] = fma(f32(d), s, acc[m]);
      }
    }
  }
//#if SUBGROUPS
  store_rows(&acc, n, t, lane);
//#else
  store_rows(&acc, n, t, 0u);
//#endif
}
