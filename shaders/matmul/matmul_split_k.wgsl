// matmul_split_k: the split-K form of the matmul (GPUs; see GpuContext.kernels):
// y[m, n] = sum_k x[x_off + m, k] * W[n, k] (and the fusions), K of each output split over KL
// lanes whose sums are added in lane order. One template serves GEMV (TM = 1) and GEMM (TM = 2,
// 4 or 8 rows of x per tile).
//
// Bindings and byte layout: matmul_common.wgsl's (included first): 0 uniform Params (p.lanes = KL);
//   1 w (one part of the matrix: vec4<u32> for F32, F16, INT8 and the WIDE reads of 2-, 4-, 5- and
//   6-bit codes, else vec2<u32> for NIBBLES, u32 for INT2, PLANAR and LATTICE); 2 x; 3 y;
//   4 scales (integer formats); 5 lattice (LATTICE); GAMMA_AT gamma (NORM) or route (GROUPS).
// Threads: a workgroup of TPR = 64 threads computes the RG * R = COLS output columns n0 .. n0 +
//   COLS - 1 of the part (n0 = COLS * flat workgroup index wid.y * nwg.x + wid.x; GROUPS: of group
//   slot wid.z). Thread t is lane t % KL of row group t / KL (KL = p.lanes lanes per output, a
//   power of two from 4 to 64 chosen per matrix by the TS side, RG = 64 / KL groups); group g owns
//   columns n0 + g * R .. + R - 1, i.e. WR = R weight rows (2R with GATED: gate rows then up rows). R = 1 in the GEMV, 2 in the
//   tiles.
// K walk: K is cut into units of U consecutive 16-element blocks, the blocks UV 16-byte loads read
//   (U = 1, one block of UV loads: 4 for F32, 2 for F16, 1 for INT8 and the narrow NIBBLES /
//   INT2 / PLANAR reads of 8, 4 or 12 bytes; WIDE: U = 2 for NIBBLES, 4 for INT2, one vec4 of codes
//   each; U = 8 (a chunk) for 5-bit PLANAR in 4 + 1 loads and for Q3_K in 2 + 1, U = 4 (half a
//   chunk) for Q6_K in 2 + 1: the low vec4s, then the high one). Lane l owns the units
//   l, l + KL, l + 2 KL, ... of K and takes them UT at a time (a trip): it first loads every code
//   word and grid word of the trip's units for its WR rows (UT * WR * UV loads of 16 bytes, issued
//   before any is used: the bytes a thread has in flight), then for each unit in increasing order
//   and each of its blocks in order adds acc = acc + dot16(block, x block) per output, reading x
//   (f32, L1/L2-resident) straight from its buffer. Then the KL lane sums of an output are added in
//   lane order by one thread (workgroup memory). That order depends on neither M, nor the tile, nor
//   UT, nor COLS, nor the subgroup size, so a row's result is bit-identical in a GEMV and in any
//   GEMM batch (explicit fma keeps compilers from contracting differently).
// Tiles: the M rows of x are taken TM at a time (the last tile may be short); each weight block is
//   loaded once per tile and multiplied by the TM rows: WR * TM accumulators per thread. NORM: the
//   workgroup sums each tile row's squares as rmsnorm.wgsl's 64 threads do (tile_inv_rms).
// Preconditions (checked in TS): matmul_common.wgsl's (K % 16 == 0, parts start on a whole block
//   of codes and scales); WIDE: K % (16 U) == 0, so every unit's loads are aligned vec4<u32>s of one
//   row.
//#include matmul_common

// Blocks per unit, 16-byte code loads per unit, units per trip; code and grid words of a trip.
const U: u32 = {{U}}u;
const UV: u32 = {{UV}}u;
const UT: u32 = {{UT}}u;
const NC: u32 = WR * UT * UV;
const NS: u32 = WR * UT;

