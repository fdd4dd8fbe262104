// head_features: the input feature of each row of a draft head (model/head.ts), gathered on the
// GPU so that a tree grown there needs no readback: the entry at position p takes the target's
// feature f_{p-1} while the target has scored position p - 1, else the output g of its parent
// entry, found through the row's visibility mask (its nearest visible slot before its own).
//
// Bindings (group 0): 0 uniform Params { H, known }; 1 positions: array<u32> [T];
//   2 slots: array<u32> [T], each row's own cache slot me; 3 vis: array<vec2<u32>> [T], per row a
//   64-bit mask (x low, y high), bit d marks slot me - d visible (as attention_split reads it);
//   4 target_feat: array<f32> [≥ known, H], row i the target's feature f_i; 5 own: array<f32>
//   [capacity, H], slot s the head's output g of the entry at slot s; 6 out: array<f32> [T, H].
// Row r, p = positions[r], me = slots[r]:
//   p == 0: zeros (position 0 has no feature; attention never shows its entry to later rows);
//   p - 1 < known: target_feat[p - 1];
//   else own[me - d], d the smallest of 1..63 whose bit is set in vis[r], or 64 when none is (slots
//   64 or more back are the committed prefix, always visible); zeros when me < d.
// Grid: (⌈H / WG⌉, T) workgroups; workgroup (x, r) writes columns x·WG .. x·WG + WG - 1 of row r.
//   T comes from num_workgroups, so `known` is the only value that changes between encodes.
// Preconditions: target_feat holds rows p - 1 < known; own holds every slot me - d read.

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;
@group(0) @binding(3) var<storage, read> vis: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read> target_feat: array<f32>;
@group(0) @binding(5) var<storage, read> own: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

// The distance to the nearest visible slot before the row's own: bit 0 (the row itself) ignored.
fn parent_distance(seen: vec2<u32>) -> u32 {
  let lo = seen.x & ~1u;
  if (lo != 0u) {
    return countTrailingZeros(lo);
  }
  if (seen.y != 0u) {
    return 32u + countTrailingZeros(seen.y);
  }
  return 64u;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let col = gid.x;
  let r = gid.y;
  if (col >= p.H) {
    return;
  }
  let pos = positions[r];
  var x = 0.0;
  if (pos > 0u && pos - 1u < p.known) {
    x = target_feat[(pos - 1u) * p.H + col];
  } else if (pos > 0u) {
    let me = slots[r];
    let d = parent_distance(vis[r]);
    if (me >= d) {
      x = own[(me - d) * p.H + col];
    }
  }
  out[r * p.H + col] = x;
}
