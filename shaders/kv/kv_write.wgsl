// kv_write: copies new key/value rows into the KV cache at explicit slots.
//
// Cache layout (per layer): kc, vc [rows, kvHeads, headDim], row = one slot of
//   row = kvHeads * headDim elements: f32, or with KV_F16 IEEE halves packed two per u32 (element 2j
//   in the low 16 bits, rounded to nearest even by half_bits, as the TS reference rounds; row is even
//   since headDim is). Slot s lives at row cache_row(s, ring): s mod ring with a ring (rows =
//   ring), s without one (ring 0, rows = capacity).
// Bindings (group 0): 0 uniform Params { M, row, capacity, ring };
//   1 slots: array<u32> [M]; 2 k: array<f32> [M, row]; 3 v: array<f32> [M, row];
//   4 kc (written); 5 vc (written).
// Threads: one invocation per cache word (an element, or with KV_F16 a pair of elements) of the
//   new rows, flat index over the grid (gid.y * nwg.x * WG + gid.x). Slots ≥ capacity are skipped
//   (the wrapper's convenience function rejects them on CPU). Preconditions: slots distinct, and
//   distinct mod ring with a ring (at most ring consecutive slots).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> slots: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
//#if KV_F16
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
//#else
@group(0) @binding(4) var<storage, read_write> kc: array<f32>;
@group(0) @binding(5) var<storage, read_write> vc: array<f32>;
//#endif

//#if KV_F16
//#include half_bits
//#endif
//#include kv_ring

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
//#if KV_F16
  let words = p.row / 2u;
//#else
  let words = p.row;
//#endif
  if (i >= p.M * words) {
    return;
  }
  let slot = slots[i / words];
  if (slot >= p.capacity) {
    return;
  }
  let dst = cache_row(slot, p.ring) * words + i % words;
//#if KV_F16
  // Rows are contiguous in k and v, so word i holds elements 2i and 2i + 1.
  kc[dst] = half_bits(k[2u * i]) | (half_bits(k[2u * i + 1u]) << 16u);
  vc[dst] = half_bits(v[2u * i]) | (half_bits(v[2u * i + 1u]) << 16u);
//#else
  kc[dst] = k[i];
  vc[dst] = v[i];
//#endif
}