// Load v (< UV) of the codes of the unit whose first block is at flat element e.
fn unit_word(e: u32, v: u32) -> vec4<u32> {
//#if F32
  return w[e / 4u + v];
//#endif
//#if F16
  return w[e / 8u + v];
//#endif
//#if INT8
  return w[e / 16u];
//#endif
//#if NIBBLES
//#if WIDE
  return w[e / 32u];
//#else
  return vec4<u32>(w[e / 16u], 0u, 0u);
//#endif
//#endif
//#if INT2
//#if WIDE
  return w[e / 64u];
//#else
  return vec4<u32>(w[e / 16u], 0u, 0u, 0u);
//#endif
//#endif
//#if PLANAR
//#if WIDE
  // The unit's U LB / 8 low vec4s, then the vec4 of the high planes that holds its bits.
  let at = (e >> 7u) * (CW / 4u);
  let r = e & 127u;
  if (v < U * LB / 8u) {
    return w[at + ((r * LB) >> 7u) + v];
  }
  return w[at + LB + ((r * HB) >> 7u)];
//#else
  return vec4<u32>(planar_words(e), 0u);
//#endif
//#endif
//#if LATTICE
  return lattice_words(e);
//#endif
}

// Block b (< U) of the unit whose code loads start at c[at], on grid ab (integer formats).
fn unit_block(c: ptr<function, array<vec4<u32>, NC>>, at: u32, b: u32, ab: vec2<f32>) -> Block {
//#if F32
  return Block(bitcast<vec4<f32>>((*c)[at]), bitcast<vec4<f32>>((*c)[at + 1u]), bitcast<vec4<f32>>((*c)[at + 2u]), bitcast<vec4<f32>>((*c)[at + 3u]));
//#endif
//#if F16
  return f16_block((*c)[at], (*c)[at + 1u]);
//#endif
//#if INT8
  return int8_block((*c)[at], ab);
//#endif
//#if NIBBLES
  let v = (*c)[at];
  return nibble_block(v[2u * b], v[2u * b + 1u], ab);
//#endif
//#if INT2
  return int2_block((*c)[at][b], ab);
//#endif
//#if PLANAR
//#if WIDE
  // Block b's low words: word (LB b / 2) % 4 of low vec4 LB b / 8 (and the next, LB = 4).
  let lo = (*c)[at + (b * LB) / 8u];
  let i = ((b * LB) / 2u) & 3u;
  let hi = (*c)[at + U * LB / 8u][(b * HB) >> 1u] >> ((16u * b * HB) & 31u);
  return planar_block(lo[i], lo[min(i + 1u, 3u)], hi, ab);
//#else
  let v = (*c)[at];
  return planar_block(v.x, v.y, v.z, ab);
//#endif
//#endif
//#if LATTICE
  return lattice_block((*c)[at], ab.x);
//#endif
}

//#if NORM
// Each tile row's inv_rms (NORM).
var<workgroup> inv_rms: array<f32, TM>;
var<workgroup> ss_scratch: array<f32, TM * TPR>;

// rmsnorm.wgsl's scale 1 / sqrt(mean(x^2) + eps) of rows m0 .. m0 + TM - 1 of x (rows past M: 1):
// thread t sums k = t, t + 64, ..., then reduce.wgsl's tree, the same sum order and ops, run for
// the TM rows side by side.
fn tile_inv_rms(m0: u32, t: u32) {
  for (var m = 0u; m < TM; m++) {
    var ss = 0.0;
    if (m0 + m < p.M) {
      let base = (p.x_off + m0 + m) * p.K;
      for (var i = t; i < p.K; i += TPR) {
        let v = x[(base + i) / 4u][i % 4u];
        ss += v * v;
      }
    }
    ss_scratch[m * TPR + t] = ss;
  }
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      for (var m = 0u; m < TM; m++) {
        ss_scratch[m * TPR + t] += ss_scratch[m * TPR + t + s];
      }
    }
  }
  workgroupBarrier();
  if (t < TM) {
    inv_rms[t] = 1.0 / sqrt(ss_scratch[t * TPR] / f32(p.K) + p.eps);
  }
  workgroupBarrier();
}
//#endif

