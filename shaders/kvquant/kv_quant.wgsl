// kv_quant: writes new key/value rows into an int8 or int4 KV cache at explicit slots (what kv_write
// does for f32 and f16 caches), rotating keys, and the queries that will score them, per head first
// with ROTATE.
//
// Cache layout (per layer): kc, vc: array<u32> [rows, kvHeads, HW], HW = 1 + B words per head:
//   word 0 the head's scale (f32 bits), then B = D / PER words of values, PER per word (INT4: 8,
//   element PER·j + n in bits 4n.. as q + 8; else 4, element 4j + n in byte n, two's complement).
//   Value = q · scale, q = clamp(round(x / scale), ±LEVELS) rounded to nearest even, scale =
//   max|x| · (1 / LEVELS) (0 for a zero head: every q 0). Slot s at row cache_row(s, ring).
// Rotation (ROTATE): a head x [D] becomes R x = H_D (s ⊙ x) / √D, s the ±1 signs SIGNS (bit i of
//   word i / 32 set: -1), H_D the natural-order Walsh-Hadamard butterflies (stage h pairs i, i + h);
//   keys before rounding, queries in place, so q·k is unchanged (R orthogonal). D a power of two.
// Bindings (group 0): 0 uniform Params { M, heads, kvHeads, capacity, ring };
//   without Q_ONLY: 1 slots: array<u32> [M]; 2 k, 3 v: array<f32> [M, kvHeads, D]; 4 kc, 5 vc
//   (written); with ROTATE then 6 q: array<f32> [M, heads, D] (rotated in place). With Q_ONLY (a
//   layer that reads another's rotated cache) only 1 q.
// Grid: (units, M) workgroups of WG threads, one head of one row each: units 0 .. kvHeads - 1 the
//   keys, kvHeads .. 2·kvHeads - 1 the values, then with ROTATE the heads query heads (Q_ONLY: only
//   those). Thread t holds elements t, t + WG, ... in workgroup memory; the butterflies and the
//   max|x| are fixed-order, so a row's words never depend on the rows beside it. Slots ≥ capacity
//   are skipped.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const D: u32 = {{D}}u;
const PER: u32 = {{PER}}u; // values per word
const B: u32 = D / PER; // value words per head
const HW: u32 = B + 1u; // words per head: the scale, then the values
const LEVELS: f32 = {{LEVELS}}.0;

@group(0) @binding(0) var<uniform> p: Params;
//#if Q_ONLY
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
//#else
@group(0) @binding(1) var<storage, read> slots: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
//#if ROTATE
@group(0) @binding(6) var<storage, read_write> q: array<f32>;
//#endif
//#endif

//#include reduce
//#include kv_ring

var<workgroup> x: array<f32, D>;

//#if ROTATE
const SIGNS = array<u32, {{SIGN_WORDS}}>({{SIGNS}});

// x ← R x in workgroup memory (every thread of the workgroup calls it).
fn rotate(t: u32) {
  for (var i = t; i < D; i += WG) {
    if (((SIGNS[i / 32u] >> (i % 32u)) & 1u) == 1u) {
      x[i] = -x[i];
    }
  }
  for (var h = 1u; h < D; h *= 2u) {
    workgroupBarrier();
    // Pair j of D / 2: its low element i (bit h clear), and i + h.
    for (var j = t; j < D / 2u; j += WG) {
      let i = (j / h) * 2u * h + j % h;
      let a = x[i];
      let b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
  workgroupBarrier();
  let s = inverseSqrt(f32(D));
  for (var i = t; i < D; i += WG) {
    x[i] = x[i] * s;
  }
  workgroupBarrier();
}
//#endif

//#if !Q_ONLY
// Rounds the head in x into the words at `base` of kc (isK) or vc (when `write`).
fn store(base: u32, isK: bool, write: bool, t: u32) {
  var m = 0.0;
  for (var i = t; i < D; i += WG) {
    m = max(m, abs(x[i]));
  }
  let scale = wg_max(m, t) * (1.0 / LEVELS);
  for (var j = t; j < HW; j += WG) {
    var w = 0u;
    if (j == 0u) {
      w = bitcast<u32>(scale);
    } else if (scale > 0.0) {
      for (var n = 0u; n < PER; n++) {
        let qv = i32(clamp(round(x[(j - 1u) * PER + n] / scale), -LEVELS, LEVELS));
//#if INT4
        w |= u32(qv + 8) << (4u * n);
//#else
        w |= (bitcast<u32>(qv) & 0xffu) << (8u * n);
//#endif
      }
    }
    if (write && isK) {
      kc[base + j] = w;
    } else if (write) {
      vc[base + j] = w;
    }
  }
}
//#endif

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let m = wid.y;
  let u = wid.x;
//#if Q_ONLY
  let qh = u;
  let isQ = true;
//#else
  let qh = u - 2u * p.kvHeads;
  let isQ = u >= 2u * p.kvHeads; // only launched with ROTATE
//#endif
//#if ROTATE
  if (isQ) { // uniform across the workgroup (from workgroup_id)
    let o = (m * p.heads + qh) * D;
    for (var i = t; i < D; i += WG) {
      x[i] = q[o + i];
    }
    rotate(t);
    for (var i = t; i < D; i += WG) {
      q[o + i] = x[i];
    }
    return;
  }
//#endif
//#if !Q_ONLY
  let isK = u < p.kvHeads;
  let kh = select(u - p.kvHeads, u, isK);
  let src = (m * p.kvHeads + kh) * D;
  for (var i = t; i < D; i += WG) {
    x[i] = select(v[src + i], k[src + i], isK);
  }
  workgroupBarrier();
//#if ROTATE
  if (isK) { // uniform across the workgroup: rotate's barriers are reached by all
    rotate(t);
  }
//#endif
  // Past capacity nothing is written (the rounding's barriers still run in every thread).
  let slot = slots[m];
  store((cache_row(slot, p.ring) * p.kvHeads + kh) * HW, isK, slot < p.capacity, t);
//#endif
}
