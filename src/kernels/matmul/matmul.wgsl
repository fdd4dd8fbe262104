// matmul: y[m, n] = sum_k x[x_off + m, k] * W[n, k], with W packed in one weight format and
// dequantized in registers (never expanded in GPU memory), and optionally the layer's neighbours
// fused in. One template serves GEMV (MT = 1) and GEMM (MT = accumulators per thread, a power of
// two up to 64).
//
// Bindings (group 0): 0 uniform Params; 1 w: array<WTYPE> (one part of the matrix: its flat
//   elements e = n * K + k from word 0, read as vec4<u32> for F32, F16 and INT8, vec2<u32> for
//   Q4_0 and INT4, u32 for INT2); 2 x: array<vec4<f32>> [rows, K]; 3 y: array<f32> [M, N]
//   (columns n_off .. n_off + n_rows written; read too with ADD); 4 scales: array<u32> (the part's
//   block metadata from word 0, integer formats); GAMMA_AT gamma: array<vec4<f32>> [K] (NORM).
//   Large matrices are dispatched per part; a part starts on a group pair / super-block (checked in
//   TS), so e indexes both arrays.
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
//   multiplied in f32. HALF (device with shader-f16, F16 weights): the halves are read as f16 and
//   widened, the same values as unpack2x16float.
// Fusions (one of each side per variant):
//   NORM (prologue): x is the un-normed residual; the kernel multiplies W by
//     x[m, k] * inv_rms[m] * g[k] (g = gamma, or 1 + gamma with ONE_PLUS), inv_rms = 1 / sqrt(
//     sum_k x^2 / K + eps) computed by every workgroup exactly as rmsnorm.wgsl (64 threads, thread
//     t sums k = t, t + 64, ..., then reduce.wgsl's tree): the same bits as RmsNorm then Matmul.
//   ADD (epilogue): y[m, n] = y[m, n] + result, the add kernel's op (x += W·a).
//   SILU (epilogue): the part holds n_rows gate rows then n_rows up rows (a gated pair); output
//     y[m, n_off + n] = silu(g) * u as elementwise.wgsl computes it, g = gate_n · x, u = up_n · x.
// Threads: a workgroup of TPR = 64 threads computes R output columns n0 .. n0 + R - 1 of the part
//   (n0 = R * flat workgroup index wid.y * nwg.x + wid.x), i.e. WR = R weight rows (2R with SILU).
//   Thread t walks blocks t, t + 64, ... of those rows; for each block it unpacks each row's 16
//   weights once and updates the accumulators of all M rows of x (GEMV: the x block is loaded once
//   and reused for the R rows). Every output's partials are thus the same whatever R and MT are;
//   they are combined per output by subgroupAdd then the subgroup leaders' sums added in thread
//   order (SUBGROUPS), or by a fixed workgroup-memory tree, so a row's result is bit-identical in a
//   GEMV and in any GEMM batch (explicit fma keeps compilers from contracting differently).
// Preconditions (checked in TS): K % 16 == 0, each part starts at a flat index that is a multiple
//   of 64 (INT8, Q4_0) or 256 (INT4, INT2) (with SILU, so does its up half), M <= MT.
//#if SUBGROUPS
enable subgroups;
//#endif
//#if HALF
enable f16;
//#endif

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<{{WTYPE}}>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
//#if SCALES
@group(0) @binding(4) var<storage, read> scales: array<u32>;
//#endif
//#if NORM
@group(0) @binding({{GAMMA_AT}}) var<storage, read> gamma: array<vec4<f32>>;
//#endif

const TPR: u32 = 64u;
const MT: u32 = {{MT}}u;
// Output columns per workgroup, and the weight rows they read.
const R: u32 = {{R}}u;
//#if SILU
const WR: u32 = 2u * R;
//#else
const WR: u32 = R;
//#endif
// Outputs reduced per round in workgroup memory.
const RC: u32 = {{RC}}u;

// 16 weights (or 16 inputs) of one block.
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

// Four f16 weights of two words, widened to f32.
fn h4(a: u32, b: u32) -> vec4<f32> {
//#if HALF
  return vec4<f32>(vec4<f16>(bitcast<vec2<f16>>(a), bitcast<vec2<f16>>(b)));
//#else
  return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
//#endif
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
  return Block(h4(h0.x, h0.y), h4(h0.z, h0.w), h4(h1.x, h1.y), h4(h1.z, h1.w));
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

//#if NORM
const WG: u32 = TPR;
//#include reduce

// inv_rms of each row of x (NORM), computed once per workgroup.
var<workgroup> inv_rms: array<f32, MT>;

// rmsnorm.wgsl's scale of row m: 1 / sqrt(mean(x^2) + eps), same sum order and ops.
fn row_inv_rms(m: u32, t: u32) -> f32 {
  let base = (p.x_off + m) * p.K;
  var ss = 0.0;
  for (var i = t; i < p.K; i += TPR) {
    let v = x[(base + i) / 4u][i % 4u];
    ss += v * v;
  }
  return 1.0 / sqrt(wg_sum(ss, t) / f32(p.K) + p.eps);
}

fn norm_weight(j: u32) -> vec4<f32> {
//#if ONE_PLUS
  return 1.0 + gamma[j];
//#else
  return gamma[j];
//#endif
}
//#endif

// The 16 inputs of block blk of row m of x (NORM: x * inv_rms * g, rmsnorm's op order).
fn load_x(m: u32, blk: u32) -> Block {
  let i = (p.x_off + m) * (p.K / 4u) + blk * 4u;
//#if NORM
  let s = vec4<f32>(inv_rms[m]);
  return Block(
    x[i] * s * norm_weight(blk * 4u),
    x[i + 1u] * s * norm_weight(blk * 4u + 1u),
    x[i + 2u] * s * norm_weight(blk * 4u + 2u),
    x[i + 3u] * s * norm_weight(blk * 4u + 3u),
  );
//#else
  return Block(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
//#endif
}

fn dot4(a: vec4<f32>, b: vec4<f32>, c: f32) -> f32 {
  return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, c))));
}

