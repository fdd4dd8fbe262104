// attention: softmax(q · Kᵀ · scale) · V for T query rows against the KV cache, one kernel for
// decode, causal prefill and tree verification.
//
// Bindings (group 0): 0 uniform Params { T, heads, kvHeads, headDim, base, scale };
//   1 q: array<f32> [T, heads, headDim]; 2 kc: [capacity, kvHeads, headDim];
//   3 vc: [capacity, kvHeads, headDim]; 4 ends: array<u32> [T];
//   5 out: array<f32> [T, heads, headDim] (written).
// Cache element type: f32, or with KV_F16 IEEE halves packed two per u32 (element 2j in the low
//   16 bits, read with unpack2x16float: no shader-f16 needed).
// Visibility: query row r (0 ≤ r < T) stands at cache slot base + r and sees every prefix slot
//   s < base plus tree slot base + j for j ≤ r with ends[j] ≥ r (j is r or an ancestor of r when
//   rows are a depth-first tree and ends[j] is the last row of j's subtree). A chain (ends[j] = T-1)
//   is causal prefill; T = 1 is decode. No dense mask.
// GQA: query head h reads kv head h / (heads / kvHeads).
// Threads: one workgroup of WG threads per (row, head) (flat workgroup index r * heads + h over
//   the grid). Keys go in chunks of WG: thread t scores key c0 + t (a full dot product over
//   headDim, q staged in workgroup memory); then every thread folds the chunk into an online
//   softmax (running max m, normaliser l) for the output dims it owns (d = t, t + WG, ...). The
//   order of keys is fixed per row, so a row's output does not depend on T (batch invariance).
// Preconditions: headDim ≤ min(256, 4 * WG); heads % kvHeads == 0; base + T ≤ capacity; every key/value
//   slot in [0, base + T) written.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const DPT: u32 = 4u; // output dims per thread: headDim ≤ DPT * WG
const MASKED: f32 = -3.0e38;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
//#if KV_F16
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;

fn k_at(i: u32) -> f32 {
  return unpack2x16float(kc[i >> 1u])[i & 1u];
}

fn v_at(i: u32) -> f32 {
  return unpack2x16float(vc[i >> 1u])[i & 1u];
}
//#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;

fn k_at(i: u32) -> f32 {
  return kc[i];
}

fn v_at(i: u32) -> f32 {
  return vc[i];
}
//#endif
@group(0) @binding(4) var<storage, read> ends: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> qs: array<f32, 256>; // q of this (row, head); headDim ≤ 256
var<workgroup> scores: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let flat = wid.y * nwg.x + wid.x;
  if (flat >= p.T * p.heads) {
    return;
  }
  let r = flat / p.heads;
  let h = flat % p.heads;
  let D = p.headDim;
  let kvh = h / (p.heads / p.kvHeads);
  let kvStride = p.kvHeads * D;
  let qBase = flat * D;
  for (var d = t; d < D; d += WG) {
    qs[d] = q[qBase + d];
  }
  workgroupBarrier();

  let nk = p.base + r + 1u; // slots 0 ..= base + r may be visible
  var m = MASKED;
  var l = 0.0;
  var acc = array<f32, DPT>(0.0, 0.0, 0.0, 0.0);
  for (var c0 = 0u; c0 < nk; c0 += WG) {
    let s = c0 + t;
    var score = MASKED;
    if (s < nk && (s < p.base || ends[s - p.base] >= r)) {
      let kBase = s * kvStride + kvh * D;
      var dot = 0.0;
      for (var d = 0u; d < D; d++) {
        dot += qs[d] * k_at(kBase + d);
      }
      score = dot * p.scale;
    }
    scores[t] = score;
    workgroupBarrier();
    let n = min(WG, nk - c0);
    var cm = MASKED;
    for (var j = 0u; j < n; j++) {
      cm = max(cm, scores[j]);
    }
    let mNew = max(m, cm);
    if (mNew > MASKED) {
      let corr = exp(m - mNew);
      l *= corr;
      for (var i = 0u; i < DPT; i++) {
        acc[i] *= corr;
      }
      for (var j = 0u; j < n; j++) {
        let sj = scores[j];
        if (sj == MASKED) {
          continue;
        }
        let pj = exp(sj - mNew);
        l += pj;
        let vBase = (c0 + j) * kvStride + kvh * D;
        for (var i = 0u; i < DPT; i++) {
          let d = t + i * WG;
          if (d < D) {
            acc[i] += pj * v_at(vBase + d);
          }
        }
      }
      m = mNew;
    }
    workgroupBarrier(); // scores are rewritten by the next chunk
  }
  for (var i = 0u; i < DPT; i++) {
    let d = t + i * WG;
    if (d < D) {
      out[qBase + d] = acc[i] / l;
    }
  }
}
