// attention_merge: the reduce pass of split attention. Folds the per-chunk softmax partials that
// attention_split.wgsl wrote for rows whose visible keys span more than one chunk:
//   M = max_c m_c;  out = (Σ_c acc_c · e^(m_c - M)) / (Σ_c l_c · e^(m_c - M)), c = first, ... in order.
//
// Bindings (group 0): 0 uniform Params { scale, first, window, ring, chunks } (attention_split's;
//   window and chunks are read); 1 slots: array<u32> [T] (each row's own slot); 2 positions:
//   array<u32> [T] (each row's position); 3 part: array<f32> [T, kvHeads, chunks, G · (D + 2)]
//   (acc[g, d], then m[g], then l[g]; chunk c at c mod chunks, as attention_split writes it);
//   4 out: array<vec4<f32>> [T, heads, D] (written for rows with more than one visible chunk).
// Grid: (kvHeads, T) workgroups (kvHeads from num_workgroups). A row's visible chunks are
//   first = lo / CH ..= last = slots[r] / CH, lo the start of its window (0 without one), as in
//   attention_split; rows with first == last were finished by the partial pass and are skipped, and
//   chunks before first hold no partial (the partial pass returned there) and are not read.
// Threads: WG per workgroup; thread t folds vec4 columns i = t, t + WG, ... of the G · D / 4 outputs
//   of the (row, kv head), each over the row's chunks first ..= last in order (a chunk with no
//   visible key has m = -3e38, l = 0 and weight 0). The order depends on absolute slots only.
// Preconditions: as attention_split.wgsl, with the same WG-independent CH, G and D.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const CH: u32 = {{CH}}u;
const G: u32 = {{G}}u;
const D: u32 = {{D}}u;
const D4: u32 = D / 4u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> slots: array<u32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;

// attention_split.wgsl's window_start: the first slot the row at slot `me`, position `pos` sees.
fn window_start(pos: u32, me: u32) -> u32 {
  if (p.window == 0u || pos < p.window) {
    return 0u;
  }
  return min(pos + 1u - p.window, me);
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let kvh = wid.x;
  let r = wid.y;
  let kvHeads = nwg.x;
  let me = slots[r];
  let first = window_start(positions[r], me) / CH;
  let last = me / CH;
  if (first == last) {
    return;
  }
  let stride = G * (D + 2u);
  let pRow = (r * kvHeads + kvh) * p.chunks * stride;
  for (var i = t; i < G * D4; i += WG) {
    let g = i / D4;
    var mMax = -3.0e38;
    for (var c = first; c <= last; c++) {
      mMax = max(mMax, part[pRow + (c % p.chunks) * stride + G * D + g]);
    }
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var c = first; c <= last; c++) {
      let pc = pRow + (c % p.chunks) * stride;
      let w = exp(part[pc + G * D + g] - mMax);
      l += part[pc + G * D + G + g] * w;
      acc += vec4<f32>(part[pc + 4u * i], part[pc + 4u * i + 1u], part[pc + 4u * i + 2u], part[pc + 4u * i + 3u]) * w;
    }
    out[(r * kvHeads + kvh) * G * D4 + i] = acc / l;
  }
}