// One block's contribution to one output: the fixed order every variant uses.
fn dot16(wb: Block, xb: Block) -> f32 {
  return dot4(wb.d, xb.d, dot4(wb.c, xb.c, dot4(wb.b, xb.b, dot4(wb.a, xb.a, 0.0))));
}

var<workgroup> red: array<f32, RC * TPR>;
// The combined sums of the workgroup's live outputs o = r * M + m.
var<workgroup> res: array<f32, WR * MT>;

// Combines every thread's accumulators into res (every thread calls it: uniform control flow).
fn reduce_outputs(acc: ptr<function, array<f32, WR * MT>>, t: u32, lane: u32) {
  let live = WR * p.M;
  for (var o0 = 0u; o0 < live; o0 += RC) {
    for (var i = 0u; i < RC; i++) {
      let o = min(o0 + i, live - 1u);
      let v = (*acc)[(o / p.M) * MT + o % p.M];
//#if SUBGROUPS
      let s = subgroupAdd(v);
      red[i * TPR + t] = select(0.0, s, lane == 0u);
//#else
      red[i * TPR + t] = v;
//#endif
    }
    workgroupBarrier();
//#if SUBGROUPS
    if (t < RC && o0 + t < live) {
      var sum = 0.0;
      for (var j = 0u; j < TPR; j++) {
        sum += red[t * TPR + j];
      }
      res[o0 + t] = sum;
    }
//#else
    for (var h = TPR / 2u; h > 0u; h >>= 1u) {
      if (t < h) {
        for (var i = 0u; i < RC; i++) {
          red[i * TPR + t] += red[i * TPR + t + h];
        }
      }
      workgroupBarrier();
    }
    if (t < RC && o0 + t < live) {
      res[o0 + t] = red[t * TPR];
    }
//#endif
    workgroupBarrier();
  }
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
  // Output columns n0 .. n0 + R - 1 of the part; past-the-end workgroups exit together.
  let n0 = (wid.y * nwg.x + wid.x) * R;
  if (n0 >= p.n_rows) {
    return;
  }
//#if NORM
  for (var m = 0u; m < p.M; m++) {
    let s = row_inv_rms(m, t);
    if (t == 0u) {
      inv_rms[m] = s;
    }
  }
  workgroupBarrier();
//#endif
  let nblk = p.K / 16u;
  // First flat element of weight row r (rows past the part repeat its last row; not written).
  var row_e: array<u32, WR>;
  for (var r = 0u; r < WR; r++) {
    let n = min(n0 + r % R, p.n_rows - 1u) + (r / R) * p.n_rows;
    row_e[r] = n * p.K;
  }
  var acc: array<f32, WR * MT>;
  for (var blk = t; blk < nblk; blk += TPR) {
    if (MT == 1u) {
      let xb = load_x(0u, blk);
      for (var r = 0u; r < WR; r++) {
        acc[r] = acc[r] + dot16(load_block(row_e[r] + blk * 16u), xb);
      }
    } else {
      for (var r = 0u; r < WR; r++) {
        let wb = load_block(row_e[r] + blk * 16u);
        for (var m = 0u; m < MT; m++) {
          if (m < p.M) {
            acc[r * MT + m] = acc[r * MT + m] + dot16(wb, load_x(m, blk));
          }
        }
      }
    }
  }
//#if SUBGROUPS
  reduce_outputs(&acc, t, lane);
//#else
  reduce_outputs(&acc, t, 0u);
//#endif
  // Output o = r * M + m of this workgroup → y[m, n_off + n0 + r].
  for (var o = t; o < R * p.M; o += TPR) {
    let r = o / p.M;
    let m = o % p.M;
    if (n0 + r < p.n_rows) {
      let at = m * p.N + p.n_off + n0 + r;
//#if SILU
      let g = res[o];
      y[at] = g / (1.0 + exp(-g)) * res[o + R * p.M];
//#else
//#if ADD
      y[at] = y[at] + res[o];
//#else
      y[at] = res[o];
//#endif
//#endif
    }
  }
}
