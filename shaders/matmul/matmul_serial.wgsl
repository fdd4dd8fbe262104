// matmul_serial: the serial form of the matmul (software adapters; see GpuContext.kernels):
// y[m, n] = sum_k x[x_off + m, k] * W[n, k] (and the fusions), each output summed over all of K by
// one thread. One template serves GEMV (TM = 1) and GEMM (TM = 2, 4 or 8 rows of x per tile).
//
// Bindings and byte layout: matmul_common.wgsl's (included first): 0 uniform Params; 1 w (one part
//   of the matrix, read per 16-element block: vec4<u32> for F32, F16 and INT8, vec2<u32> for
//   NIBBLES, u32 for INT2, PLANAR and LATTICE, never WIDE); 2 x; 3 y; 4 scales (integer formats);
//   5 lattice (LATTICE); GAMMA_AT gamma (NORM) or route (GROUPS). Params.lanes is unused here.
// Threads: a workgroup of TPR = 4 threads (SERIAL_THREADS in TS); thread t computes the R = 8
//   output columns c0 .. c0 + R - 1 of the part, c0 = (flat workgroup index * TPR + t) * R (flat
//   index wid.y * nwg.x + wid.x; GROUPS: of group slot wid.z), for TM rows of x at a time,
//   walking every block of K itself in increasing order: acc = acc + dot16(block) per output. No workgroup memory and no barrier (a
//   CPU implementation pays microseconds per barrier and ~100 us per workgroup for zeroing
//   workgroup memory); x is read straight from its buffer. The loops over columns and tile rows
//   are unrolled (//#for) into named scalars, as a CPU implementation keeps an indexed local array
//   in memory: accumulators a{c}_{m} (column c, tile row m; u{c}_{m} for a gated pair's up rows),
//   weight-row starts e{c} (eu{c}), tile rows xr{m}. With a grid per group of 32 (GROUPED: int8,
//   q4_0, int4) a row's grid is computed at the group's first block and kept; the GEMV of such a
//   K % 32 == 0 matrix (PAIRS) walks a group per trip, its grid once, then its two blocks. The
//   order depends on neither M nor the tile, so rows are bit-identical whatever M is, as in
//   matmul_split_k.wgsl (whose sums differ from these). Tile rows past M read row M - 1 and are
//   neither summed nor written; columns past the part read its last row and are not written.
// NORM: each tile row's inv_rms comes from one thread (row_inv_rms) in rmsnorm.wgsl's 64-thread
//   sum order, so the 4-thread workgroup gives the same bits as RmsNorm.
// Preconditions (checked in TS): matmul_common.wgsl's (K % 16 == 0, parts start on a whole block
//   of codes and scales); PAIRS: K % 32 == 0.
//#include matmul_common

//#include matmul_block

//#if NORM
// x[i] * x[i] (the vec4 at i), or 0 past `end`: adding it leaves a sum of squares unchanged.
fn sq(i: u32, end: u32) -> vec4<f32> {
  if (i < end) {
    let v = x[i];
    return v * v;
  }
  return vec4<f32>(0.0);
}

// rmsnorm.wgsl's scale 1 / sqrt(mean(x^2) + eps) of row `row` of x, by one thread in the same sum
// order and ops: its 64 threads' partial sums s_t = x_t^2 + x_{t+64}^2 + ... (here the 16 vec4s
// s0 .. s15, component c of s_j being s_{4j+c}), then reduce.wgsl's tree over them (halving: 32,
// 16, ..., 1).
fn row_inv_rms(row: u32) -> f32 {
  let kv = p.K / 4u;
  let b = (p.x_off + row) * kv;
  let end = b + kv;
  var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
  var s4 = vec4<f32>(0.0); var s5 = vec4<f32>(0.0); var s6 = vec4<f32>(0.0); var s7 = vec4<f32>(0.0);
  var s8 = vec4<f32>(0.0); var s9 = vec4<f32>(0.0); var s10 = vec4<f32>(0.0); var s11 = vec4<f32>(0.0);
  var s12 = vec4<f32>(0.0); var s13 = vec4<f32>(0.0); var s14 = vec4<f32>(0.0); var s15 = vec4<f32>(0.0);
  for (var i = b; i < end; i += 16u) {
    s0 += sq(i, end); s1 += sq(i + 1u, end); s2 += sq(i + 2u, end); s3 += sq(i + 3u, end);
    s4 += sq(i + 4u, end); s5 += sq(i + 5u, end); s6 += sq(i + 6u, end); s7 += sq(i + 7u, end);
    s8 += sq(i + 8u, end); s9 += sq(i + 9u, end); s10 += sq(i + 10u, end); s11 += sq(i + 11u, end);
    s12 += sq(i + 12u, end); s13 += sq(i + 13u, end); s14 += sq(i + 14u, end); s15 += sq(i + 15u, end);
  }
  s0 += s8; s1 += s9; s2 += s10; s3 += s11; s4 += s12; s5 += s13; s6 += s14; s7 += s15;
  s0 += s4; s1 += s5; s2 += s6; s3 += s7;
  s0 += s2; s1 += s3;
  s0 += s1;
  let h = s0.xy + s0.zw;
  return 1.0 / sqrt((h.x + h.y) / f32(p.K) + p.eps);
}
//#endif

