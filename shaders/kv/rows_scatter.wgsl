// rows_scatter: copies new rows into a row store at explicit slots, as kv_write does for the KV
// cache (the runner keeps the target model's per-position hidden states, the draft head's
// features, at the same slots as the KV rows).
//
// Store layout: store [capacity, row] f32, slot s = the row of the token at cache slot s.
// Bindings (group 0): 0 uniform Params { M, row, capacity };
//   1 slots: array<u32> [M]; 2 src: array<f32> [M, row]; 3 store (written).
// Threads: one invocation per element of the new rows, flat index over the grid
//   (gid.y * nwg.x * WG + gid.x); element i is column i % row of row i / row. Slots ≥ capacity are
//   skipped (padding of a slot list a kernel chose on the GPU).
// Preconditions: slots below capacity distinct (two rows for one slot would race).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> slots: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> store: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
  if (i >= p.M * p.row) {
    return;
  }
  let slot = slots[i / p.row];
  if (slot >= p.capacity) {
    return;
  }
  store[slot * p.row + i % p.row] = src[i];
}