// The 16 inputs of block blk of tile row m (NORM: x * inv_rms * g, rmsnorm's op order).
fn x_block(row: u32, m: u32, blk: u32) -> Block {
  let i = row * (p.K / 4u) + blk * 4u;
//#if NORM
  let s = vec4<f32>(inv_rms[m]);
  let j = blk * 4u;
  return Block(x[i] * s * norm_weight(j), x[i + 1u] * s * norm_weight(j + 1u), x[i + 2u] * s * norm_weight(j + 2u), x[i + 3u] * s * norm_weight(j + 3u));
//#else
  return Block(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
//#endif
}

// Lane sums of accumulator a = r * TM + m of row group g: red[((g * WR + r) * TM + m) * KL + lane]
// (RG * KL = TPR whatever KL is).
var<workgroup> red: array<f32, TPR * WR * TM>;

@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  // Lanes per output (a uniform: one pipeline serves every matrix of a format), row groups, and
  // the output columns n0 .. n0 + COLS - 1 of the part; past-the-end workgroups exit together.
  let KL = p.lanes;
  let COLS = (TPR / KL) * R;
  let n0 = (wid.y * nwg.x + wid.x) * COLS;
  if (n0 >= p.n_rows) {
    return;
  }
  // The rows of x (M), the first output row (y0) and the flat element the weights start at (base).
//#if GROUPS
  let grp = route_group(wid.z);
  if (grp.count == 0u) {
    return;
  }
  let M = grp.count;
  let y0 = grp.first;
  let base = grp.base;
//#else
  let M = p.M;
  let y0 = 0u;
  let base = 0u;
//#endif
  let lane = t % KL;
  let g = t / KL;
  let units = p.K / (16u * U);
  // First flat element of weight row r (rows past the part repeat its last row; not written).
  var row_e: array<u32, WR>;
  for (var r = 0u; r < WR; r++) {
    let n = min(n0 + g * R + r % R, p.n_rows - 1u) + (r / R) * p.n_rows;
    row_e[r] = base + n * p.K;
  }
  for (var m0 = 0u; m0 < M; m0 += TM) {
//#if NORM
    tile_inv_rms(m0, t);
//#endif
    var acc = array<f32, WR * TM>();
    // Rows of this tile within M (the last tile may be short; its other rows are not computed).
    let tr = min(TM, M - m0);
    for (var i0 = 0u; i0 * KL + lane < units; i0 += UT) {
      // The trip's loads first: every code word and grid word of its units, for every weight row
      // (a unit past the end reloads the last one, which is not summed).
      var c: array<vec4<u32>, NC>;
//#if SCALES
      var sw: array<vec4<u32>, NS>;
//#endif
      for (var s = 0u; s < UT; s++) {
        let u = min((i0 + s) * KL + lane, units - 1u);
        for (var r = 0u; r < WR; r++) {
          let e = row_e[r] + u * U * 16u;
          for (var v = 0u; v < UV; v++) {
            c[(r * UT + s) * UV + v] = unit_word(e, v);
          }
//#if SCALES
          sw[r * UT + s] = scale_words(e);
//#endif
        }
      }
      // Then the units in increasing order, a unit's blocks in order.
      for (var s = 0u; s < UT; s++) {
        let u = (i0 + s) * KL + lane;
        if (u < units) {
          for (var b = 0u; b < U; b++) {
            let blk = u * U + b;
            for (var r = 0u; r < WR; r++) {
              var ab = vec2<f32>(0.0);
//#if SCALES
              ab = grid_of(sw[r * UT + s], row_e[r] + blk * 16u);
//#endif
              let wb = unit_block(&c, (r * UT + s) * UV, b, ab);
              for (var m = 0u; m < tr; m++) {
                acc[r * TM + m] = acc[r * TM + m] + dot16(wb, x_block(x_row(y0 + m0 + m), m, blk));
              }
            }
          }
        }
      }
    }
    for (var a = 0u; a < WR * TM; a++) {
      red[(g * WR * TM + a) * KL + lane] = acc[a];
    }
    workgroupBarrier();
    // Output o = c * TM + m (column c, tile row m): its KL lane sums added in lane order.
    for (var o = t; o < COLS * TM; o += TPR) {
      let c = o / TM;
      let m = o % TM;
      let gc = c / R;
      let at0 = ((gc * WR + c % R) * TM + m) * KL;
      var sum = 0.0;
      for (var l = 0u; l < KL; l++) {
        sum += red[at0 + l];
      }
      if (n0 + c < p.n_rows && m0 + m < M) {
        let at = (y0 + m0 + m) * p.N + p.n_off + n0 + c;
        var u = 0.0;
//#if GATED
        for (var l = 0u; l < KL; l++) {
          u += red[at0 + R * TM * KL + l];
        }
//#endif
        store_out(at, sum, u);
      }
    }
    workgroupBarrier(); // every sum is read before the next tile writes red
  }
}
