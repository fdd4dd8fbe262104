// matmul_store: the last step of matmul_w8a8.wgsl (one weight row per workgroup), pulled in with
// `//#include matmul_store`; not a kernel of its own. (matmul_split_k.wgsl splits K differently and adds
// its lane sums in workgroup memory itself.)
//
// store_rows combines each thread's MT accumulators of weight row n over the workgroup's TPR
// threads and writes y[m, n_off + n] = sum * row_scale(m) for every m < p.M, by a fixed
// workgroup-memory tree over the thread index. Per output, the order depends on neither M, nor MT,
// nor the subgroup size (no subgroup operation: a device may give two pipelines different subgroup
// sizes), so a row's result is bit-identical in a GEMV and in any GEMM batch. Needs TPR, MT, RC, p
// (with M, N, n_off), y and the including kernel's row_scale(m); call from uniform control flow
// with every thread of the workgroup.

var<workgroup> red: array<f32, RC * TPR>;

fn store_rows(acc: ptr<function, array<f32, MT>>, n: u32, t: u32) {
  for (var m0 = 0u; m0 < MT; m0 += RC) {
    if (m0 >= p.M) {
      break;
    }
    for (var i = 0u; i < RC; i++) {
      red[i * TPR + t] = (*acc)[m0 + i];
    }
    workgroupBarrier();
    for (var h = TPR / 2u; h > 0u; h >>= 1u) {
      if (t < h) {
        for (var i = 0u; i < RC; i++) {
          red[i * TPR + t] += red[i * TPR + t + h];
        }
      }
      workgroupBarrier();
    }
    if (t < RC && m0 + t < p.M) {
      y[(m0 + t) * p.N + p.n_off + n] = red[t * TPR] * row_scale(m0 + t);
    }
    workgroupBarrier();
  }
}