// The serial form: see the header.
@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let c0 = ((wid.y * nwg.x + wid.x) * TPR + t) * R;
  if (c0 >= p.n_rows) {
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
  let nblk = p.K / 16u;
  let kv = p.K / 4u;
  let last = p.n_rows - 1u;
  // First flat element of each column's weight row (columns past the part repeat its last row).
//#for c < R
  let e{{c}} = base + min(c0 + {{c}}u, last) * p.K;
//#if GATED
  let eu{{c}} = base + (min(c0 + {{c}}u, last) + p.n_rows) * p.K;
//#endif
//#endfor
  for (var m0 = 0u; m0 < M; m0 += TM) {
    let tr = min(TM, M - m0);
//#for m < TM
    let xr{{m}} = x_row(y0 + min(m0 + {{m}}u, M - 1u)) * kv;
//#endfor
//#if NORM
    // One call site in a loop, not one per tile row: each inlined copy of row_inv_rms's unrolled
    // sum costs SwiftShader's compiler about as much as the rest of the kernel (TM = 8: 2.6 s).
    var invs: array<f32, TM>;
    for (var m = 0u; m < TM; m++) {
      invs[m] = row_inv_rms(min(m0 + m, M - 1u));
    }
//#for m < TM
    let inv{{m}} = vec4<f32>(invs[{{m}}]);
//#endfor
//#endif
//#for c < R
//#for m < TM
    var a{{c}}_{{m}} = 0.0;
//#if GATED
    var u{{c}}_{{m}} = 0.0;
//#endif
//#endfor
//#if GROUPED
    var ab{{c}} = vec2<f32>(0.0);
//#if GATED
    var abu{{c}} = vec2<f32>(0.0);
//#endif
//#endif
//#endfor
//#if PAIRS
    for (var blk = 0u; blk < nblk; blk += 2u) {
//#else
    for (var blk = 0u; blk < nblk; blk += 1u) {
//#endif
      let j = blk * 4u;
//#if NORM
//#for q < 4
      let g{{q}} = norm_weight(j + {{q}}u);
//#endfor
//#if PAIRS
//#for q < 4
      let h{{q}} = norm_weight(j + {{q}}u + 4u);
//#endfor
//#endif
//#endif
//#for c < R
//#if PAIRS
      let f{{c}} = e{{c}} + blk * 16u;
      let ab{{c}} = grid_at(f{{c}});
      let w{{c}} = load_codes(f{{c}}, ab{{c}});
      let v{{c}} = load_codes(f{{c}} + 16u, ab{{c}});
//#if GATED
      let fu{{c}} = eu{{c}} + blk * 16u;
      let abu{{c}} = grid_at(fu{{c}});
      let wu{{c}} = load_codes(fu{{c}}, abu{{c}});
      let vu{{c}} = load_codes(fu{{c}} + 16u, abu{{c}});
//#endif
//#else
//#if GROUPED
      let f{{c}} = e{{c}} + blk * 16u;
      if (blk == 0u || (f{{c}} & 31u) == 0u) {
        ab{{c}} = grid_at(f{{c}});
      }
      let w{{c}} = load_codes(f{{c}}, ab{{c}});
//#if GATED
      let fu{{c}} = eu{{c}} + blk * 16u;
      if (blk == 0u || (fu{{c}} & 31u) == 0u) {
        abu{{c}} = grid_at(fu{{c}});
      }
      let wu{{c}} = load_codes(fu{{c}}, abu{{c}});
//#endif
//#else
      let w{{c}} = load_block(e{{c}} + blk * 16u);
//#if GATED
      let wu{{c}} = load_block(eu{{c}} + blk * 16u);
//#endif
//#endif
//#endif
//#endfor
//#for m < TM
      if ({{m}}u == 0u || tr > {{m}}u) {
//#if NORM
        let x{{m}} = Block(x[xr{{m}} + j] * inv{{m}} * g0, x[xr{{m}} + j + 1u] * inv{{m}} * g1, x[xr{{m}} + j + 2u] * inv{{m}} * g2, x[xr{{m}} + j + 3u] * inv{{m}} * g3);
//#else
        let x{{m}} = Block(x[xr{{m}} + j], x[xr{{m}} + j + 1u], x[xr{{m}} + j + 2u], x[xr{{m}} + j + 3u]);
//#endif
//#for c < R
        a{{c}}_{{m}} = a{{c}}_{{m}} + dot16(w{{c}}, x{{m}});
//#if GATED
        u{{c}}_{{m}} = u{{c}}_{{m}} + dot16(wu{{c}}, x{{m}});
//#endif
//#endfor
//#if PAIRS
//#if NORM
        let y{{m}} = Block(x[xr{{m}} + j + 4u] * inv{{m}} * h0, x[xr{{m}} + j + 5u] * inv{{m}} * h1, x[xr{{m}} + j + 6u] * inv{{m}} * h2, x[xr{{m}} + j + 7u] * inv{{m}} * h3);
//#else
        let y{{m}} = Block(x[xr{{m}} + j + 4u], x[xr{{m}} + j + 5u], x[xr{{m}} + j + 6u], x[xr{{m}} + j + 7u]);
//#endif
//#for c < R
        a{{c}}_{{m}} = a{{c}}_{{m}} + dot16(v{{c}}, y{{m}});
//#if GATED
        u{{c}}_{{m}} = u{{c}}_{{m}} + dot16(vu{{c}}, y{{m}});
//#endif
//#endfor
//#endif
      }
//#endfor
    }
//#for c < R
    if ({{c}}u == 0u || c0 + {{c}}u < p.n_rows) {
//#for m < TM
      if ({{m}}u == 0u || tr > {{m}}u) {
        let at = (y0 + m0 + {{m}}u) * p.N + p.n_off + c0 + {{c}}u;
//#if GATED
        store_out(at, a{{c}}_{{m}}, u{{c}}_{{m}});
//#else
        store_out(at, a{{c}}_{{m}}, 0.0);
//#endif
      }
//#endfor
    }
//#endfor
  }
}
