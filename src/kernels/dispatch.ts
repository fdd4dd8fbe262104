/**
 * Workgroup counts for `count` workgroups laid out in x first, then y when x would pass the
 * device's per-dimension limit (65535 by default). Kernels recover the flat workgroup index as
 * `wid.y * nwg.x + wid.x` and must ignore indices past the work.
 */
export function grid(count: number, maxPerDim = 65535): [number, number] {
  if (count <= maxPerDim) return [Math.max(1, count), 1];
  const y = Math.ceil(count / maxPerDim);
  return [Math.ceil(count / y), y];
}
