// attention_merge: the reduce pass of split attention. Folds the per-chunk softmax partials that
// attention_split.wgsl wrote for rows whose keys span more than one chunk:
//   M = max_c m_c;  out = (Σ_c acc_c · e^(m_c - M)) / (Σ_c l_c · e^(m_c - M)), c = 0, 1, ... in order.
//
// Bindings (group 0): 0 slots: array<u32> [T] (each row's own slot, slots[T-1] the largest); 1 part: array<f32>
//   [T, kvHeads, nChunks, G · (D + 2)] (acc[g, d], then m[g], then l[g]; nChunks = slots[T-1] / CH + 1);
//   2 out: array<vec4<f32>> [T, heads, D] (written for rows with more than one chunk).
// Grid: (kvHeads, T) workgroups (T and kvHeads from num_workgroups: no uniform). Rows whose keys fit
//   chunk 0 (slots[r] < CH) were finished by the partial pass and are skipped.
// Threads: WG per workgroup; thread t folds vec4 columns i = t, t + WG, ... of the G · D / 4 outputs
//   of the (row, kv head), each over the row's chunks 0 ..= slots[r] / CH in order (a chunk with no
//   visible key has m = -3e38, l = 0 and weight 0). The order depends on absolute slots only.
// Preconditions: as attention_split.wgsl, with the same WG-independent CH, G and D.

const WG: u32 = {{WG}}u;
const CH: u32 = {{CH}}u;
const G: u32 = {{G}}u;
const D: u32 = {{D}}u;
const D4: u32 = D / 4u;

@group(0) @binding(0) var<storage, read> slots: array<u32>;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let kvh = wid.x;
  let r = wid.y;
  let kvHeads = nwg.x;
  let T = nwg.y;
  let chunks = slots[r] / CH + 1u;
  if (chunks == 1u) {
    return;
  }
  let nChunks = slots[T - 1u] / CH + 1u;
  let stride = G * (D + 2u);
  let pRow = (r * kvHeads + kvh) * nChunks * stride;
  for (var i = t; i < G * D4; i += WG) {
    let g = i / D4;
    var mMax = -3.0e38;
    for (var c = 0u; c < chunks; c++) {
      mMax = max(mMax, part[pRow + c * stride + G * D + g]);
    }
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < chunks; c++) {
      let pc = pRow + c * stride;
      let w = exp(part[pc + G * D + g] - mMax);
      l += part[pc + G * D + G + g] * w;
      acc += vec4<f32>(part[pc + 4u * i], part[pc + 4u * i + 1u], part[pc + 4u * i + 2u], part[pc + 4u * i + 3u]) * w;
    }
    out[(r * kvHeads + kvh) * G * D4 + i] = acc / l;
  }
}
