// matmul_gemm: the tiled GEMM of prefill (both kernel forms; src/kernels/matmul/matmul.ts takes it
// for a prompt chunk of at least GEMM_MIN_ROWS rows, never for decode or a draft tree):
// y[m, n] = sum_k x[x_off + m, k] * W[n, k] (and the fusions), a tile of x and a tile of the
// dequantized W staged in workgroup memory and a 4 x 4 block of outputs per thread kept in
// registers, so each weight is decoded once per TM rows and each x value read from workgroup
// memory once per four outputs.
//
// Bindings and byte layout: matmul_common.wgsl's (included first): 0 uniform Params; 1 w (one part
//   of the matrix, read per 16-element block by matmul_block.wgsl: vec4<u32> for F32, F16 and
//   INT8, vec2<u32> for NIBBLES, u32 for INT2, PLANAR and LATTICE, never WIDE); 2 x; 3 y; 4 scales
//   (integer formats); 5 lattice (LATTICE); GAMMA_AT gamma (NORM). Params.lanes is unused.
// Threads: a workgroup of TPR = 64 threads computes the tile of TM = 32 rows of x by R = 32 output
//   columns (tile tn = f % tiles_n, tm = f / tiles_n of the flat workgroup index f = wid.y * nwg.x
//   + wid.x, tiles_n = ceil(n_rows / R)); thread t owns rows 4 (t / 8) .. + 3 and columns 4 (t % 8)
//   .. + 3 of the tile (GATED: those of the gate rows and of the up rows, WR = 2R weight rows).
// K walk: BK = 32 columns (two blocks) per step. Each step the threads stage xs (the tile's x,
//   transposed: xs[k * TM / 4 + i] = rows 4i .. 4i + 3 at column k; NORM: x * inv_rms * g) and ws
//   (the WR weight rows' two blocks dequantized by load_block, transposed the same way), then each
//   thread adds the BK outer products of its 4 rows and 4 columns in increasing k. Rows of x past
//   M read row M - 1, weight rows past the part its last row, a block past K zeros; none is
//   written. Every output sums its k in increasing order whatever M is, but in another order than
//   the serial and split-K forms (dot16's), so prefill's bits differ from decode's (within the
//   tests' tolerance); decode and draft trees never take this kernel.
// NORM: each tile row's inv_rms = 1 / sqrt(sum_k x^2 / K + eps) by one thread (vec4 partial sums
//   over K, then their components), computed once per workgroup.
// Preconditions (checked in TS): matmul_common.wgsl's (K % 16 == 0, parts start on a whole block
//   of codes and scales); no GROUPS.
//#include matmul_common
//#include matmul_block

// Columns of K per step, vec4s of a staged column of x (TM / 4) and of W (WR / 4).
const BK: u32 = 32u;
const XQ: u32 = TM / 4u;
const WQ: u32 = WR / 4u;

var<workgroup> xs: array<vec4<f32>, BK * XQ>;
var<workgroup> ws: array<vec4<f32>, BK * WQ>;
//#if NORM
var<workgroup> inv_rms: array<f32, TM>;
//#endif

// Writes the 16 values of block b (columns 16 kb .. 16 kb + 15 of the step) for tile row or weight
// row r into a transposed stage (q vec4s per column).
fn stage_w(r: u32, kb: u32, v: Block) {
  let at = 16u * kb * WQ + r / 4u;
  let c = r % 4u;
  for (var j = 0u; j < 4u; j++) {
    ws[at + j * WQ][c] = v.a[j];
    ws[at + (4u + j) * WQ][c] = v.b[j];
    ws[at + (8u + j) * WQ][c] = v.c[j];
    ws[at + (12u + j) * WQ][c] = v.d[j];
  }
}

@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let tiles_n = (p.n_rows + R - 1u) / R;
  let f = wid.y * nwg.x + wid.x;
  let n0 = (f % tiles_n) * R;
  let m0 = (f / tiles_n) * TM;
  if (m0 >= p.M) {
    return;
  }
  let kv = p.K / 4u;
  let nblk = p.K / 16u;
  let last = p.n_rows - 1u;
//#if NORM
  if (t < TM) {
    let b = x_row(min(m0 + t, p.M - 1u)) * kv;
    var ss = vec4<f32>(0.0);
    for (var i = 0u; i < kv; i++) {
      let v = x[b + i];
      ss = fma(v, v, ss);
    }
    inv_rms[t] = 1.0 / sqrt((ss.x + ss.y + ss.z + ss.w) / f32(p.K) + p.eps);
  }
  workgroupBarrier();
//#endif
  // This thread's rows and columns of the tile (vec4 indices into a staged column).
  let ti = t / 8u;
  let tj = t % 8u;
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
//#if GATED
  var up0 = vec4<f32>(0.0);
  var up1 = vec4<f32>(0.0);
  var up2 = vec4<f32>(0.0);
  var up3 = vec4<f32>(0.0);
//#endif
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    // x: TM rows x BK / 4 vec4s, TPR at a time.
    for (var i = t; i < TM * (BK / 4u); i += TPR) {
      let r = i / (BK / 4u);
      let q = i % (BK / 4u);
      let k = k0 / 4u + q;
      var v = vec4<f32>(0.0);
      if (k < kv) {
        v = x[x_row(min(m0 + r, p.M - 1u)) * kv + k];
//#if NORM
        v = v * vec4<f32>(inv_rms[r]) * norm_weight(k);
//#endif
      }
      let at = 4u * q * XQ + r / 4u;
      let c = r % 4u;
      xs[at][c] = v.x;
      xs[at + XQ][c] = v.y;
      xs[at + 2u * XQ][c] = v.z;
      xs[at + 3u * XQ][c] = v.w;
    }
    // W: WR rows x 2 blocks, decoded once each.
    for (var i = t; i < WR * 2u; i += TPR) {
      let r = i / 2u;
      let kb = i % 2u;
      let blk = k0 / 16u + kb;
      var v = Block(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
      if (blk < nblk) {
        let n = min(n0 + r % R, last) + (r / R) * p.n_rows;
        v = load_block(n * p.K + blk * 16u);
      }
      stage_w(r, kb, v);
    }
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
      let xv = xs[k * XQ + ti];
      let wv = ws[k * WQ + tj];
      acc0 = fma(vec4<f32>(xv.x), wv, acc0);
      acc1 = fma(vec4<f32>(xv.y), wv, acc1);
      acc2 = fma(vec4<f32>(xv.z), wv, acc2);
      acc3 = fma(vec4<f32>(xv.w), wv, acc3);
//#if GATED
      let uv = ws[k * WQ + R / 4u + tj];
      up0 = fma(vec4<f32>(xv.x), uv, up0);
      up1 = fma(vec4<f32>(xv.y), uv, up1);
      up2 = fma(vec4<f32>(xv.z), uv, up2);
      up3 = fma(vec4<f32>(xv.w), uv, up3);
//#endif
    }
    workgroupBarrier(); // every stage is read before the next step writes it
  }
//#if !GATED
  let up0 = vec4<f32>(0.0);
  let up1 = vec4<f32>(0.0);
  let up2 = vec4<f32>(0.0);
  let up3 = vec4<f32>(0.0);
//#endif
  let accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
  let ups = array<vec4<f32>, 4>(up0, up1, up2, up3);
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + 4u * ti + i;
    for (var j = 0u; j < 4u; j++) {
      let n = n0 + 4u * tj + j;
      if (m < p.M && n < p.n_rows) {
        store_out((m) * p.N + p.n_off + n, accs[i][j], ups[i][j]);
      }
    }
  }
}
