// kv_compact: after tree verification, moves the accepted path's rows to consecutive slots
// prefixLen, prefixLen + 1, ... of one layer's K and V cache.
//
// Cache layout: kc, vc [rows, row] moved as raw 32-bit words, so one kernel serves f32 caches
//   (row = kvHeads * headDim words) and f16-packed ones (row = kvHeads * headDim / 2 words). Slot s
//   lives at row cache_row(s, ring): s mod ring with a ring (rows = ring), s without (ring 0).
// Bindings (group 0): 0 uniform Params { count, row, prefixLen, capacity, ring } (row in u32 words);
//   1 slots: array<u32> [count] (source slot of path entry a, strictly increasing, ≥ prefixLen);
//   2 kc (read-write); 3 vc (read-write).
// Threads: one invocation per word column e < row; it moves that column of every path entry in order
//   a = 0, 1, ... Overlap is safe: with strictly increasing sources ≥ prefixLen, src[a] ≥
//   prefixLen + a, so entry a writes slot prefixLen + a < src[b] for every later b: no source is
//   overwritten before it is read, and invocations never share a column. With a ring the same holds
//   row for row: every slot involved lies in prefixLen .. prefixLen + ring - 1 (a path spans at
//   most 64 slots, ring ≥ 64), so distinct slots have distinct rows.
// Entries with src[a] ≥ capacity are skipped: a path a kernel chose on the GPU pads its slots with
//   0xffffffff up to the count the CPU encoded.
// Preconditions: as above for the entries below capacity, and src[a] < prefixLen + ring with a
//   ring (checked on CPU by the wrapper's helper when the CPU chose the path).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> slots: array<u32>;
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;

//#include kv_ring

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = gid.y * nwg.x * WG + gid.x;
  if (e >= p.row) {
    return;
  }
  for (var a = 0u; a < p.count; a++) {
    let src = slots[a];
    if (src >= p.capacity) {
      continue;
    }
    let s = cache_row(src, p.ring);
    let d = cache_row(p.prefixLen + a, p.ring);
    if (s != d) {
      kc[d * p.row + e] = kc[s * p.row + e];
      vc[d * p.row + e] = vc[s * p.row + e];
    }
  }
}
