// matmul_gemm: the tiled GEMM of prefill (the GPU forms; src/kernels/matmul/matmul.ts takes it for
// a prompt chunk of at least GEMM_MIN_ROWS rows, never for decode or a draft tree):
// y[m, n] = sum_k x[x_off + m, k] * W[n, k] (and the fusions), a tile of x and a tile of the
// dequantized W staged in workgroup memory and RT x 4 CT outputs per thread kept in registers, so
// each weight is decoded once per TM rows and each staged value read once per RT or 4 CT outputs.
//
// Bindings and byte layout: matmul_common.wgsl's (included first): 0 uniform Params; 1 w (one part
//   of the matrix, read per 16-element block by matmul_block.wgsl: vec4<u32> for F32, F16 and
//   INT8, vec2<u32> for NIBBLES, u32 for INT2, PLANAR and LATTICE, never WIDE); 2 x; 3 y; 4 scales
//   (integer formats); 5 lattice (LATTICE); GAMMA_AT gamma (NORM). Params.lanes is unused.
// Threads: a workgroup of TPR = 64 threads, a grid of 8 x 8, computes the tile of TM = 8 RT rows of
//   x by R = 32 CT output columns (template values; src/kernels/matmul/plan.ts GEMM_*): tile tn =
//   f % tiles_n, tm = f / tiles_n of the flat workgroup index f = wid.y * nwg.x + wid.x, tiles_n =
//   ceil(n_rows / R). Thread t owns rows RT (t / 8) .. + RT - 1 and the CT vec4s of columns from
//   vec4 CT (t % 8) (GATED: those of the gate rows and of the up rows, WR = 2R weight rows).
// K walk: BK = 16 KB columns (KB = 2 blocks; 1 with GATED, so the stages fit 16 KiB) per step. Each
//   step the threads stage xs (the tile's x transposed, xs[k * TM + r]; NORM: x * inv_rms * g) and
//   ws (the WR weight rows' KB blocks dequantized by load_block, transposed as vec4s of 4 rows),
//   then each thread adds the BK outer products of its rows and columns in increasing k. Rows of x
//   past M read row M - 1, weight rows past the part its last row, a block past K zeros; none is
//   written. Every output sums its k in increasing order whatever M is, but in another order than
//   the serial and split-K forms (dot16's), so prefill's bits differ from decode's (within the
//   tests' tolerance); decode and draft trees never take this kernel.
// NORM: each tile row's inv_rms = 1 / sqrt(sum_k x^2 / K + eps) by one thread (vec4 partial sums
//   over K, then their components), computed once per workgroup.
// Preconditions (checked in TS): matmul_common.wgsl's (K % 16 == 0, parts start on a whole block
//   of codes and scales); no GROUPS.
//#include matmul_common
//#include matmul_block

// Blocks and columns of K per step (one block with GATED, whose stage of W is twice as tall: the
// stages stay within WebGPU's 16 KiB of workgroup memory); rows of x (RT) and vec4s of output
// columns (CT) per thread; vec4s of a staged column of W.
//#if GATED
const KB: u32 = 1u;
//#else
const KB: u32 = 2u;
//#endif
const BK: u32 = 16u * KB;
const RT: u32 = {{RT}}u;
const CT: u32 = {{CT}}u;
const WQ: u32 = WR / 4u;

var<workgroup> xs: array<f32, BK * TM>;
var<workgroup> ws: array<vec4<f32>, BK * WQ>;
//#if NORM
var<workgroup> inv_rms: array<f32, TM>;
//#endif

// Writes the 16 values of block v (columns 16 kb .. 16 kb + 15 of the step) of weight row r into
// the transposed stage.
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
  // This thread's first tile row and first vec4 of columns: the 8 threads of a row of the thread
  // grid share their rows of x.
  let r0 = (t / 8u) * RT;
  let j0 = (t % 8u) * CT;
//#for r < RT
//#for j < CT
  var a{{r}}_{{j}} = vec4<f32>(0.0);
//#if GATED
  var u{{r}}_{{j}} = vec4<f32>(0.0);
//#endif
//#endfor
//#endfor
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    // x: TM rows x BK / 4 vec4s, TPR at a time, stored transposed (xs[k * TM + r]).
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
      let at = 4u * q * TM + r;
      xs[at] = v.x;
      xs[at + TM] = v.y;
      xs[at + 2u * TM] = v.z;
      xs[at + 3u * TM] = v.w;
    }
    // W: WR rows x KB blocks, decoded once each.
    for (var i = t; i < WR * KB; i += TPR) {
      let r = i / KB;
      let kb = i % KB;
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
//#for j < CT
      let w{{j}} = ws[k * WQ + j0 + {{j}}u];
//#if GATED
      let v{{j}} = ws[k * WQ + R / 4u + j0 + {{j}}u];
//#endif
//#endfor
//#for r < RT
      let x{{r}} = vec4<f32>(xs[k * TM + r0 + {{r}}u]);
//#for j < CT
      a{{r}}_{{j}} = fma(x{{r}}, w{{j}}, a{{r}}_{{j}});
//#if GATED
      u{{r}}_{{j}} = fma(x{{r}}, v{{j}}, u{{r}}_{{j}});
//#endif
//#endfor
//#endfor
    }
    workgroupBarrier(); // every stage is read before the next step writes it
  }
//#for r < RT
//#for j < CT
  for (var c = 0u; c < 4u; c++) {
    let m = m0 + r0 + {{r}}u;
    let n = n0 + 4u * (j0 + {{j}}u) + c;
    if (m < p.M && n < p.n_rows) {
//#if GATED
      store_out(m * p.N + p.n_off + n, a{{r}}_{{j}}[c], u{{r}}_{{j}}[c]);
//#else
      store_out(m * p.N + p.n_off + n, a{{r}}_{{j}}[c], 0.0);
//#endif
    }
  }
//#endfor
//#endfor
}
