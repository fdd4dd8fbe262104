// reduce: workgroup reductions shared by the row kernels (rmsnorm, sample, sample_prob,
// quantize_act), pulled into a kernel with `//#include reduce`; not a kernel of its own.
//
// Each takes every thread's partial value and returns the combined value to every thread, by a
// fixed-order tree in workgroup memory (so a row's result never depends on how many rows share the
// dispatch). Needs WG (a power of two) declared before the include; call from uniform control flow,
// by every thread of the workgroup. The scratch is free again when a call returns.

var<workgroup> wg_scratch: array<f32, WG>;

fn wg_sum(v: f32, t: u32) -> f32 {
  wg_scratch[t] = v;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      wg_scratch[t] += wg_scratch[t + s];
    }
  }
  workgroupBarrier();
  let r = wg_scratch[0];
  workgroupBarrier(); // every thread has read the result before the scratch is reused
  return r;
}

fn wg_max(v: f32, t: u32) -> f32 {
  wg_scratch[t] = v;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      wg_scratch[t] = max(wg_scratch[t], wg_scratch[t + s]);
    }
  }
  workgroupBarrier();
  let r = wg_scratch[0];
  workgroupBarrier(); // every thread has read the result before the scratch is reused
  return r;
}
